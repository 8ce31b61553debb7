"""Soft Actor-Critic (Haarnoja et al., 2018) for continuous actions: a
tanh-squashed Gaussian actor, twin critics with Polyak-averaged targets and
automatic entropy tuning."""
import copy
import math
from typing import Callable, Optional, Sequence, Union

import gin
import gymnasium as gym
import torch
import torch.nn.functional as F
from torch import nn

from alf.algorithms.algorithm import (check_learning_rate,
                                      check_max_grad_norm, check_number)
from alf.algorithms.off_policy_algorithm import (OffPolicyAlgorithm,
                                                 polyak_update, weighted_sum)
from alf.data_structures import AlgStep, Experience, LossInfo
from alf.networks.encoding import (EncodingNetwork, flat_size,
                                   observation_shape, orthogonal_init)
from alf.networks.q_network import CriticEnsemble
from alf.replay_buffers import Replay
from alf.utils import distributed
from alf.utils.optim import Adam

_LOG_STD_RANGE = (-20.0, 2.0)
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


@gin.configurable
class SquashedGaussianActor(nn.Module):
    """Observation -> tanh(N(mean(s), std(s))) in [-1, 1]^d.

    Args:
        observation_space, action_space: Box spaces.
        hidden_sizes, activation: see `EncodingNetwork`.
    """

    def __init__(self, observation_space, action_space,
                 hidden_sizes: Sequence[int] = (256, 256),
                 activation: str = "relu"):
        super().__init__()
        self.encoder = EncodingNetwork(observation_shape(
            type(self).__name__, observation_space), hidden_sizes,
                                       activation, owner=type(self).__name__)
        self.action_dim = flat_size(action_space)
        self.head = orthogonal_init(
            nn.Linear(self.encoder.output_size, 2 * self.action_dim), 0.01)

    def forward(self, observation: torch.Tensor):
        """Returns (mean, log_std), each [B, d]."""
        mean, log_std = self.head(self.encoder(observation)).chunk(2, -1)
        return mean, log_std.clamp(*_LOG_STD_RANGE)

    def sample(self, observation: torch.Tensor):
        """A reparameterised sample in [-1, 1]^d and its log-probability."""
        mean, log_std = self(observation)
        noise = torch.randn_like(mean)
        pre = mean + log_std.exp() * noise
        action = torch.tanh(pre)
        # log N(pre) minus the log-determinant of tanh, in the stable form
        # log(1 - tanh(x)^2) = 2 (log 2 - x - softplus(-2x)).
        log_prob = (-0.5 * noise.square() - log_std - _HALF_LOG_2PI).sum(-1)
        log_prob = log_prob - (2 * (math.log(2) - pre - F.softplus(-2 * pre))
                               ).sum(-1)
        return action, log_prob

    def mode(self, observation: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self(observation)[0])


@gin.configurable
class SACAlgorithm(OffPolicyAlgorithm):
    """SAC with twin critics and automatic entropy tuning.

    Actions are stored as the environment takes them; the networks work in
    [-1, 1]^d and the action bounds are mapped affinely.

    Args:
        observation_space, action_space, config: see `OffPolicyAlgorithm`;
            the action space must be a bounded Box.
        actor_ctor: ``(observation_space, action_space) -> module`` like
            `SquashedGaussianActor`.
        critic_ctor: ``(observation_space, action_space) -> module`` like
            `CriticEnsemble` (Q-values [k, B]; ``detach_params``).
        learning_rate: Adam's learning rate (actor, critics and alpha).
        gamma: discount, in [0, 1].
        tau: Polyak coefficient of the target critics per update, in
            (0, 1] (1: copy).
        initial_alpha: initial entropy temperature, > 0 (it is learnt as
            its logarithm).
        target_entropy: entropy target, a number (default
            ``-action_dim``).
        replay: the replay strategy, e.g. ``@PrioritizedGlobalReplay()`` in
            gin (None: `UniformReplay`); see `OffPolicyAlgorithm`.
        priority_alpha, priority_beta: deprecated; see
            `OffPolicyAlgorithm`.
        max_grad_norm: see `OffPolicyAlgorithm`; a positive number or None.
    """

    supported_action_spaces = (gym.spaces.Box, )
    needs_bounded_actions = True
    action_space_hint = {
        gym.spaces.Discrete: "use DQNAlgorithm or PPOAlgorithm for discrete "
        "actions",
        gym.spaces.Box: "SAC squashes its actions into the Box's bounds: "
        "give the environment finite ones, or use PPOAlgorithm"}

    _action_scale: torch.Tensor
    _action_center: torch.Tensor

    def __init__(self, observation_space, action_space, config,
                 actor_ctor: Callable = SquashedGaussianActor,
                 critic_ctor: Callable = CriticEnsemble,
                 learning_rate: float = 3e-4, gamma: float = 0.99,
                 tau: float = 0.005, initial_alpha: float = 1.0,
                 target_entropy: Optional[float] = None,
                 replay: Union[Replay, str, None] = None,
                 priority_alpha: Optional[float] = None,
                 priority_beta: Optional[float] = None,
                 max_grad_norm: Optional[float] = None):
        check_learning_rate("SACAlgorithm", learning_rate)
        check_max_grad_norm("SACAlgorithm", max_grad_norm)
        check_number("SACAlgorithm.gamma", gamma, 0.0, 1.0)
        check_number("SACAlgorithm.tau", tau, 0.0, 1.0, low_open=True)
        check_number("SACAlgorithm.initial_alpha", initial_alpha, 0.0,
                     low_open=True)
        if target_entropy is not None:
            check_number("SACAlgorithm.target_entropy", target_entropy,
                         -math.inf)
        # Explicit replay options (no **kwargs): gin then refuses a
        # misspelled parameter when it parses the config.
        super().__init__(observation_space, action_space, config,
                         replay=replay, priority_alpha=priority_alpha,
                         priority_beta=priority_beta,
                         max_grad_norm=max_grad_norm)
        self.actor = actor_ctor(observation_space, action_space)
        self.critics = critic_ctor(observation_space, action_space)
        self.target_critics = copy.deepcopy(self.critics).requires_grad_(
            False)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(initial_alpha)))
        # One Adam over actor, critics and alpha: Adam is per parameter and
        # each loss term reaches only its own parameters, so this equals
        # three optimizers with one learning rate.
        self.add_optimizer(Adam(
            [p for p in self.parameters() if p.requires_grad],
            lr=learning_rate))
        low = torch.as_tensor(action_space.low, dtype=torch.float32)
        high = torch.as_tensor(action_space.high, dtype=torch.float32)
        self.register_buffer("_action_scale", (high - low) / 2,
                             persistent=False)
        self.register_buffer("_action_center", (high + low) / 2,
                             persistent=False)
        self._gamma, self._tau = gamma, tau
        self._target_entropy = (-float(flat_size(action_space))
                                if target_entropy is None else target_entropy)

    def _to_env(self, unit_action: torch.Tensor) -> torch.Tensor:
        return unit_action * self._action_scale + self._action_center

    def _to_unit(self, env_action: torch.Tensor) -> torch.Tensor:
        return (env_action - self._action_center) / self._action_scale

    # ---- acting -----------------------------------------------------------
    acting_modules = ("actor", )  # what rollout_step reads

    def predict_step(self, observation) -> AlgStep:
        return AlgStep(output=self._to_env(self.actor.mode(observation)))

    def policy_step(self, observation) -> AlgStep:
        return AlgStep(output=self._to_env(self.actor.sample(observation)[0]))

    # ---- training ---------------------------------------------------------
    @distributed.data_distributed
    def minibatch_loss(self, batch: Experience, weights, loss_scale: float
                       ) -> LossInfo:
        alpha = self.log_alpha.exp().detach()
        with torch.no_grad():
            next_action, next_log_prob = self.actor.sample(
                batch.next_observation)
            next_q = self.target_critics(batch.next_observation,
                                         next_action).min(0).values
            target = batch.reward + self._gamma * (
                ~batch.terminated).to(next_q.dtype) * (
                    next_q - alpha * next_log_prob)
        q = self.critics(batch.observation, self._to_unit(batch.action))
        td = q - target  # [k, B]
        critic_items = 0.5 * td.square().sum(0)

        action, log_prob = self.actor.sample(batch.observation)
        # Constant critics here: the actor loss must not train them.
        q_pi = self.critics(batch.observation, action,
                            detach_params=True).min(0).values
        actor_items = alpha * log_prob - q_pi
        alpha_items = -self.log_alpha * (log_prob.detach() +
                                         self._target_entropy)
        loss = weighted_sum(critic_items, weights, loss_scale) + (
            actor_items + alpha_items).sum() * loss_scale
        n = max(td.shape[1], 1)  # a rank may draw no items (global PER)
        return LossInfo(loss, dict(
            critic_loss=critic_items.detach().sum() / n,
            actor_loss=actor_items.detach().sum() / n,
            alpha=alpha, entropy=-log_prob.detach().sum() / n,
            q=q.detach().mean(0).sum() / n),
            priority=td.detach().abs().mean(0))

    def after_update(self) -> None:
        polyak_update(self.target_critics, self.critics, self._tau)
