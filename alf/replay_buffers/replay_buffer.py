"""A ring buffer of batched transitions held in registered torch buffers.

Storage is a set of tensors of shape [capacity, B, ...], one per leaf of the
stored nest, registered as buffers of an `nn.Module`. Being buffers lets them
follow ``.to(device)`` and, optionally, checkpoints; it is also exactly what
distributed training must keep out of DDP's buffer broadcast (each rank holds
its own experience).
"""
from typing import Any, Dict, Iterator, List, NamedTuple, Optional

import torch
from torch import nn

from alf import nest
from alf.utils import distributed
from alf.utils.memory import check_allocation


_CAPACITY = "capacity"  # a key of `ReplayBuffer.contents`


class ReplaySample(NamedTuple):
    """A sampled minibatch: what every replay strategy's ``sample`` returns.

    The loss of the minibatch is ``loss_scale * sum(weights * l_i)`` over its
    items (``alf.algorithms.off_policy_algorithm.weighted_sum``).
    """

    batch: Any  # a nest of [n, ...]; n may differ across ranks
    indices: Optional[torch.Tensor]  # [n] item ids, for update_priorities
    # [n] importance weights (float32); None means all 1 (uniform replay),
    # so that the loss skips a multiply by ones.
    weights: Optional[torch.Tensor]
    loss_scale: float


def step_bytes(batch) -> int:
    """Bytes of one stored time step like ``batch`` (a nest of [B, ...])."""
    return sum(leaf.numel() * leaf.element_size()
               for leaf in nest.flatten(batch))


class ReplayBuffer(nn.Module):
    """Stores ``B`` parallel streams of transitions, ``capacity`` steps each.

    The storage is created on the first `add_batch` from the shapes and dtypes
    of what is added.

    Args:
        capacity: number of time steps kept per stream (ring buffer).
        batch_size: number of parallel streams ``B`` (environments).
        include_in_checkpoint: whether the contents go into ``state_dict``.
        device: where the storage lives.
    """

    _num_added: torch.Tensor

    def __init__(self, capacity: int, batch_size: int,
                 include_in_checkpoint: bool = False,
                 device: Optional[torch.device] = None):
        super().__init__()
        # Each rank keeps its own experience: DDP must never sync it.
        distributed.exclude_from_ddp(self)
        if capacity < 1 or batch_size < 1:
            raise ValueError(f"capacity ({capacity}) and batch_size "
                             f"({batch_size}) must be positive")
        self.capacity = capacity
        self.batch_size = batch_size
        self._persistent = include_in_checkpoint
        self._device = device
        self._treespec = None
        self._leaf_names: List[str] = []
        # Total number of add_batch calls, as a buffer so checkpoints keep it.
        self.register_buffer("_num_added", torch.zeros((), dtype=torch.int64),
                             persistent=include_in_checkpoint)
        self._added = 0  # python mirror of _num_added: no .item() per step
        self._spec_from_example = False  # see `load_contents`

    def storage_bytes(self, batch) -> int:
        """Bytes of the storage for time steps like ``batch`` (a nest of
        [B, ...]): what the first `add_batch` of it allocates."""
        return self.capacity * step_bytes(batch)

    def _build(self, batch) -> None:
        leaves = nest.flatten(batch)
        # Check every leaf before registering anything: a rejected first
        # batch must leave the buffer empty, not half-built.
        for i, leaf in enumerate(leaves):
            if leaf.shape[:1] != (self.batch_size,):
                raise ValueError(
                    f"add_batch: leaf {i} has shape {tuple(leaf.shape)}; its "
                    f"first dim must be batch_size={self.batch_size}")
        check_allocation(
            self.storage_bytes(batch), self._storage_device(),
            f"a replay buffer of {self.capacity} steps x {self.batch_size} "
            "streams", "lower its capacity")
        # The first add usually happens during a rollout under
        # torch.inference_mode(); storage made there could never take part
        # in autograd, so it is made outside it.
        with torch.inference_mode(False):
            for i, leaf in enumerate(leaves):
                name = f"_storage_{i}"
                self.register_buffer(
                    name, torch.zeros((self.capacity, ) + tuple(leaf.shape),
                                      dtype=leaf.dtype,
                                      device=self._storage_device()),
                    persistent=self._persistent)
                self._leaf_names.append(name)
        self._treespec = nest.structure(batch)

    def _storage_device(self) -> torch.device:
        # Without an explicit device, storage follows the module: an
        # algorithm moved to a GPU gets its buffers there.
        return self._device or self._num_added.device

    def _storage(self):
        return [getattr(self, n) for n in self._leaf_names]

    @property
    def num_added(self) -> int:
        """Number of `add_batch` calls since the last `clear`: the time step
        last added is in slot ``(num_added - 1) % capacity``."""
        return self._added

    @property
    def num_steps(self) -> int:
        """Number of time steps currently stored per stream."""
        return min(self._added, self.capacity)

    def __len__(self) -> int:
        """Number of transitions stored (time steps x streams)."""
        return self.num_steps * self.batch_size

    @torch.no_grad()  # stored data never carries an autograd graph
    def add_batch(self, batch) -> None:
        """Appends one time step: a nest whose leaves have shape [B, ...]."""
        if self._treespec is None:
            self._build(batch)
        elif nest.structure(batch) != self._treespec:
            if self._spec_from_example and self._fits(batch):
                # Restored contents: the storage was made from an example
                # whose nest may differ in form, not in its leaves.
                self._treespec = nest.structure(batch)
                self._spec_from_example = False
                return self.add_batch(batch)
            raise ValueError(
                f"add_batch: structure {nest.structure(batch)} differs from "
                f"the stored {self._treespec}")
        pos = self._added % self.capacity
        for store, leaf in zip(self._storage(), nest.flatten(batch)):
            store[pos].copy_(leaf)
        self._added += 1
        self._num_added.fill_(self._added)

    def gather_all(self):
        """Everything stored, oldest first: a nest of [num_steps, B, ...]."""
        self._check_nonempty(1)
        n = self.num_steps
        start = self._added % self.capacity if self._added > self.capacity else 0
        if start == 0:
            leaves = [s[:n] for s in self._storage()]
        else:
            leaves = [torch.cat([s[start:], s[:start]]) for s in self._storage()]
        return nest.unflatten(self._treespec, leaves)

    def get_batch(self, batch_size: int,
                  generator: Optional[torch.Generator] = None):
        """Samples ``batch_size`` transitions uniformly with replacement.

        Returns:
            A nest of [batch_size, ...].
        """
        return self.gather(self.uniform_indices(batch_size, generator))

    def uniform_indices(self, n: int,
                        generator: Optional[torch.Generator] = None
                        ) -> torch.Tensor:
        """``n`` item ids drawn uniformly with replacement from those
        stored (see `gather` for the numbering)."""
        self._check_nonempty(1)
        return torch.randint(len(self), (n, ), generator=generator)

    def gather(self, items: torch.Tensor):
        """The transitions numbered ``items`` (``t * batch_size + b``: time
        slot, stream), as a nest of [len(items), ...]."""
        storage = self._storage()
        items = items.to(storage[0].device)
        # [capacity, B, ...] is contiguous, so item t * B + b is row
        # t * B + b of the flat view: one index_select per leaf.
        return nest.unflatten(self._treespec, [
            s.view((-1, ) + s.shape[2:]).index_select(0, items)
            for s in storage])

    def clear(self) -> None:
        """Forgets the contents (the storage is kept for reuse)."""
        self._added = 0
        self._num_added.zero_()

    def contents(self) -> Dict[str, torch.Tensor]:
        """Everything stored, for a file beside a checkpoint: every buffer
        of this module and its children (a subclass's sum tree too),
        persistent or not, on the CPU; the storage only up to what was
        filled. Empty before the first `add_batch`."""
        if self._treespec is None:
            return {}
        n = self.num_steps
        out = {name: (_filled(t, n) if name in self._leaf_names else t.cpu())
               for name, t in self.named_buffers()}
        # Where each step sits in the ring depends on it.
        out[_CAPACITY] = torch.tensor(self.capacity)
        return out

    def load_contents(self, contents: Dict[str, torch.Tensor],
                      example) -> None:
        """Restores `contents` (another buffer's, of the same sizes).

        Args:
            contents: what `contents` returned.
            example: one time step like those stored (a nest of [B, ...]),
                from which the storage is made if it is not yet.

        Raises:
            ValueError: ``contents`` does not fit this buffer (other
                capacity, streams or transitions); nothing is changed.
        """
        contents = dict(contents)
        capacity = int(contents.pop(_CAPACITY, -1))
        if capacity != self.capacity:
            raise ValueError(
                f"saved with {capacity} steps per environment, this buffer "
                f"holds {self.capacity} (replay_buffer_capacity, num_envs or "
                "the number of processes changed)")
        fresh = self._treespec is None
        if fresh:
            self._build(example)
        own = dict(self.named_buffers())

        def fits(name: str, t: torch.Tensor) -> bool:
            mine = own[name]
            if name not in self._leaf_names:  # counters, trees: whole
                return t.dtype == mine.dtype and t.shape == mine.shape
            return (t.dtype == mine.dtype and t.shape[1:] == mine.shape[1:]
                    and len(t) <= len(mine))

        extra, lacking = (sorted(set(contents) - set(own)),
                          sorted(set(own) - set(contents)))
        bad = [k for k, t in contents.items() if k in own and not fits(k, t)]
        if extra or lacking or bad:
            if fresh:  # leave it as it was: storage made on first add
                for name in self._leaf_names:
                    delattr(self, name)
                self._leaf_names, self._treespec = [], None
            if extra or lacking:
                raise ValueError(
                    "saved by another kind of replay buffer (uniform "
                    "against prioritized replay?): it has "
                    f"{', '.join(extra) or 'nothing more'}, lacks "
                    f"{', '.join(lacking) or 'nothing'}")
            raise ValueError(f"stored contents do not fit this buffer "
                             f"({bad[0]}: capacity {self.capacity} x "
                             f"{self.batch_size} streams)")
        self._spec_from_example = fresh
        with torch.no_grad():
            for k, t in contents.items():
                (own[k][:len(t)] if k in self._leaf_names else own[k]
                 ).copy_(t)
        self._added = int(self._num_added)

    def _fits(self, batch) -> bool:
        """Whether ``batch``'s leaves are shaped and typed as stored."""
        leaves, storage = nest.flatten(batch), self._storage()
        return len(leaves) == len(storage) and all(
            leaf.shape == s.shape[1:] and leaf.dtype == s.dtype
            for leaf, s in zip(leaves, storage))

    def _check_nonempty(self, n: int) -> None:
        if len(self) < n:
            raise ValueError(f"replay buffer holds {len(self)} transitions; "
                             f"need at least {n}")

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        self._added = int(self._num_added)

    def extra_repr(self) -> str:
        return (f"capacity={self.capacity}, batch_size={self.batch_size}, "
                f"stored={self.num_steps}")


def minibatch_indices(n: int, minibatch_size: int, num_epochs: int = 1,
                      generator: Optional[torch.Generator] = None
                      ) -> List[torch.Tensor]:
    """Row indices of the minibatches of ``num_epochs`` shuffled passes.

    Each epoch is a fresh permutation of ``range(n)`` cut into minibatches
    of ``minibatch_size`` (the last one of an epoch may be smaller).
    Drawing them all up front lets an algorithm compute per-minibatch
    statistics for a whole iteration at once.
    """
    out = []
    for _ in range(num_epochs):
        perm = torch.randperm(n, generator=generator)
        out += [perm[s:s + minibatch_size]
                for s in range(0, n, minibatch_size)]
    return out


def iterate_minibatches(batch, minibatch_size: int,
                        generator: Optional[torch.Generator] = None
                        ) -> Iterator[Any]:
    """Yields shuffled minibatches that cover ``batch`` once.

    Args:
        batch: a nest whose leaves share the leading dim ``N``.
        minibatch_size: rows per minibatch; the last one may be smaller
            when it does not divide ``N``.
        generator: the RNG for the permutation (a fresh one per call of
            this function means a fresh shuffle per epoch).
    """
    leaves = nest.flatten(batch)
    treespec = nest.structure(batch)
    for idx in minibatch_indices(leaves[0].shape[0], minibatch_size, 1,
                                 generator):
        yield nest.unflatten(treespec, [x[idx] for x in leaves])


def _filled(storage: torch.Tensor, n: int) -> torch.Tensor:
    """The first ``n`` rows of ``storage`` on the CPU, to save: the storage
    itself when that is all of it (a full buffer is not copied: it would
    double its memory while saved), else a copy (torch.save writes a
    view's whole storage)."""
    whole = (n == storage.shape[0] and storage.storage_offset() == 0 and
             storage.untyped_storage().nbytes() == storage.nbytes)
    if whole and storage.device.type == "cpu":
        return storage
    return storage[:n].to("cpu", copy=True)

