"""Q networks: discrete Q(s, .) and an ensemble of continuous Q(s, a)."""
import math
from typing import Sequence

import gin
import torch
from torch import nn

from alf.networks.encoding import (EncodingNetwork, flat_size,
                                   get_activation, orthogonal_init)


@gin.configurable
class QNetwork(nn.Module):
    """Q-values of every action of a Discrete space: [B, ...] -> [B, n].

    Args:
        observation_space: a Box space.
        action_space: a Discrete space.
        hidden_sizes, activation, conv_layers: see `EncodingNetwork`.
    """

    def __init__(self, observation_space, action_space,
                 hidden_sizes: Sequence[int] = (256, 256),
                 activation: str = "relu", conv_layers: Sequence = ()):
        super().__init__()
        self.encoder = EncodingNetwork(observation_space.shape, hidden_sizes,
                                       activation, conv_layers)
        self.head = orthogonal_init(
            nn.Linear(self.encoder.output_size, int(action_space.n)), 1.0)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(observation))


@gin.configurable
class CriticEnsemble(nn.Module):
    """``num_critics`` independent MLPs Q_k(s, a), evaluated together.

    The k critics' layers are stacked into [k, in, out] weights, so one
    batched matmul per layer evaluates all of them (SAC's twin critics cost
    one forward instead of two).

    Args:
        observation_space, action_space: Box spaces.
        hidden_sizes: widths of each critic's hidden layers.
        activation: activation name.
        num_critics: ensemble size.
    """

    def __init__(self, observation_space, action_space,
                 hidden_sizes: Sequence[int] = (256, 256),
                 activation: str = "relu", num_critics: int = 2):
        super().__init__()
        self.num_critics = num_critics
        self._activation = get_activation(activation)
        sizes = [flat_size(observation_space) + flat_size(action_space),
                 *hidden_sizes, 1]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            gain = 1.0 if i == len(sizes) - 2 else math.sqrt(2)
            # Stored [k, in, out] for baddbmm, with plain row-major strides
            # (a transposed copy keeps odd strides on size-1 dims, which
            # DDP's gradient buckets then copy around).
            w = torch.empty(num_critics, n_in, n_out)
            for k in range(num_critics):
                w[k] = nn.init.orthogonal_(torch.empty(n_out, n_in), gain).T
            self.weights.append(nn.Parameter(w))
            self.biases.append(nn.Parameter(torch.zeros(num_critics, 1,
                                                        n_out)))

    def forward(self, observation: torch.Tensor, action: torch.Tensor,
                detach_params: bool = False) -> torch.Tensor:
        """Q-values [k, B].

        Args:
            detach_params: use the parameters as constants (gradients reach
                the inputs only): SAC's actor loss must not train the
                critics.
        """
        x = torch.cat([observation.flatten(1), action.flatten(1)], 1)
        x = x.unsqueeze(0).expand(self.num_critics, -1, -1)
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            if detach_params:
                w, b = w.detach(), b.detach()
            x = torch.baddbmm(b, x, w)
            if i < last:
                x = self._activation(x)
        return x.squeeze(-1)
