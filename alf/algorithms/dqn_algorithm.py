"""DQN (Mnih et al., 2015) with the double-DQN target (van Hasselt et al.,
2016), a target network updated by periodic copy or Polyak averaging, and
epsilon-greedy collection with a linear schedule."""
import copy
from typing import Callable, Optional, Union

import gin
import gymnasium as gym
import torch
import torch.nn.functional as F

from alf.algorithms.algorithm import (check_learning_rate,
                                      check_max_grad_norm, check_number)
from alf.algorithms.off_policy_algorithm import (OffPolicyAlgorithm,
                                                 polyak_update, weighted_sum)
from alf.data_structures import AlgStep, Experience, LossInfo
from alf.networks.q_network import QNetwork
from alf.replay_buffers import Replay
from alf.utils import distributed
from alf.utils.errors import ConfigError
from alf.utils.optim import Adam


@gin.configurable
class DQNAlgorithm(OffPolicyAlgorithm):
    """Double DQN with a Huber TD loss.

    Args:
        observation_space, action_space, config: see `OffPolicyAlgorithm`;
            the action space must be Discrete.
        q_network_ctor: ``(observation_space, action_space) -> module``
            mapping observations [B, ...] to Q-values [B, n].
        learning_rate: Adam's learning rate.
        adam_eps: Adam's epsilon (>= 0).
        gamma: discount, in [0, 1].
        double_dqn: pick the bootstrap action with the online network and
            value it with the target network (False: max of the target).
        target_update_period: gradient updates between target updates (a
            positive integer).
        target_update_tau: in (0, 1]: 1 copies the online network at each
            target update; below 1, Polyak-averages towards it.
        epsilon_start, epsilon_final: epsilon-greedy exploration (each a
            probability, in [0, 1]), from ``epsilon_start`` to
            ``epsilon_final`` linearly over the first
            ``exploration_fraction`` of training.
        exploration_fraction: the fraction of training (in [0, 1]) over
            which epsilon moves; 0: ``epsilon_final`` from the start.
        epsilon_eval: epsilon of `predict_step`, in [0, 1] (0: greedy).
        max_grad_norm: global gradient-norm clip, a positive number (None:
            off).
        replay: the replay strategy, e.g. ``@PrioritizedReplay()`` in gin
            (None: `UniformReplay`); see `OffPolicyAlgorithm`.
        priority_alpha, priority_beta: deprecated; see
            `OffPolicyAlgorithm`.
    """

    supported_action_spaces = (gym.spaces.Discrete, )
    action_space_hint = {
        gym.spaces.Box: "use SACAlgorithm or PPOAlgorithm for continuous "
        "actions"}

    num_updates: torch.Tensor

    def __init__(self, observation_space, action_space, config,
                 q_network_ctor: Callable = QNetwork,
                 learning_rate: float = 1e-4, adam_eps: float = 1e-8,
                 gamma: float = 0.99,
                 double_dqn: bool = True, target_update_period: int = 1000,
                 target_update_tau: float = 1.0, epsilon_start: float = 1.0,
                 epsilon_final: float = 0.05,
                 exploration_fraction: float = 0.1,
                 epsilon_eval: float = 0.0,
                 max_grad_norm: Optional[float] = 10.0,
                 replay: Union[Replay, str, None] = None,
                 priority_alpha: Optional[float] = None,
                 priority_beta: Optional[float] = None):
        check_learning_rate("DQNAlgorithm", learning_rate)
        check_max_grad_norm("DQNAlgorithm", max_grad_norm)
        check_number("DQNAlgorithm.adam_eps", adam_eps, 0.0)
        check_number("DQNAlgorithm.gamma", gamma, 0.0, 1.0)
        # 0 would divide by zero at the first update.
        if (isinstance(target_update_period, bool)
                or not isinstance(target_update_period, int)
                or target_update_period < 1):
            raise ConfigError(
                f"DQNAlgorithm.target_update_period="
                f"{target_update_period!r}; valid: a positive integer "
                "(gradient updates between target updates)")
        check_number("DQNAlgorithm.target_update_tau", target_update_tau,
                     0.0, 1.0, low_open=True)
        for name, value in (("epsilon_start", epsilon_start),
                            ("epsilon_final", epsilon_final),
                            ("exploration_fraction", exploration_fraction),
                            ("epsilon_eval", epsilon_eval)):
            check_number(f"DQNAlgorithm.{name}", value, 0.0, 1.0)
        # Explicit replay options (no **kwargs): gin then refuses a
        # misspelled parameter when it parses the config.
        super().__init__(observation_space, action_space, config,
                         replay=replay, priority_alpha=priority_alpha,
                         priority_beta=priority_beta,
                         max_grad_norm=max_grad_norm)
        self.q_net = q_network_ctor(observation_space, action_space)
        self.target_q_net = copy.deepcopy(self.q_net).requires_grad_(False)
        self.add_optimizer(Adam(self.q_net.parameters(), lr=learning_rate,
                                eps=adam_eps))
        self._gamma = gamma
        self._double = double_dqn
        self._target_period = target_update_period
        self._tau = target_update_tau
        self._eps = (epsilon_start, epsilon_final, exploration_fraction)
        self._eps_eval = epsilon_eval
        self._num_actions = int(action_space.n)
        # A buffer, so that checkpoints keep the target-update phase.
        self.register_buffer("num_updates", torch.zeros((),
                                                        dtype=torch.int64))
        self._updates = 0  # python mirror: no .item() per update

    # ---- acting -----------------------------------------------------------
    def epsilon(self) -> float:
        """Collection epsilon at the current training progress."""
        start, final, fraction = self._eps
        if fraction <= 0:
            return final
        return start + (final - start) * min(self._progress / fraction, 1.0)

    def _epsilon_greedy(self, observation, epsilon: float) -> torch.Tensor:
        greedy = self.q_net(observation).argmax(-1)
        if epsilon <= 0:
            return greedy
        n = greedy.shape[0]
        explore = torch.rand(n, device=greedy.device) < epsilon
        random = torch.randint(self._num_actions, (n, ), device=greedy.device)
        return torch.where(explore, random, greedy)

    acting_modules = ("q_net", )  # what rollout_step reads

    def predict_step(self, observation) -> AlgStep:
        return AlgStep(output=self._epsilon_greedy(observation,
                                                   self._eps_eval))

    def policy_step(self, observation) -> AlgStep:
        return AlgStep(output=self._epsilon_greedy(observation,
                                                   self.epsilon()))

    # ---- training ---------------------------------------------------------
    @distributed.data_distributed
    def minibatch_loss(self, batch: Experience, weights, loss_scale: float
                       ) -> LossInfo:
        n = batch.action.shape[0]
        q = self.q_net(batch.observation)
        q_taken = q.gather(1, batch.action.long().unsqueeze(1)).squeeze(1)
        with torch.no_grad():
            target_q = self.target_q_net(batch.next_observation)
            if self._double:
                best = self.q_net(batch.next_observation).argmax(
                    -1, keepdim=True)
                next_value = target_q.gather(1, best).squeeze(1)
            else:
                next_value = target_q.max(-1).values
            # A terminal state has no future; a truncated episode's
            # next_observation is its real last state, so it bootstraps.
            target = torch.where(batch.terminated, batch.reward,
                                 batch.reward + self._gamma * next_value)
        td = q_taken - target
        per_item = F.smooth_l1_loss(q_taken, target, reduction="none")
        loss = weighted_sum(per_item, weights, loss_scale)
        # Sums over a count of at least 1: a rank may draw no items
        # (global prioritized replay).
        count = max(n, 1)
        td_abs = td.detach().abs()
        return LossInfo(loss, dict(q=q_taken.detach().sum() / count,
                                   td_abs=td_abs.sum() / count),
                        priority=td_abs)

    def train_iter(self, progress: float):
        stats = super().train_iter(progress)
        if stats:
            stats["epsilon"] = torch.tensor(self.epsilon())
        return stats

    def after_update(self) -> None:
        self._updates += 1
        self.num_updates.fill_(self._updates)
        if self._updates % self._target_period == 0:
            polyak_update(self.target_q_net, self.q_net, self._tau)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        self._updates = int(self.num_updates)
