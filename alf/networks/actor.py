"""Actor networks producing action distributions (categorical or Gaussian)."""
from typing import Sequence

import gin
import gymnasium as gym
import torch
from torch import nn

from alf.networks.distributions import (Categorical, DiagGaussian,
                                        TanhGaussian)
from alf.networks.encoding import EncodingNetwork, flat_size, orthogonal_init
from alf.utils.errors import ConfigError


@gin.configurable
class ActorDistributionNetwork(nn.Module):
    """An MLP whose output parameterises a distribution over actions.

    Discrete action spaces get a categorical distribution over logits; Box
    action spaces get a diagonal Gaussian whose log standard deviation is a
    state-independent parameter, squashed onto the box by tanh with
    ``squash`` (`TanhGaussian`; the environment then clips nothing, and
    the deterministic action is one the policy takes).

    Args:
        observation_space: a Box space.
        action_space: a Discrete or Box space.
        hidden_sizes: widths of the hidden layers.
        activation: activation name (see `EncodingNetwork`).
        init_log_std: initial log standard deviation (Box actions).
        conv_layers: convolutions for image observations (see
            `EncodingNetwork`).
        squash: Box actions: a `TanhGaussian` onto the bounds instead of
            a Gaussian that the environment clips (needs finite bounds).
    """

    # Buffers, registered only with ``squash``.
    action_low: torch.Tensor
    action_high: torch.Tensor

    def __init__(self, observation_space, action_space,
                 hidden_sizes: Sequence[int] = (64, 64),
                 activation: str = "tanh", init_log_std: float = 0.0,
                 conv_layers: Sequence = (), squash: bool = False):
        super().__init__()
        self.encoder = EncodingNetwork(observation_space.shape, hidden_sizes,
                                       activation, conv_layers)
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        self.squash = squash and not self.discrete
        if self.discrete:
            out = int(action_space.n)
        elif isinstance(action_space, gym.spaces.Box):
            out = flat_size(action_space)
            self.log_std = nn.Parameter(torch.full((out,), init_log_std))
            if squash:
                low = torch.as_tensor(action_space.low, dtype=torch.float32)
                high = torch.as_tensor(action_space.high, dtype=torch.float32)
                if not (torch.isfinite(low).all() and
                        torch.isfinite(high).all()):
                    raise ConfigError(
                        "ActorDistributionNetwork.squash=True needs finite "
                        f"action bounds; got {action_space}")
                # Constants of the space: in the state dict only when used.
                self.register_buffer("action_low", low.flatten())
                self.register_buffer("action_high", high.flatten())
        else:
            raise ValueError(f"unsupported action space {action_space}; "
                             "valid: Discrete or Box")
        self.head = orthogonal_init(nn.Linear(self.encoder.output_size, out),
                                    0.01)

    def forward(self, observation: torch.Tensor):
        """Returns the `Categorical` or `DiagGaussian` for a batch."""
        return self.distribution(self.head(self.encoder(observation)))

    def distribution(self, out: torch.Tensor):
        """The distribution given the head's output ``out`` of shape [B, A]."""
        if self.discrete:
            return Categorical(out)
        if self.squash:
            return TanhGaussian(out, self.log_std, self.action_low,
                                self.action_high)
        return DiagGaussian(out, self.log_std)
