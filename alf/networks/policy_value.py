"""PPG's policy network: an actor with an auxiliary value head.

Phasic Policy Gradient keeps the value network separate from the policy (so
value training cannot disturb the policy's features) and distils value
information into the policy's features through an auxiliary value head that
is trained only in the auxiliary phase.
"""
from typing import Optional, Sequence, Tuple

import gin
import torch
from torch import nn

from alf.networks.actor import ActorDistributionNetwork, PerDimension
from alf.networks.encoding import (check_hidden_sizes, observation_shape,
                                   orthogonal_init)


@gin.configurable
class DisjointPolicyValueNetwork(nn.Module):
    """An `ActorDistributionNetwork` plus a value head on its features.

    ``forward`` returns the action distribution, like any actor network, so
    PPO's policy loss uses it unchanged (the auxiliary head is then unused:
    distributed training needs ``find_unused_parameters``).

    Args:
        observation_space, action_space, hidden_sizes, activation,
            init_log_std, conv_layers, squash, state_dependent_std, beta,
            beta_concentration_scale, gsde_interval: as for
            `ActorDistributionNetwork`.
    """

    def __init__(self, observation_space, action_space,
                 hidden_sizes: Sequence[int] = (64, 64),
                 activation: str = "tanh", init_log_std: PerDimension = 0.0,
                 conv_layers: Sequence = (), squash: bool = False,
                 state_dependent_std: bool = False, beta: bool = False,
                 beta_concentration_scale: PerDimension = 1.0,
                 gsde_interval: Optional[int] = None):
        super().__init__()
        check_hidden_sizes(type(self).__name__, hidden_sizes)
        observation_shape(type(self).__name__, observation_space)
        self.actor = ActorDistributionNetwork(observation_space, action_space,
                                              hidden_sizes, activation,
                                              init_log_std, conv_layers,
                                              squash, state_dependent_std,
                                              beta, beta_concentration_scale,
                                              gsde_interval)
        self.aux_value_head = orthogonal_init(
            nn.Linear(self.actor.encoder.output_size, 1), 1.0)

    def forward(self, observation: torch.Tensor):
        """The action distribution for a batch of observations."""
        return self.actor(observation)

    def forward_with_aux(self, observation: torch.Tensor) -> Tuple:
        """The action distribution and the auxiliary values [B]."""
        features = self.actor.encoder(observation)
        dist = self.actor.distribution(features)
        return dist, self.aux_value_head(features).squeeze(-1)
