"""Replay strategies: how an off-policy algorithm stores and draws experience.

A `Replay` is chosen in gin (``DQNAlgorithm.replay = @PrioritizedReplay()``)
or passed to the algorithm's constructor. It owns the storage of one rank
(made by `Replay.build` once the per-rank capacity is known), and the
algorithm only ever calls the methods below, so a new way of replaying is a
new subclass, not an edit of the algorithm:

* `storage_bytes`: what `build` will allocate, checked against the memory
  before anything is allocated;
* `build`: makes the storage, which the algorithm registers as its
  ``replay_buffer`` submodule;
* `add_batch`: stores one time step of every stream;
* `ready`: whether enough is stored to train;
* `sample`: a `ReplaySample` (experience, item ids, importance weights, loss
  scale);
* `update_priorities`: priorities from the loss (ignored by default);
* `beta`: the importance-weight exponent (None: no weights).

In distributed training every rank calls `sample` once per update, in the
same order (the lockstep rule of DESIGN.md): a strategy that needs a
collective (`PrioritizedGlobalReplay`'s all-reduce) issues it there, and
one that gives ranks different numbers of items sets ``loss_scale`` so
that DDP's averaged gradient is still the intended mean.

Checkpoints do not hold the stored experience: `ReplayBuffer` and
`SumTree` register their storage with ``persistent=False`` (a resumed run
refills its buffer, see `OffPolicyAlgorithm.on_resume`). The strategy
object is rebuilt from the config; a strategy whose state must survive a
restart keeps it in persistent buffers of the module `make_buffer`
returns.

In gin, for example::

    DQNAlgorithm.replay = @PrioritizedReplay()
    PrioritizedReplay.alpha = 0.6
"""
import abc
from typing import Optional

import gin
import torch

from alf.replay_buffers.replay_buffer import (ReplayBuffer, ReplaySample,
                                              step_bytes)


class Replay(abc.ABC):
    """How experience is stored and drawn (one rank's share).

    Subclasses implement `sample` and, where they need more than a plain
    `ReplayBuffer` (a sum tree, say), `make_buffer` and `storage_bytes`;
    their ``__init__`` takes only their options (nothing to pass up).

    Sizes are per rank: ``capacity`` time steps of ``num_streams``
    environments, and `sample`'s ``local_minibatch_size`` is this rank's
    share of the global minibatch.

    Attributes:
        buffer: the storage, once `build` has made it (None before).
    """

    buffer: Optional[ReplayBuffer] = None

    def storage_bytes(self, capacity: int, num_streams: int, example) -> int:
        """Bytes `build` (with the first `add_batch` of time steps like
        ``example``, a nest of [num_streams, ...]) will allocate."""
        return capacity * step_bytes(example)

    def build(self, capacity: int, num_streams: int,
              device: Optional[torch.device] = None) -> ReplayBuffer:
        """Makes and keeps the storage (`make_buffer`).

        Args:
            capacity: time steps kept per stream.
            num_streams: parallel streams (this rank's environments).
            device: where the storage lives (None: it follows the module
                it is registered in).

        Returns:
            The storage module, for the algorithm to register.

        Raises:
            ValueError: if this strategy already has a storage: each
                algorithm needs its own strategy object.
        """
        if self.buffer is not None:
            raise ValueError(
                f"{type(self).__name__} is already built (it serves one "
                "algorithm); make one replay object per algorithm")
        self.buffer = self.make_buffer(capacity, num_streams, device)
        return self.buffer

    def make_buffer(self, capacity: int, num_streams: int,
                    device: Optional[torch.device]) -> ReplayBuffer:
        """The storage module `build` keeps (a plain `ReplayBuffer`)."""
        return ReplayBuffer(capacity, num_streams, device=device)

    def add_batch(self, batch) -> None:
        """Stores one time step: a nest whose leaves have shape
        [num_streams, ...]."""
        assert self.buffer is not None, "build() was not called"
        self.buffer.add_batch(batch)

    def __len__(self) -> int:
        """Transitions stored on this rank."""
        return 0 if self.buffer is None else len(self.buffer)

    def ready(self, min_items: int) -> bool:
        """Whether this rank stores at least ``min_items`` transitions."""
        return len(self) >= min_items

    def beta(self, progress: float) -> Optional[float]:
        """The importance-weight exponent at ``progress`` (fraction of
        training done); None for a strategy without importance weights."""
        return None

    @abc.abstractmethod
    def sample(self, local_minibatch_size: int, progress: float = 0.0,
               generator: Optional[torch.Generator] = None) -> ReplaySample:
        """Draws a minibatch.

        Args:
            local_minibatch_size: this rank's share of the global minibatch.
            progress: fraction of training done, for schedules.
            generator: this rank's RNG for the draws (None: torch's).

        Returns:
            The experience with its item ids (numbered as
            `ReplayBuffer.gather` numbers them), importance weights (None:
            all 1) and the loss scale.
        """

    # Not abstract: a no-op is the right default (uniform replay has no
    # priorities).
    def update_priorities(self, indices: Optional[torch.Tensor],  # noqa: B027
                          priorities) -> None:
        """Takes per-item priorities (e.g. |TD error|) of the items a
        `sample` returned; strategies without priorities ignore them."""


@gin.configurable
class UniformReplay(Replay):
    """Each rank draws its share of the minibatch uniformly, with
    replacement, from its own buffer.

    Weights are None (all 1) and the loss scale is
    ``1 / local_minibatch_size``, so the loss is the minibatch mean. In gin:
    ``DQNAlgorithm.replay = @UniformReplay()`` (the default).

    Example:
        >>> import torch
        >>> from alf.replay_buffers import UniformReplay
        >>> replay = UniformReplay()
        >>> buffer = replay.build(capacity=4, num_streams=2)
        >>> for t in range(3):
        ...     replay.add_batch(torch.full((2, ), float(t)))
        >>> len(replay), replay.ready(6), replay.beta(0.5)
        (6, True, None)
        >>> sample = replay.sample(5)
        >>> sample.batch.shape, sample.indices.shape, sample.weights
        (torch.Size([5]), torch.Size([5]), None)
        >>> torch.equal(sample.batch, buffer.gather(sample.indices))
        True
    """

    def sample(self, local_minibatch_size: int, progress: float = 0.0,
               generator: Optional[torch.Generator] = None) -> ReplaySample:
        assert self.buffer is not None, "build() was not called"
        indices = self.buffer.uniform_indices(local_minibatch_size,
                                              generator)
        return ReplaySample(self.buffer.gather(indices), indices, None,
                            1.0 / local_minibatch_size)
