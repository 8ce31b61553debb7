"""`OffPolicyAlgorithm`: replay, initial random collection, target networks.

An off-policy algorithm stores every transition in a replay buffer (each rank
its own; DDP never touches it) and, once the buffer holds the initial
collection, runs ``config.num_updates_per_train_iter`` gradient updates per
iteration on sampled minibatches. Subclasses provide `policy_step` (acting
after the initial collection), `predict_step` and `minibatch_loss`
(decorated with `data_distributed`), and update their target networks in
`after_update`, which runs after the synchronised optimizer step on every
rank, so that target networks stay equal across ranks.

Replay modes (``replay``):

* ``uniform`` (default): each rank samples its own buffer uniformly, its
  per-rank share of ``mini_batch_size``;
* ``prioritized``: proportional prioritized replay, each rank on its own;
* ``prioritized_global``: prioritized replay with global semantics, the
  global ``mini_batch_size`` drawn from the union of all ranks' buffers
  (`PrioritizedReplayBuffer`).
"""
import os
from typing import Dict, Optional

import gymnasium as gym
import numpy as np
import torch

from alf import nest
from alf.algorithms.rl_algorithm import RLAlgorithm
from alf.data_structures import AlgStep, Experience, LossInfo
from alf.replay_buffers import PrioritizedReplayBuffer, ReplayBuffer
from alf.replay_buffers.prioritized import PrioritizedBatch
from alf.replay_buffers.sum_tree import SumTree
from alf.utils import distributed
from alf.utils.errors import ConfigError, TrainingError
from alf.utils.memory import check_allocation

REPLAY_MODES = ("uniform", "prioritized", "prioritized_global")


class OffPolicyAlgorithm(RLAlgorithm):
    """Base of replay-based algorithms (per-rank sizes from ``config``).

    Args:
        observation_space, action_space, config: see `RLAlgorithm`; uses
            ``config.replay_buffer_capacity``, ``initial_collect_steps``,
            ``mini_batch_size`` and ``num_updates_per_train_iter``.
        replay: ``uniform``, ``prioritized`` or ``prioritized_global``.
        priority_alpha: prioritisation exponent.
        priority_beta: importance-weight exponent at the start; it grows
            linearly to 1 over training.
        max_grad_norm: clip the global gradient norm (None: no clipping).
    """

    # Collection ending early only stores fewer transitions; the number of
    # updates per iteration is the config's on every rank. Asynchronous
    # rollouts ended early have columns of different lengths, which a
    # replay buffer storing whole time steps cannot take.
    preemptible_unroll_modes = ("sync", )

    def __init__(self, observation_space: gym.Space, action_space: gym.Space,
                 config, replay: str = "uniform",
                 priority_alpha: float = 0.6, priority_beta: float = 0.4,
                 max_grad_norm=None):
        super().__init__(observation_space, action_space, config)
        if replay not in REPLAY_MODES:
            raise ConfigError(f"replay={replay!r}; valid: {REPLAY_MODES}")
        steps = config.replay_buffer_capacity // config.num_envs
        if steps < config.unroll_length:
            raise ConfigError(
                f"TrainerConfig.replay_buffer_capacity="
                f"{config.replay_buffer_capacity} (per process) holds "
                f"{steps} steps of {config.num_envs} environments, less than "
                f"one unroll (unroll_length={config.unroll_length}); make it "
                f"at least {config.unroll_length * config.num_envs}")
        held = steps * config.num_envs
        for name in ("mini_batch_size", "initial_collect_steps"):
            if getattr(config, name) > held:
                # Training would wait forever for a buffer this full.
                raise ConfigError(
                    f"TrainerConfig.{name}={getattr(config, name)} (per "
                    f"process) is more than the replay buffer holds ({held} "
                    f"transitions); raise replay_buffer_capacity or lower "
                    f"{name}")
        self._check_replay_memory(config, steps, replay)
        self._replay = replay
        if replay == "uniform":
            self.replay_buffer = ReplayBuffer(steps, config.num_envs)
        else:
            self.replay_buffer = PrioritizedReplayBuffer(
                steps, config.num_envs, alpha=priority_alpha,
                global_sampling=replay == "prioritized_global")
        self._beta0 = priority_beta
        self._max_grad_norm = max_grad_norm
        self._initial_collect = config.initial_collect_steps
        self._mini_batch_size = config.mini_batch_size
        self._num_updates = config.num_updates_per_train_iter
        self._progress = 0.0
        self._num_stored = 0  # transitions stored (see rollout_step)

    def _check_replay_memory(self, config, steps: int, replay: str) -> None:
        """Refuses a replay capacity the machine has no memory for, before
        anything is allocated (and before the trainer writes any file).

        The storage is made on the first `store`; its size comes from one
        transition like those the collector stores, built from the spaces.
        Every process on this machine keeps its own buffer.
        """
        buffer = ReplayBuffer(steps, config.num_envs)
        nbytes = buffer.storage_bytes(self.example_experience(
            config.num_envs))
        if replay != "uniform":
            nbytes += SumTree.storage_bytes(steps * config.num_envs)
        per_item = nbytes / (steps * config.num_envs)
        world = distributed.get_world_size()
        check_allocation(
            nbytes, config.resolve_device(),
            f"TrainerConfig.replay_buffer_capacity="
            f"{config.replay_buffer_capacity * world} "
            f"({per_item:.0f} bytes per transition)",
            lambda room: "lower replay_buffer_capacity (at most about "
            f"{int(room // per_item) * world} transitions fit)",
            copies=int(os.environ.get("LOCAL_WORLD_SIZE", world)))

    def example_experience(self, n: int) -> Experience:
        """Zeros shaped and typed like ``n`` stored transitions."""
        obs = space_zeros(self.observation_space, n)
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
        if self._num_stored < self._initial_collect:
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
        low = torch.as_tensor(space.low, device=self.device)
        high = torch.as_tensor(space.high, device=self.device)
        return low + (high - low) * torch.rand((n, ) + low.shape,
                                               device=self.device)

    # ---- training ---------------------------------------------------------
    def store(self, exp: Experience) -> None:
        self.replay_buffer.add_batch(exp)
        self._num_stored += exp.reward.shape[0]

    def ready(self) -> bool:
        """Whether training has started (equal on every rank)."""
        needed = max(self._initial_collect, self._mini_batch_size, 1)
        return len(self.replay_buffer) >= needed

    def _ready_everywhere(self) -> bool:
        """`ready`, agreed by every rank: with straggler preemption ranks
        store different amounts, and whether to update is a control-flow
        decision (one all-reduce, only then)."""
        ready = self.ready()
        if not getattr(self.config, "preempt_stragglers", False):
            return ready
        return not distributed.all_reduce_max(
            torch.tensor([float(not ready)]))[0]

    def train_iter(self, progress: float) -> Dict[str, torch.Tensor]:
        self._commit_normalizer()
        self._progress = progress
        if not self._ready_everywhere():
            return {}
        names, stats = None, []
        for _ in range(self._num_updates):
            sample = self._sample(progress)
            loss_info = self.minibatch_loss(sample.batch, sample.weights,
                                            sample.loss_scale)
            grad_norm = self.update_with_gradient(loss_info,
                                                  self._max_grad_norm)
            if self._replay != "uniform":
                self.replay_buffer.update_priorities(sample.indices,
                                                     loss_info.priority)
            self.after_update()
            names = names or ["loss", *loss_info.extra, "grad_norm"]
            stats.append(torch.stack([loss_info.loss.detach(),
                                      *loss_info.extra.values(), grad_norm]))
        means = torch.stack(stats).mean(0)
        if not torch.isfinite(means[0]):
            raise TrainingError(f"non-finite {type(self).__name__} loss")
        return dict(zip(names, means.unbind(0)))

    def _sample(self, progress: float) -> PrioritizedBatch:
        rb = self.replay_buffer
        if self._replay == "uniform":
            n = self._mini_batch_size
            return PrioritizedBatch(rb.get_batch(n), None, None, 1.0 / n)
        beta = self._beta0 + (1.0 - self._beta0) * progress
        n = self._mini_batch_size
        if self._replay == "prioritized_global":
            n *= distributed.get_world_size()  # the global minibatch
        return rb.sample(n, beta=beta)

    def minibatch_loss(self, batch: Experience,
                       weights: Optional[torch.Tensor],
                       loss_scale: float) -> LossInfo:
        """The loss of one minibatch, ``loss_scale * sum(weights * l_i)``
        over its items (`weighted_sum`; ``weights`` is None for uniform
        replay, i.e. all 1), with ``priority`` (e.g. |TD error|) per item
        for prioritized replay. Subclasses decorate it with
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
    (uniform replay: no multiply)."""
    if weights is not None:
        per_item = weights * per_item
    return per_item.sum() * loss_scale


@torch.no_grad()
def polyak_update(target: torch.nn.Module, source: torch.nn.Module,
                  tau: float) -> None:
    """``target = (1 - tau) * target + tau * source``, parameter by parameter
    (``tau = 1`` copies)."""
    t = list(target.parameters())
    s = list(source.parameters())
    if tau >= 1.0:
        torch._foreach_copy_(t, s)
    else:
        torch._foreach_lerp_(t, s, tau)
