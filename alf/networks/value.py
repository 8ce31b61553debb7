"""Value networks: state -> scalar value."""
from typing import Sequence

import gin
import torch
from torch import nn

from alf.networks.encoding import (EncodingNetwork, observation_shape,
                                   orthogonal_init)


@gin.configurable
class ValueNetwork(nn.Module):
    """An MLP mapping an observation batch [B, ...] to values [B].

    Args:
        observation_space: a Box space.
        hidden_sizes: widths of the hidden layers.
        activation: activation name (see `EncodingNetwork`).
        conv_layers: convolutions for image observations (see
            `EncodingNetwork`).
    """

    def __init__(self, observation_space, hidden_sizes: Sequence[int] = (64, 64),
                 activation: str = "tanh", conv_layers: Sequence = ()):
        super().__init__()
        self.encoder = EncodingNetwork(observation_shape(
            type(self).__name__, observation_space), hidden_sizes,
                                       activation, conv_layers,
                                       owner=type(self).__name__)
        self.head = orthogonal_init(nn.Linear(self.encoder.output_size, 1), 1.0)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        """Returns values of shape [B]."""
        return self.head(self.encoder(observation)).squeeze(-1)
