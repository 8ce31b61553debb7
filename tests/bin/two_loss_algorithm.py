"""A user's actor-critic with two data-distributed losses, each with its own
optimizer, written from the README's example as a new user would.

`actor_loss` leaves the critic without gradient and `critic_loss` leaves the
actor without gradient, so under DDP each call has unused parameters. Its gin
file (see tests/bin/test_train_distributed.py) has no
``make_ddp_performer.find_unused_parameters`` line: alf must find out by
itself.
"""
from typing import Dict

import gin
import torch

import alf
from alf.algorithms import OnPolicyAlgorithm
from alf.algorithms.algorithm import clip_grad_norm
from alf.data_structures import Experience, AlgStep, LossInfo
from alf.networks import ActorDistributionNetwork, ValueNetwork
from alf.utils.value_ops import generalized_advantage_estimation


@gin.configurable
class TwoLossA2C(OnPolicyAlgorithm):
    """A2C with GAE, the actor and the critic updated by separate losses.

    Args:
        observation_space, action_space, config: given by the trainer.
        actor_lr, critic_lr: the two Adams' learning rates.
        gamma: discount.
        gae_lambda: GAE lambda.
        entropy_coef: weight of the entropy bonus.
        max_grad_norm: gradient-norm clipping of each loss.
    """

    def __init__(self, observation_space, action_space, config,
                 actor_lr: float = 1e-3, critic_lr: float = 1e-3,
                 gamma: float = 0.99, gae_lambda: float = 0.95,
                 entropy_coef: float = 0.01, max_grad_norm: float = 0.5):
        super().__init__(observation_space, action_space, config)
        self.actor = ActorDistributionNetwork(observation_space, action_space)
        self.critic = ValueNetwork(observation_space)
        self._actor_opt = self.add_optimizer(
            torch.optim.Adam(self.actor.parameters(), lr=actor_lr))
        self._critic_opt = self.add_optimizer(
            torch.optim.Adam(self.critic.parameters(), lr=critic_lr))
        self._gamma, self._lambda = gamma, gae_lambda
        self._ent_coef = entropy_coef
        self._max_grad_norm = max_grad_norm

    def predict_step(self, observation) -> AlgStep:
        return AlgStep(output=self.actor(observation).mode())

    def rollout_step(self, observation) -> AlgStep:
        return AlgStep(output=self.actor(observation).sample())

    def train_on_unroll(self, exp: Experience,
                        progress: float) -> Dict[str, torch.Tensor]:
        t, b = exp.reward.shape
        with torch.no_grad():
            values = self.critic(exp.observation.flatten(0, 1)).view(t, b)
            next_values = self.critic(
                exp.next_observation.flatten(0, 1)).view(t, b)
            adv = generalized_advantage_estimation(
                exp.reward, values, next_values, exp.terminated,
                exp.truncated, self._gamma, self._lambda)
        returns = adv + values
        actor_info = self.actor_loss(exp, adv)
        self._step(self._actor_opt, actor_info.loss)
        critic_info = self.critic_loss(exp, returns)
        self._step(self._critic_opt, critic_info.loss)
        return dict(actor_info.extra, **critic_info.extra)

    def _step(self, optimizer: torch.optim.Optimizer, loss: torch.Tensor):
        optimizer.zero_grad()
        loss.backward()
        clip_grad_norm(optimizer.param_groups, self._max_grad_norm)
        optimizer.step()

    @alf.data_distributed
    def actor_loss(self, exp: Experience, adv: torch.Tensor) -> LossInfo:
        """Policy gradient of one unroll; ``adv`` is [T, B]."""
        dist = self.actor(exp.observation.flatten(0, 1))
        policy_loss = -(dist.log_prob(exp.action.flatten(0, 1)) *
                        adv.flatten()).mean()
        entropy = dist.entropy().mean()
        return LossInfo(policy_loss - self._ent_coef * entropy,
                        dict(policy_loss=policy_loss.detach(),
                             entropy=entropy.detach()))

    @alf.data_distributed
    def critic_loss(self, exp: Experience, returns: torch.Tensor) -> LossInfo:
        """Value regression of one unroll; ``returns`` is [T, B]."""
        values = self.critic(exp.observation.flatten(0, 1))
        value_loss = 0.5 * (returns.flatten() - values).square().mean()
        return LossInfo(value_loss, dict(value_loss=value_loss.detach()))
