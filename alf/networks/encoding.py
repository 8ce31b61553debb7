"""Multi-layer perceptron encoders with orthogonal initialisation."""
import math
from typing import Sequence, Tuple

import gin
import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from alf.utils.errors import ConfigError, one_line

_ACTIVATIONS = {"tanh": torch.tanh, "relu": torch.relu, "elu": F.elu,
                "silu": F.silu, "gelu": F.gelu}


def get_activation(name: str):
    """Returns the activation function called ``name``."""
    if name not in _ACTIVATIONS:
        raise ConfigError(f"unknown activation {name!r}; valid: "
                         f"{sorted(_ACTIVATIONS)}")
    return _ACTIVATIONS[name]


def orthogonal_init(layer: nn.Module, gain: float) -> nn.Module:
    """Orthogonal weights with ``gain`` and zero bias (PPO's usual init)."""
    weight, bias = layer.weight, layer.bias
    # A Linear or Conv2d with a bias (nn.Module.__getattr__ is untyped).
    assert isinstance(weight, torch.Tensor) and isinstance(bias, torch.Tensor)
    nn.init.orthogonal_(weight, gain)
    nn.init.zeros_(bias)
    return layer


INITS = ("orthogonal", "torch")


def check_init(init: str) -> None:
    """Raises ConfigError naming the valid choices for an unknown ``init``."""
    if init not in INITS:
        raise ConfigError(f"unknown init {init!r}; valid: {INITS}")


def init_layer(layer: nn.Module, gain: float, init: str) -> nn.Module:
    """Initialises ``layer`` by ``init``: ``orthogonal`` (`orthogonal_init`
    with ``gain``) or ``torch`` (PyTorch's default, as constructed: what
    Stable-Baselines3's and CleanRL's DQN use)."""
    check_init(init)
    return orthogonal_init(layer, gain) if init == "orthogonal" else layer


def linear_chain(x: torch.Tensor, layers, activation,
                 activate_last: bool = True,
                 detach_params: bool = False) -> torch.Tensor:
    """``x`` through nn.Linear ``layers``, ``activation`` after each (but
    the last unless ``activate_last``).

    Functional calls: nn.Module dispatch per layer costs as much as the
    layer itself at RL's small batch sizes.

    Args:
        detach_params: use the weights as constants (gradients reach ``x``
            only).
    """
    last = len(layers) - 1
    for i, layer in enumerate(layers):
        w, b = layer.weight, layer.bias
        if detach_params:
            w, b = w.detach(), b.detach()
        x = F.linear(x, w, b)
        if activate_last or i < last:
            x = activation(x)
    return x


def observation_shape(owner: str, space) -> Tuple[int, ...]:
    """The shape of one observation of ``space``, which ``owner``'s layers
    take: arrays of at least one dimension (a Box, MultiBinary or
    MultiDiscrete space; integer ones are read as float32).

    Raises:
        ConfigError: for a space of no such shape (Dict, Tuple, Discrete,
            a Box of shape ()), naming it and the wrapper that flattens it.
    """
    shape = getattr(space, "shape", None)
    if isinstance(space, _ARRAY_SPACES) and shape and len(shape) >= 1:
        return tuple(shape)
    text = " ".join(str(space).split())  # numpy breaks long bounds
    raise ConfigError(
        f"{owner} takes observations that are arrays of at least one "
        f"dimension (a Box, MultiBinary or MultiDiscrete space); the "
        f"environment's space is {text}: flatten it with "
        "gymnasium.wrappers.FlattenObservation (a Discrete one becomes "
        "one-hot; for alf's gym suite: load.wrappers = "
        "(@flatten_observation,))")


def check_box_widths(owner: str, space, whose: str = "the action space is"
                     ) -> None:
    """Refuses a Box with a dimension of no width (low == high), which a
    policy squashed onto its bounds divides by: SAC's loss went non-finite
    at its first update, with nothing to say why.

    Raises:
        ConfigError: naming ``owner``, the space, its dimensions of no
            width and the fix.
    """
    flat = np.flatnonzero(~(np.asarray(space.high) > np.asarray(space.low)))
    if flat.size:
        text = " ".join(str(space).split())
        raise ConfigError(
            f"{owner} needs low < high in every dimension of its Box; "
            f"{whose} {text}, whose dimension(s) "
            f"{', '.join(map(str, flat.tolist()))} have no width: a "
            "constant action is the environment's to set (an "
            "ActionWrapper)")


_ARRAY_SPACES = (gym.spaces.Box, gym.spaces.MultiBinary,
                 gym.spaces.MultiDiscrete)


def flat_size(space) -> int:
    """Number of floats in one (flattened) sample of a Box space."""
    return int(np.prod(space.shape))


def check_hidden_sizes(owner: str, hidden_sizes: Sequence[int]) -> None:
    """Refuses ``owner.hidden_sizes`` unless every size is a positive
    integer: a 0 made a layer of no units, a network constant in its
    input, without a word.

    Raises:
        ConfigError: naming the binding and its value.
    """
    if any(isinstance(n, bool) or not isinstance(n, int) or n < 1
           for n in hidden_sizes):
        raise ConfigError(f"{owner}.hidden_sizes={tuple(hidden_sizes)!r}; "
                          "every layer size must be a positive integer, e.g. "
                          "(64, 64)")


@gin.configurable
class EncodingNetwork(nn.Module):
    """Optional convolutions, then ``Linear -> activation`` layers.

    Args:
        input_shape: shape of one input. With ``conv_layers``, an image
            ``(H, W, C)`` (channels last, as gymnasium and MetaDrive's
            top-down view give them); otherwise anything, flattened.
        hidden_sizes: width of each fully connected layer; empty means
            identity (after flattening).
        activation: one of ``tanh``, ``relu``, ``elu``, ``silu``, ``gelu``.
        conv_layers: ``(channels, kernel, stride)`` per convolution, e.g.
            the Nature-DQN stack ``((32, 8, 4), (64, 4, 2), (64, 3, 1))``;
            each is followed by a ReLU.
        init: ``orthogonal`` (gain sqrt(2), zero biases) or ``torch``
            (PyTorch's default); see `init_layer`.
        owner: the configurable whose ``hidden_sizes`` these are, for the
            message that refuses a bad one (``QNetwork``).
    """

    def __init__(self, input_shape, hidden_sizes: Sequence[int] = (64, 64),
                 activation: str = "tanh", conv_layers: Sequence = (),
                 init: str = "orthogonal", owner: str = "EncodingNetwork"):
        super().__init__()
        check_init(init)  # also when there is no layer to initialise
        check_hidden_sizes(owner, hidden_sizes)
        if isinstance(input_shape, int):
            input_shape = (input_shape, )
        input_shape = tuple(input_shape)
        self._activation = get_activation(activation)
        self.conv = None
        if conv_layers:
            if len(input_shape) != 3:
                raise ConfigError(f"conv_layers need (H, W, C) inputs; got "
                                  f"shape {input_shape}")
            convs, channels = [], input_shape[2]
            for out, kernel, stride in conv_layers:
                convs += [init_layer(nn.Conv2d(channels, out, kernel, stride),
                                     math.sqrt(2), init),
                          nn.ReLU()]
                channels = out
            self.conv = nn.Sequential(*convs)
            with torch.no_grad():
                probe = torch.zeros((1, ) + input_shape).permute(0, 3, 1, 2)
                try:
                    input_size = self.conv(probe).numel()
                except RuntimeError as e:
                    # e.g. "Kernel size can't be greater than actual input
                    # size": a stack for larger images, or a channels-first
                    # image read as (H, W, C).
                    raise ConfigError(
                        f"{owner}.conv_layers={tuple(conv_layers)!r} do not "
                        f"fit an image of shape {input_shape} read as (H, W, "
                        f"C), channels last ({one_line(e)}): use smaller "
                        "kernels or strides, or give the image channels "
                        "last") from e
        else:
            input_size = int(np.prod(input_shape))
        self.layers = nn.ModuleList()
        for size in hidden_sizes:
            self.layers.append(
                init_layer(nn.Linear(input_size, size), math.sqrt(2), init))
            input_size = size
        self.output_size = input_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Maps ``x`` of shape [B, ...] to features of shape [B, output_size]."""
        if self.conv is not None:
            x = self.conv(x.permute(0, 3, 1, 2))  # [B, H, W, C] -> NCHW
        return linear_chain(x.flatten(1), self.layers, self._activation)
