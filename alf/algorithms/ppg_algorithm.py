"""Phasic Policy Gradient (Cobbe et al., 2020).

Two phases, two data-distributed methods:

* policy phase, every iteration: PPO on the unroll (`PPOAlgorithm`'s
  ``minibatch_loss``: clipped surrogate on the policy, value loss on the
  separate value network). Each unroll's observations and value targets also
  go into an auxiliary `ReplayBuffer`.
* auxiliary phase, once the auxiliary buffer holds ``aux_interval`` unrolls:
  ``aux_epochs`` passes over all of them in minibatches (`aux_minibatch_loss`)
  with

      L_joint = 0.5 (V_aux(s) - V_targ)^2 + clone_coef KL(pi_old(.|s) || pi(.|s))
      L_value = 0.5 (V(s) - V_targ)^2

  where pi_old is the policy just before the phase; the buffer is then
  cleared.

Every rank reaches the auxiliary phase at the same iteration (the buffer fills
by iterations, even with `uneven_batches`), so
the two methods are called in the same order everywhere. The policy phase
leaves the auxiliary head unused: PPG configs set
``make_ddp_performer.find_unused_parameters = True``.
"""
import math
from typing import List, NamedTuple, Optional

import gin
import torch

from alf import nest
from alf.algorithms.algorithm import (check_count, check_learning_rate,
                                      check_number)
from alf.algorithms.ppo_algorithm import (PPOAlgorithm, PPOBatch,
                                         check_ppo_numbers, rank_weights,
                                         uneven_minibatch_indices)
from alf.data_structures import LossInfo
from alf.networks.policy_value import DisjointPolicyValueNetwork
from alf.replay_buffers import ReplayBuffer, iterate_minibatches
from alf.utils import distributed
from alf.utils.deprecation import FORMER, former_spelling
from alf.utils.errors import ConfigError


class AuxBatch(NamedTuple):
    """One auxiliary-phase minibatch; leading dim [M]."""

    observation: torch.Tensor
    returns: torch.Tensor  # value target from the policy phase
    old_dist_params: tuple = ()  # pi_old, as distribution parameters


class _FromPPO:
    """The default of `PPGAlgorithm`'s PPO parameters: PPOAlgorithm's own
    value. Not a literal, so gin leaves it out of the operative config."""

    def __repr__(self):
        return "<PPOAlgorithm's value>"


_PPO = _FromPPO()


@gin.configurable
class PPGAlgorithm(PPOAlgorithm):
    """PPO's policy phase plus PPG's auxiliary phase.

    Args:
        observation_space, action_space, config: see `PPOAlgorithm`.
        aux_interval: policy-phase iterations between auxiliary phases
            (N_pi in the paper).
        aux_epochs: passes over the auxiliary buffer per phase (E_aux).
        aux_minibatch_size: global minibatch size of the auxiliary phase
            (default: ``config.minibatch_size``); divided among ranks.
        clone_coef: weight of the KL term keeping the policy close to its
            pre-phase self (beta_clone).
        actor_network_ctor: must build a network with ``forward_with_aux``.
        value_network_ctor, learning_rate, lr_schedule, adam_eps, gamma,
            gae_lambda, clip_ratio, clip_schedule, value_clip,
            value_loss_coef, entropy_coef, max_grad_norm,
            normalize_advantages, target_kl, normalize_observations,
            reward_scale, uneven_batches: `PPOAlgorithm`'s (with
            ``uneven_batches`` the auxiliary phase weights ranks' losses
            the same way); one left unset here takes
            PPOAlgorithm's value (its gin binding, e.g.
            ``PPOAlgorithm.learning_rate``, or its default).
        aux_mini_batch_size: deprecated spelling of ``aux_minibatch_size``
            (accepted with a warning).
    """

    def __init__(self, observation_space, action_space, config,
                 aux_interval: int = 32, aux_epochs: int = 6,
                 aux_minibatch_size: Optional[int] = None,
                 clone_coef: float = 1.0,
                 actor_network_ctor=DisjointPolicyValueNetwork,
                 value_network_ctor=_PPO, learning_rate=_PPO,
                 lr_schedule=_PPO, adam_eps=_PPO, gamma=_PPO,
                 gae_lambda=_PPO, clip_ratio=_PPO, clip_schedule=_PPO,
                 value_clip=_PPO, value_loss_coef=_PPO, entropy_coef=_PPO,
                 max_grad_norm=_PPO, normalize_advantages=_PPO,
                 target_kl=_PPO, normalize_observations=_PPO,
                 reward_scale=_PPO, uneven_batches=_PPO,
                 aux_mini_batch_size=FORMER):
        # PPO's parameters are listed, not taken as **kwargs, so that gin
        # refuses a misspelled one at parse time. Only those given are
        # passed on: the rest keep PPOAlgorithm's own gin bindings.
        ppo_args = dict(
            value_network_ctor=value_network_ctor,
            learning_rate=learning_rate, lr_schedule=lr_schedule,
            adam_eps=adam_eps, gamma=gamma, gae_lambda=gae_lambda,
            clip_ratio=clip_ratio, clip_schedule=clip_schedule,
            value_clip=value_clip, value_loss_coef=value_loss_coef,
            entropy_coef=entropy_coef, max_grad_norm=max_grad_norm,
            normalize_advantages=normalize_advantages, target_kl=target_kl,
            normalize_observations=normalize_observations,
            reward_scale=reward_scale, uneven_batches=uneven_batches)
        ppo_args = {k: v for k, v in ppo_args.items() if v is not _PPO}
        if "learning_rate" in ppo_args:
            check_learning_rate("PPGAlgorithm", learning_rate)
        check_ppo_numbers("PPGAlgorithm", ppo_args)
        check_count("PPGAlgorithm.aux_interval", aux_interval, 1)
        check_count("PPGAlgorithm.aux_epochs", aux_epochs, 1)
        check_number("PPGAlgorithm.clone_coef", clone_coef, 0.0)
        super().__init__(observation_space, action_space, config,
                         actor_network_ctor=actor_network_ctor, **ppo_args)
        if not hasattr(self.actor, "forward_with_aux"):
            raise ConfigError(
                f"PPGAlgorithm needs an actor network with an auxiliary value "
                f"head (forward_with_aux), e.g. DisjointPolicyValueNetwork; "
                f"got {type(self.actor).__name__}")
        if former_spelling("PPGAlgorithm", "aux_mini_batch_size",
                           aux_mini_batch_size, ["aux_minibatch_size"],
                           aux_minibatch_size is not None):
            aux_minibatch_size = aux_mini_batch_size
        if aux_minibatch_size is not None:
            check_count("PPGAlgorithm.aux_minibatch_size", aux_minibatch_size,
                        1)
        self._aux_epochs = aux_epochs
        self._clone_coef = clone_coef
        world = config.world_size
        aux_mbs = aux_minibatch_size or config.minibatch_size
        if aux_mbs % world:
            raise ConfigError(f"PPGAlgorithm.aux_minibatch_size={aux_mbs} "
                              f"does not divide among {world} processes")
        self._local_aux_minibatch_size = aux_mbs // world
        held = aux_interval * config.steps_per_iteration
        if aux_mbs > held:
            raise ConfigError(
                f"PPGAlgorithm.aux_minibatch_size={aux_mbs} is more than the "
                f"{held} transitions of an auxiliary phase "
                f"(aux_interval={aux_interval} x num_envs="
                f"{config.num_envs} x unroll_length="
                f"{config.unroll_length}); use at most {held}")
        width = config.unroll_length * config.local_num_envs
        self.aux_buffer = ReplayBuffer(aux_interval, width)
        self._aux_per_epoch = math.ceil(aux_interval * width /
                                        self._local_aux_minibatch_size)
        if self._uneven:
            # Which rows of each stored unroll are real: a shorter unroll is
            # padded to the buffer's width. Only then, so that checkpoints
            # of the default layout stay loadable.
            self.aux_valid = ReplayBuffer(aux_interval, width)
        # The version whose weights the actors got before an auxiliary
        # phase changed them (policy_ready), if any: until the phase ends,
        # they act with weights the learner no longer has.
        self._moved_version: Optional[int] = None

    def idle_settings(self, config) -> List[str]:
        iterations = -(-config.num_env_steps // config.steps_per_iteration)
        interval = self.aux_buffer.capacity
        if iterations >= interval:
            return []
        # Not refused: a short run of a long config (a smoke test) trains,
        # as PPO does.
        return [f"PPGAlgorithm.aux_interval={interval} exceeds the "
                f"run's length in iterations, {iterations} (num_env_steps="
                f"{config.num_env_steps} at {config.steps_per_iteration} per "
                "iteration): no auxiliary phase will run, so it trains as "
                f"PPO; use aux_interval <= {iterations} for one"]

    def _prepare_batch(self, exp) -> PPOBatch:
        batch = super()._prepare_batch(exp)
        self._store_aux(batch.observation, batch.returns)
        return batch

    def _store_aux(self, obs: torch.Tensor, returns: torch.Tensor) -> None:
        """Keeps one unroll's observations and value targets for the
        auxiliary phase."""
        if self._uneven:
            width, n = self.aux_buffer.batch_size, obs.shape[0]
            pad = lambda x: torch.cat([x, x.new_zeros((width - n, ) +  # noqa
                                                      x.shape[1:])])
            obs, returns = pad(obs), pad(returns)
            self.aux_valid.add_batch(torch.arange(width) < n)
        self.aux_buffer.add_batch(AuxBatch(obs, returns))

    def train_on_unroll(self, exp, progress: float):
        stats = super().train_on_unroll(exp, progress)
        if self.aux_buffer.num_steps == self.aux_buffer.capacity:
            if self.policy_ready is not None:
                self.policy_ready()  # collection need not wait for the phase
                self._moved_version = self.policy_version + 1
            stats.update(self._auxiliary_phase())
            self.bound_log_std(progress)  # the clone loss moves it too
        return stats

    def _stale(self, exp) -> bool:
        # A step of the version published before the auxiliary phase may
        # have acted with that version's pre-phase weights: its stored
        # log-probability would make target_kl's measure count the phase's
        # change as this iteration's.
        versions = exp.policy_version
        return super()._stale(exp) or (
            self._moved_version is not None
            and isinstance(versions, torch.Tensor)
            and bool((versions == self._moved_version).any()))

    def _auxiliary_phase(self):
        data = self.aux_buffer.gather_all()  # [aux_interval, T*B, ...]
        self.aux_buffer.clear()
        flat = nest.map_structure(lambda x: x.flatten(0, 1), data)
        if self._uneven:
            valid = self.aux_valid.gather_all().flatten()
            self.aux_valid.clear()
            flat = nest.map_structure(lambda x: x[valid], flat)
        with torch.no_grad():
            old = self.actor(flat.observation).params()
        batch = AuxBatch(flat.observation, flat.returns, old)
        stats = []
        for mb, weight in self._aux_minibatches(batch):
            loss_info = self.aux_minibatch_loss(mb)
            stats.append(torch.stack(list(loss_info.extra.values())))
            if weight is not None:  # this rank's share of the global mean
                loss_info = loss_info._replace(loss=loss_info.loss * weight)
            self.update_with_gradient(loss_info, self._max_grad_norm)
        means = torch.stack(stats).mean(0)
        return {f"aux/{k}": v for k, v in zip(loss_info.extra, means)}

    def _aux_minibatches(self, batch: AuxBatch):
        """(minibatch, loss weight or None) of every epoch of the phase; the
        same number on every rank (see `PPOAlgorithm`'s uneven_batches)."""
        if not self._uneven:
            for _ in range(self._aux_epochs):
                for mb in iterate_minibatches(
                        batch, self._local_aux_minibatch_size):
                    yield mb, None
            return
        indices = uneven_minibatch_indices(batch.returns.shape[0],
                                           self._aux_per_epoch,
                                           self._aux_epochs)
        weights, _ = rank_weights(indices)
        for idx, weight in zip(indices, weights):
            yield nest.map_structure(lambda x: x[idx], batch), weight

    @distributed.data_distributed
    def aux_minibatch_loss(self, mb: AuxBatch) -> LossInfo:
        """The auxiliary-phase loss of one minibatch (see the module doc)."""
        dist, aux_value = self.actor.forward_with_aux(mb.observation)
        old = type(dist)(*mb.old_dist_params)
        kl = old.kl(dist).mean()
        aux_value_loss = 0.5 * (aux_value - mb.returns).square().mean()
        value_loss = 0.5 * (self.value_net(mb.observation) -
                            mb.returns).square().mean()
        loss = aux_value_loss + self._clone_coef * kl + value_loss
        return LossInfo(loss, dict(aux_value_loss=aux_value_loss.detach(),
                                   kl=kl.detach(),
                                   value_loss=value_loss.detach(),
                                   loss=loss.detach()))
