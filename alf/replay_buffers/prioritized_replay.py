"""Proportional prioritized replay as `Replay` strategies: per rank
(`PrioritizedReplay`) or over the union of every rank's buffer
(`PrioritizedGlobalReplay`). The sampling itself, and its global semantics,
are `PrioritizedReplayBuffer`'s."""
from typing import Optional

import gin
import torch

from alf.replay_buffers.prioritized import (PrioritizedReplayBuffer,
                                           check_priority_options)
from alf.replay_buffers.replay import Replay
from alf.replay_buffers.replay_buffer import ReplaySample
from alf.replay_buffers.sum_tree import SumTree
from alf.utils import distributed


class _Prioritized(Replay):
    """What both prioritized strategies share. Each gin-configurable class
    derives from this undecorated one, so that a binding of one (e.g.
    ``PrioritizedReplay.alpha``) never reaches the other."""

    #: Whether a minibatch is drawn from the union of all ranks' buffers.
    global_sampling = False

    buffer: Optional[PrioritizedReplayBuffer]  # what make_buffer makes

    def __init__(self, alpha: float = 0.6, beta: float = 0.4,
                 eps: float = 1e-6):
        # Here as well as in the buffer: the message names the binding the
        # user wrote (PrioritizedReplay.alpha), and beta is only used here.
        check_priority_options(type(self).__name__, alpha, eps, beta)
        self.alpha = alpha
        self.beta0 = beta
        self.eps = eps

    def storage_bytes(self, capacity: int, num_streams: int, example) -> int:
        return (super().storage_bytes(capacity, num_streams, example) +
                SumTree.storage_bytes(capacity * num_streams))

    def make_buffer(self, capacity: int, num_streams: int,
                    device: Optional[torch.device]) -> PrioritizedReplayBuffer:
        return PrioritizedReplayBuffer(
            capacity, num_streams, alpha=self.alpha, eps=self.eps,
            global_sampling=self.global_sampling, device=device)

    def beta(self, progress: float) -> float:
        """Grows linearly from ``beta`` at the start to 1 at the end."""
        return self.beta0 + (1.0 - self.beta0) * progress

    def sample(self, local_minibatch_size: int, progress: float = 0.0,
               generator: Optional[torch.Generator] = None) -> ReplaySample:
        assert self.buffer is not None, "build() was not called"
        return self.buffer.sample(local_minibatch_size,
                                  beta=self.beta(progress),
                                  generator=generator)

    def update_priorities(self, indices: Optional[torch.Tensor],
                          priorities: torch.Tensor) -> None:
        # sample() always returns the item ids.
        assert self.buffer is not None and indices is not None
        self.buffer.update_priorities(indices, priorities)


@gin.configurable
class PrioritizedReplay(_Prioritized):
    """Proportional prioritized replay (Schaul et al., 2016), each rank on
    its own buffer: item ``i`` is drawn with probability proportional to
    ``p_i^alpha`` and weighted by ``(p_i / p_min)^-beta`` (see
    `PrioritizedReplayBuffer`).

    In gin: ``DQNAlgorithm.replay = @PrioritizedReplay()``, with
    ``PrioritizedReplay.alpha = 0.6`` and so on.

    Args:
        alpha: how much prioritisation is used, a number >= 0 (0:
            uniform).
        beta: the importance-weight exponent at the start of training, in
            [0, 1]; it grows linearly to 1 at the end (full correction).
        eps: added to every priority given to `update_priorities`, so no
            item becomes impossible to draw; a number >= 0 (0 is allowed:
            an item whose TD error is then exactly 0 is never drawn again).

    Example:
        >>> import torch
        >>> from alf.replay_buffers import PrioritizedReplay
        >>> replay = PrioritizedReplay(alpha=1.0, beta=0.5, eps=0.0)
        >>> buffer = replay.build(capacity=2, num_streams=2)
        >>> for t in range(2):
        ...     replay.add_batch(torch.tensor([2.0 * t, 2.0 * t + 1]))
        >>> replay.update_priorities(torch.arange(4),
        ...                          torch.tensor([0.0, 0.0, 0.0, 1.0]))
        >>> sample = replay.sample(3, progress=0.0)
        >>> sample.indices.tolist(), sample.batch.tolist()
        ([3, 3, 3], [3.0, 3.0, 3.0])
        >>> replay.beta(0.5)
        0.75
    """


@gin.configurable
class PrioritizedGlobalReplay(_Prioritized):
    """Prioritized replay with single-buffer semantics over all ranks: the
    global minibatch (`sample`'s ``local_minibatch_size`` times the number
    of ranks: ``TrainerConfig.minibatch_size``) is drawn as if from one
    buffer holding every rank's items, with one all-reduce per minibatch; a
    rank may draw more or fewer items than its share (even none), which the
    loss scale makes up for (see `alf.replay_buffers.prioritized`). In one
    process it is `PrioritizedReplay`.

    In gin: ``SACAlgorithm.replay = @PrioritizedGlobalReplay()``.

    Args:
        alpha, beta, eps: see `PrioritizedReplay`.

    Example:
        >>> import torch
        >>> from alf.replay_buffers import PrioritizedGlobalReplay
        >>> replay = PrioritizedGlobalReplay()
        >>> buffer = replay.build(capacity=4, num_streams=2)
        >>> for t in range(2):
        ...     replay.add_batch(torch.zeros(2))
        >>> sample = replay.sample(4)  # one process: all 4 items are here
        >>> sample.loss_scale, sample.weights.tolist()
        (0.25, [1.0, 1.0, 1.0, 1.0])
    """

    global_sampling = True

    def sample(self, local_minibatch_size: int, progress: float = 0.0,
               generator: Optional[torch.Generator] = None) -> ReplaySample:
        # The buffer splits the global minibatch among the ranks.
        return super().sample(
            local_minibatch_size * distributed.get_world_size(), progress,
            generator)
