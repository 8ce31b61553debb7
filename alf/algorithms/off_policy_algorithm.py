"""`OffPolicyAlgorithm`: replay, initial random collection, target networks.

An off-policy algorithm stores every transition in a replay buffer (each rank
its own; DDP never touches it) and, once the buffer holds the initial
collection, runs ``config.num_updates_per_iter`` gradient updates per
iteration on sampled minibatches. Subclasses provide `policy_step` (acting
after the initial collection), `predict_step` and `minibatch_loss`
(decorated with `data_distributed`), and update their target networks in
`after_update`, which runs after the synchronised optimizer step on every
rank, so that target networks stay equal across ranks.

How minibatches are drawn is the ``replay`` strategy's business (an
`alf.replay_buffers.Replay`, e.g. ``replay = @PrioritizedReplay()`` in gin):
it owns the buffer, draws minibatches and takes the priorities the loss
returns. `UniformReplay` is the default.
"""
import os
from typing import Dict, List, Optional, Union

import gin
import gymnasium as gym
import numpy as np
import torch
from absl import logging

from alf import nest
from alf.algorithms.rl_algorithm import RLAlgorithm
from alf.data_structures import AlgStep, Experience, LossInfo
from alf.replay_buffers import Replay, as_replay
from alf.utils import distributed
from alf.utils.errors import ConfigError, TrainingError
from alf.utils.memory import check_allocation


class OffPolicyAlgorithm(RLAlgorithm):
    """Base of replay-based algorithms.

    Args:
        observation_space, action_space, config: see `RLAlgorithm`; uses
            the rank's ``config.local_replay_buffer_capacity``,
            ``local_initial_collect_steps`` and ``local_minibatch_size``,
            and ``num_updates_per_iter``.
        replay: the replay strategy (None: `UniformReplay`); each
            algorithm needs its own object. The former strings
            (``"uniform"``, ``"prioritized"``, ``"prioritized_global"``)
            still work, with a deprecation warning (`as_replay`).
        priority_alpha, priority_beta: deprecated: only read with a replay
            string; the prioritized strategies' ``alpha`` and ``beta``.
        max_grad_norm: clip the global gradient norm (None: no clipping).
    """

    # Collection ending early only stores fewer transitions; the number of
    # updates per iteration is the config's on every rank. Asynchronous
    # rollouts ended early have columns of different lengths, which a
    # replay buffer storing whole time steps cannot take.
    preemptible_unroll_modes = ("sync", )

    def __init__(self, observation_space: gym.Space, action_space: gym.Space,
                 config, replay: Union[Replay, str, None] = None,
                 priority_alpha: Optional[float] = None,
                 priority_beta: Optional[float] = None,
                 max_grad_norm=None):
        super().__init__(observation_space, action_space, config)
        replay = as_replay(replay, priority_alpha, priority_beta)
        # Steps per environment, so the rank's buffer holds whole steps.
        steps = config.local_replay_buffer_capacity // config.local_num_envs
        if steps < config.unroll_length:
            raise ConfigError(
                f"TrainerConfig.replay_buffer_capacity="
                f"{config.replay_buffer_capacity} holds {steps} steps of "
                f"{config.num_envs} environments, less than one unroll "
                f"(unroll_length={config.unroll_length}); make it at least "
                f"{config.steps_per_iteration}")
        held = steps * config.num_envs  # all ranks' buffers
        for name in ("minibatch_size", "initial_collect_steps"):
            # Equivalent to the rank's share exceeding the rank's buffer.
            if getattr(config, name) > held:
                # Training would wait forever for a buffer this full.
                raise ConfigError(
                    f"TrainerConfig.{name}={getattr(config, name)} is more "
                    f"than the replay buffer holds ({held} transitions); "
                    f"raise replay_buffer_capacity or lower {name}")
        per_iter = config.steps_per_iteration
        runs = -(-config.num_env_steps // per_iter) * per_iter
        if runs < max(config.initial_collect_steps, config.minibatch_size):
            # Both global. The run would end (with checkpoints) having
            # acted at random throughout, without one update.
            raise ConfigError(
                f"TrainerConfig.num_env_steps={config.num_env_steps} "
                f"({runs} in whole iterations) ends before the first "
                f"update, which waits for initial_collect_steps="
                f"{config.initial_collect_steps} (random env steps of all "
                f"processes together) and one minibatch ("
                f"{config.minibatch_size}); raise num_env_steps or lower "
                "initial_collect_steps")
        self._check_replay_memory(config, steps, replay)
        self.replay = replay
        # Registered under the name it always had: checkpoint keys and
        # `_acting_modules` (which leaves replay buffers out) see no change.
        self.replay_buffer = replay.build(steps, config.local_num_envs)
        self._max_grad_norm = max_grad_norm
        self._local_initial_collect = config.local_initial_collect_steps
        self._local_minibatch_size = config.local_minibatch_size
        self._num_updates = config.num_updates_per_iter
        self._progress = 0.0
        self._num_stored = 0  # transitions stored (see rollout_step)

    def _check_replay_memory(self, config, steps: int,
                             replay: Replay) -> None:
        """Refuses a replay capacity the machine has no memory for, before
        anything is allocated (and before the trainer writes any file).

        The storage is made on the first `store`; its size comes from one
        transition like those the collector stores, built from the spaces.
        Every process on this machine keeps its own buffer.
        """
        nbytes = replay.storage_bytes(
            steps, config.local_num_envs,
            self.example_experience(config.local_num_envs))
        per_item = nbytes / (steps * config.local_num_envs)
        world = distributed.get_world_size()
        check_allocation(
            nbytes, config.resolve_device(),
            f"TrainerConfig.replay_buffer_capacity="
            f"{config.replay_buffer_capacity} "
            f"({per_item:.0f} bytes per transition)",
            lambda room: "lower replay_buffer_capacity (at most about "
            f"{int(room // per_item) * config.world_size} transitions fit)",
            copies=int(os.environ.get("LOCAL_WORLD_SIZE", world)))

    def example_experience(self, n: int) -> Experience:
        """Zeros shaped and typed like ``n`` stored transitions (the
        observations as `observe` gives them: float32)."""
        obs = nest.map_structure(lambda t: t.float(),
                                 space_zeros(self.observation_space, n))
        return Experience(obs, space_zeros(self.action_space, n),
                          torch.zeros(n), torch.zeros(n, dtype=torch.bool),
                          torch.zeros(n, dtype=torch.bool), obs,
                          policy_version=torch.zeros(n, dtype=torch.int64))

    # ---- acting -----------------------------------------------------------
    def rollout_step(self, observation) -> AlgStep:
        """Uniformly random actions until the initial collection is stored
        (the same decision on every rank: equal sizes), then `policy_step`.

        It counts stored transitions in a plain int, so that a background
        collector's acting copy (which has no replay buffer) receives the
        count with the weights.
        """
        if self._num_stored < self._local_initial_collect:
            return AlgStep(output=self.random_action(observation.shape[0]))
        return self.policy_step(observation)

    def policy_step(self, observation) -> AlgStep:
        """Acts for collection once training has started."""
        raise NotImplementedError

    def random_action(self, n: int) -> torch.Tensor:
        """``n`` actions drawn uniformly from the action space."""
        space = self.action_space
        if isinstance(space, gym.spaces.Discrete):
            return torch.randint(int(space.n), (n, ), device=self.device)
        # Discrete and Box are the kinds of space this method handles.
        assert isinstance(space, gym.spaces.Box), space
        low = torch.as_tensor(space.low, device=self.device)
        high = torch.as_tensor(space.high, device=self.device)
        return low + (high - low) * torch.rand((n, ) + low.shape,
                                               device=self.device)

    def local_state(self) -> Dict[str, torch.Tensor]:
        """This rank's replay buffer's contents, if
        ``TrainerConfig.checkpoint_replay``."""
        if not self.config.checkpoint_replay:
            return {}
        return self.replay_buffer.contents()

    def load_local_state(self, state: Dict[str, torch.Tensor]) -> None:
        self.replay_buffer.load_contents(
            state, self.example_experience(self.config.local_num_envs))

    def idle_settings(self, config) -> List[str]:
        # A prioritized strategy's options bound while another strategy
        # replays (the deprecated priority_alpha's refusal sends users to
        # them): they would train uniformly without a word.
        from alf.replay_buffers.prioritized_replay import (
            PrioritizedGlobalReplay, PrioritizedReplay)
        said = super().idle_settings(config)
        name = type(self).__name__
        for cls in (PrioritizedReplay, PrioritizedGlobalReplay):
            if type(self.replay) is cls:
                continue
            for option in ("alpha", "beta", "eps"):
                try:
                    value = gin.query_parameter(f"{cls.__name__}.{option}")
                except ValueError:  # not bound
                    continue
                said.append(
                    f"{cls.__name__}.{option}={value!r} does nothing: "
                    f"{name} replays with {type(self.replay).__name__}; "
                    f"bind {name}.replay = @{cls.__name__}() for it")
        return said

    def act_as_trained(self, env_steps: int) -> None:
        # Past the initial collection, the run sampled with its policy, not
        # at random, and with its schedules (DQN's epsilon) where training
        # had brought them: train_iter sets the progress before the
        # iteration's evaluation.
        world = max(1, self.config.world_size)
        self._num_stored = max(self._num_stored, env_steps // world)
        self._progress = min(env_steps / self.config.num_env_steps, 1.0)

    def on_resume(self, env_steps: int, local_note: str = "") -> None:
        """Without its replay contents (`local_state`) a resumed rank
        starts with an empty buffer. It refills it with the restored
        policy: acting at random again, as a fresh run's initial
        collection does, would throw away what the checkpoint learnt.
        Updates wait, as at the start, until the buffer holds the initial
        collection."""
        world = max(1, self.config.world_size)
        self._num_stored = max(self._num_stored, env_steps // world)
        if len(self.replay) == 0:
            why = local_note or "none was saved with this checkpoint"
            needed = max(self._local_initial_collect,
                         self._local_minibatch_size, 1)
            logging.warning(
                "%sresumed with an empty replay buffer (%s): updates resume "
                "once it holds %d transitions again, collected with the "
                "restored policy",
                f"rank {distributed.get_rank()}: " if world > 1 else "",
                why, needed)

    # ---- training ---------------------------------------------------------
    def store(self, exp: Experience) -> None:
        self.replay.add_batch(exp)
        self._num_stored += exp.reward.shape[0]

    def ready(self) -> bool:
        """Whether training has started (equal on every rank)."""
        needed = max(self._local_initial_collect, self._local_minibatch_size,
                     1)
        return self.replay.ready(needed)

    def _ready_everywhere(self) -> bool:
        """`ready`, agreed by every rank: with straggler preemption ranks
        store different amounts, and whether to update is a control-flow
        decision (one all-reduce, only then)."""
        ready = self.ready()
        if not getattr(self.config, "preempt_stragglers", False):
            return ready
        return not distributed.any_rank(not ready)

    def train_iter(self, progress: float) -> Dict[str, torch.Tensor]:
        self._commit_normalizer()
        self._progress = progress
        if not self._ready_everywhere():
            return {}
        non_finite = f"non-finite {type(self).__name__} loss"
        # A strategy that takes priorities refuses a non-finite one with a
        # traceback of its own, so the loss is checked before it sees them.
        # Not for one that ignores them: a check per update syncs with the
        # device; the mean below catches a NaN there.
        takes_priorities = (type(self.replay).update_priorities
                            is not Replay.update_priorities)
        names, stats = None, []
        for _ in range(self._num_updates):
            sample = self.replay.sample(self._local_minibatch_size, progress)
            loss_info = self.minibatch_loss(sample.batch, sample.weights,
                                            sample.loss_scale)
            grad_norm = self.update_with_gradient(loss_info,
                                                  self._max_grad_norm)
            if takes_priorities and not torch.isfinite(loss_info.loss):
                raise TrainingError(non_finite)
            self.replay.update_priorities(sample.indices,
                                          loss_info.priority)
            self.after_update()
            names = names or ["loss", *loss_info.extra, "grad_norm"]
            stats.append(torch.stack([loss_info.loss.detach(),
                                      *loss_info.extra.values(), grad_norm]))
        means = torch.stack(stats).mean(0)
        if not torch.isfinite(means[0]):
            raise TrainingError(non_finite)
        assert names is not None  # set by the first update
        return dict(zip(names, means.unbind(0)))

    def minibatch_loss(self, batch: Experience,
                       weights: Optional[torch.Tensor],
                       loss_scale: float) -> LossInfo:
        """The loss of one minibatch, ``loss_scale * sum(weights * l_i)``
        over its items (`weighted_sum`; ``weights`` of None are all 1),
        with ``priority`` (e.g. |TD error|) per item for
        `Replay.update_priorities`. Subclasses decorate it with
        `distributed.data_distributed`."""
        raise NotImplementedError

    def after_update(self) -> None:
        """Runs after every optimizer step (target network updates)."""


def space_zeros(space: gym.Space, n: int):
    """``n`` zero elements of ``space`` as the environments give them:
    tensors [n, ...] (nested for Dict and Tuple spaces), float64 as
    float32."""
    def to_tensor(x: np.ndarray) -> torch.Tensor:
        t = torch.from_numpy(x)
        return t.float() if t.dtype == torch.float64 else t
    return nest.map_structure(
        to_tensor, gym.vector.utils.create_empty_array(space, n, fn=np.zeros))


def weighted_sum(per_item: torch.Tensor, weights: Optional[torch.Tensor],
                 loss_scale: float) -> torch.Tensor:
    """``loss_scale * sum(weights * per_item)``; None weights are all 1
    (no multiply)."""
    if weights is not None:
        per_item = weights * per_item
    return per_item.sum() * loss_scale


@torch.no_grad()
def polyak_update(target: torch.nn.Module, source: torch.nn.Module,
                  tau: float) -> None:
    """``target = (1 - tau) * target + tau * source``, parameter by parameter
    (``tau = 1`` copies)."""
    t: List[torch.Tensor] = list(target.parameters())
    s: List[torch.Tensor] = list(source.parameters())
    if tau >= 1.0:
        torch._foreach_copy_(t, s)
    else:
        torch._foreach_lerp_(t, s, tau)
