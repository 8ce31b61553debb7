"""A user's own algorithm, trained data-parallel by one decorator.

A2C (advantage actor-critic): one gradient step per unroll on the whole
unroll. The only thing that makes it distributed is ``@data_distributed`` on
`ExampleA2C.loss`, the one method whose output depends on the parameters and
is backpropagated. Everything else is single-process code; the trainer
activates DDP on the algorithm when it runs with several processes:

    python -m alf.bin.train --gin_file custom_algorithm.gin --root_dir runs/a2c \\
        --distributed multi-process --num_processes 2

Sizes in the gin file are global: with 2 processes each rank runs half of
``TrainerConfig.num_envs``, and the gradient DDP averages over both halves is
the gradient one process would compute on all environments.
"""
from typing import Dict

import torch

import alf
from alf.algorithms import OnPolicyAlgorithm
from alf.data_structures import AlgStep, Experience, LossInfo
from alf.networks import ActorDistributionNetwork, ValueNetwork
from alf.utils.value_ops import generalized_advantage_estimation


@alf.configurable
class ExampleA2C(OnPolicyAlgorithm):
    """Advantage actor-critic with GAE, one update per unroll (of the whole
    unroll: no minibatches, so ``TrainerConfig.minibatch_size`` need not
    divide among the processes).

    Args:
        observation_space, action_space, config: given by the trainer.
        learning_rate: Adam's learning rate.
        gamma: discount.
        gae_lambda: GAE lambda.
        value_loss_coef: weight of the value loss.
        entropy_coef: weight of the entropy bonus.
        max_grad_norm: gradient-norm clipping.
    """

    divided_config_sizes = ()  # RLAlgorithm's: the sizes it splits by rank

    def __init__(self, observation_space, action_space, config,
                 learning_rate: float = 1e-3, gamma: float = 0.99,
                 gae_lambda: float = 0.95, value_loss_coef: float = 0.5,
                 entropy_coef: float = 0.01, max_grad_norm: float = 0.5):
        super().__init__(observation_space, action_space, config)
        self.actor = ActorDistributionNetwork(observation_space, action_space)
        self.critic = ValueNetwork(observation_space)
        self.add_optimizer(torch.optim.Adam(self.parameters(),
                                            lr=learning_rate))
        self._gamma, self._lambda = gamma, gae_lambda
        self._vf_coef, self._ent_coef = value_loss_coef, entropy_coef
        self._max_grad_norm = max_grad_norm

    def predict_step(self, observation) -> AlgStep:
        return AlgStep(output=self.actor(observation).mode())

    def rollout_step(self, observation) -> AlgStep:
        return AlgStep(output=self.actor(observation).sample())

    def train_on_unroll(self, exp: Experience,
                        progress: float) -> Dict[str, torch.Tensor]:
        loss_info = self.loss(exp)
        self.update_with_gradient(loss_info, self._max_grad_norm)
        return loss_info.extra

    @alf.data_distributed
    def loss(self, exp: Experience) -> LossInfo:
        """A2C loss of one unroll; ``exp`` leaves have shape [T, B, ...]."""
        t, b = exp.reward.shape
        obs = exp.observation.flatten(0, 1)  # [T*B, ...]
        dist = self.actor(obs)
        values = self.critic(obs).view(t, b)
        with torch.no_grad():
            next_values = self.critic(exp.next_observation.flatten(0, 1))
            adv = generalized_advantage_estimation(
                exp.reward, values.detach(), next_values.view(t, b),
                exp.terminated, exp.truncated, self._gamma, self._lambda)
        returns = adv + values.detach()
        policy_loss = -(dist.log_prob(exp.action.flatten(0, 1)) *
                        adv.flatten()).mean()
        value_loss = 0.5 * (returns - values).square().mean()
        entropy = dist.entropy().mean()
        loss = (policy_loss + self._vf_coef * value_loss -
                self._ent_coef * entropy)
        return LossInfo(loss, dict(policy_loss=policy_loss.detach(),
                                   value_loss=value_loss.detach(),
                                   entropy=entropy.detach()))
