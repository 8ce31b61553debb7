"""Q networks: discrete Q(s, .) and an ensemble of continuous Q(s, a)."""
import math
from typing import Sequence

import gin
import numpy as np
import torch
from torch import nn

from alf.networks.encoding import (EncodingNetwork, check_hidden_sizes,
                                   flat_size, get_activation, init_layer,
                                   linear_chain, observation_shape,
                                   orthogonal_init)


@gin.configurable
class QNetwork(nn.Module):
    """Q-values of every action of a Discrete space: [B, ...] -> [B, n].

    Args:
        observation_space: a Box space.
        action_space: a Discrete space.
        hidden_sizes, activation, conv_layers: see `EncodingNetwork`.
        init: ``torch`` (PyTorch's default, as RL-zoo's DQN
            hyperparameters were tuned with) or ``orthogonal``; see
            `init_layer`.
    """

    def __init__(self, observation_space, action_space,
                 hidden_sizes: Sequence[int] = (256, 256),
                 activation: str = "relu", conv_layers: Sequence = (),
                 init: str = "torch"):
        super().__init__()
        self.encoder = EncodingNetwork(observation_shape(
            type(self).__name__, observation_space), hidden_sizes,
                                       activation, conv_layers, init,
                                       owner=type(self).__name__)
        self.head = init_layer(
            nn.Linear(self.encoder.output_size, int(action_space.n)), 1.0,
            init)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(observation))


@gin.configurable
class CriticEnsemble(nn.Module):
    """``num_critics`` independent MLPs Q_k(s, a), evaluated together.

    Each critic is a chain of ``F.linear`` calls on nn.Linear-layout
    weights. A single batched matmul per layer over [k, in, out] stacked
    weights measured slower on CPU (docs/benchmarks.md): MKL's batched
    kernels are slow for the skinny first and last layers.

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
        check_hidden_sizes(type(self).__name__, hidden_sizes)
        self.num_critics = num_critics
        self._activation = get_activation(activation)
        obs_size = int(np.prod(observation_shape(type(self).__name__,
                                                 observation_space)))
        sizes = [obs_size + flat_size(action_space),
                 *hidden_sizes, 1]
        self.critics = nn.ModuleList()
        for _ in range(num_critics):
            self.critics.append(nn.ModuleList(
                orthogonal_init(nn.Linear(n_in, n_out),
                                1.0 if n_out == 1 else math.sqrt(2))
                for n_in, n_out in zip(sizes[:-1], sizes[1:])))

    def forward(self, observation: torch.Tensor, action: torch.Tensor,
                detach_params: bool = False) -> torch.Tensor:
        """Q-values [k, B].

        Args:
            detach_params: use the parameters as constants (gradients reach
                the inputs only): SAC's actor loss must not train the
                critics.
        """
        x = torch.cat([observation.flatten(1), action.flatten(1)], 1)
        return torch.stack([
            linear_chain(x, layers, self._activation, activate_last=False,
                         detach_params=detach_params).squeeze(-1)
            for layers in self.critics])
