"""Multi-layer perceptron encoders with orthogonal initialisation."""
import math
from typing import Sequence

import gin
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

_ACTIVATIONS = {"tanh": torch.tanh, "relu": torch.relu, "elu": F.elu,
                "silu": F.silu, "gelu": F.gelu}


def get_activation(name: str):
    """Returns the activation function called ``name``."""
    if name not in _ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}; valid: "
                         f"{sorted(_ACTIVATIONS)}")
    return _ACTIVATIONS[name]


def orthogonal_init(layer: nn.Linear, gain: float) -> nn.Linear:
    """Orthogonal weights with ``gain`` and zero bias (PPO's usual init)."""
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def flat_size(space) -> int:
    """Number of floats in one (flattened) observation of a Box space."""
    return int(np.prod(space.shape))


@gin.configurable
class EncodingNetwork(nn.Module):
    """Flattens the input and applies ``Linear -> activation`` layers.

    Args:
        input_size: number of input features (after flattening).
        hidden_sizes: width of each hidden layer; empty means identity.
        activation: one of ``tanh``, ``relu``, ``elu``, ``silu``, ``gelu``.
    """

    def __init__(self, input_size: int, hidden_sizes: Sequence[int] = (64, 64),
                 activation: str = "tanh"):
        super().__init__()
        self._activation = get_activation(activation)
        self.layers = nn.ModuleList()
        for size in hidden_sizes:
            self.layers.append(
                orthogonal_init(nn.Linear(input_size, size), math.sqrt(2)))
            input_size = size
        self.output_size = input_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Maps ``x`` of shape [B, ...] to features of shape [B, output_size]."""
        x = x.flatten(1)
        # Functional calls: nn.Module dispatch per layer costs as much as the
        # layer itself at RL's small batch sizes.
        for layer in self.layers:
            x = self._activation(F.linear(x, layer.weight, layer.bias))
        return x
