"""Proportional prioritized replay (Schaul et al., 2016), with an option for
global semantics across the ranks of distributed training.

Item ``i`` is drawn with probability ``P(i) = p_i^alpha / sum_k p_k^alpha``
and weighted by ``w_i = (N P(i))^-beta / max_k w_k``, the maximum taken over
every stored item (so it comes from the smallest priority).

With ``global_sampling`` in an N-rank run, each rank keeps its own buffer,
but a global minibatch of ``B`` items is drawn as if from one buffer holding
every rank's items: one all-reduce shares each rank's total priority, item
count and smallest priority; every rank then draws, with a generator seeded
identically on all ranks, how many of the ``B`` draws land in each rank
(multinomial in the ranks' total priorities), and draws its own share from
its sum tree. Each draw therefore picks rank ``r`` with probability
``T_r / T`` and item ``i`` in it with probability ``p_i / T_r``, i.e. item
``i`` with probability ``p_i / T`` over the union; the importance weights use
the global item count, total and smallest priority. A rank may draw more or
fewer than ``B / N`` items (even none), so the loss is
``loss_scale * sum(w_i * l_i)`` with ``loss_scale = N / B``: DDP's average
of the ranks' gradients is then the single buffer's ``mean(w_i * l_i)``
gradient.
"""
import math
from numbers import Real
from typing import Optional

import torch

from alf.replay_buffers.replay_buffer import ReplayBuffer, ReplaySample
from alf.replay_buffers.sum_tree import SumTree
from alf.utils import distributed
from alf.utils.errors import ConfigError


def check_priority_options(owner: str, alpha, eps, beta=None) -> None:
    """Refuses prioritized-replay options outside their ranges, when the
    strategy or buffer is built (before training).

    ``alpha`` must be a number >= 0 (a negative one favours the items
    with the smallest TD errors); ``eps`` a number >= 0 (``|td| + eps`` is
    raised to ``alpha``: a negative ``eps`` makes priorities negative or NaN,
    refused mid-training; 0 is allowed, but an item whose TD error is
    exactly 0 is then never drawn again); ``beta`` (None: not checked) a
    number in [0, 1] (an importance-sampling exponent: 1 is the full
    correction).

    Args:
        owner: the configurable's name, for the message
            (``PrioritizedReplay``).
        alpha, eps, beta: the values given.

    Raises:
        ConfigError: naming ``owner.<option>``, the value and its range.
    """
    for name, value, high, valid in (
            ("alpha", alpha, math.inf, "a number >= 0 (0: uniform)"),
            ("eps", eps, math.inf, "a number >= 0 (added to every "
             "priority; e.g. 1e-6)"),
            ("beta", beta, 1.0, "a number in [0, 1] (1: full "
             "correction)")):
        if name == "beta" and value is None:
            continue
        if (isinstance(value, bool) or not isinstance(value, Real)
                or not math.isfinite(value)
                or not 0 <= float(value) <= high):
            raise ConfigError(f"{owner}.{name}={value!r}; valid: {valid}")


class PrioritizedReplayBuffer(ReplayBuffer):
    """A `ReplayBuffer` that samples in proportion to priorities.

    New items get the largest priority seen so far, so each is likely to be
    replayed at least once. Items are numbered ``t * batch_size + b`` (time
    slot, stream).

    Args:
        capacity, batch_size, include_in_checkpoint, device: see
            `ReplayBuffer`.
        alpha: how much prioritisation is used, >= 0 (0: uniform).
        eps: added to every priority given to `update_priorities`, so no
            item becomes impossible to draw; >= 0 (with 0, an item whose
            priority is set to 0 is never drawn again).
        global_sampling: in distributed training, sample the union of all
            ranks' buffers (module docstring); otherwise each rank samples
            its own.
        sampling_seed: seeds the generator that splits a global minibatch
            among ranks; it must be equal on every rank (by default it is
            drawn from torch's global RNG, which the trainer seeds equally on
            every rank before building the algorithm).
    """

    _max_priority: torch.Tensor

    def __init__(self, capacity: int, batch_size: int, alpha: float = 0.6,
                 eps: float = 1e-6, global_sampling: bool = False,
                 include_in_checkpoint: bool = False,
                 device: Optional[torch.device] = None,
                 sampling_seed: Optional[int] = None):
        check_priority_options(type(self).__name__, alpha, eps)
        super().__init__(capacity, batch_size, include_in_checkpoint, device)
        self.alpha = alpha
        self.eps = eps
        self.global_sampling = global_sampling
        self.sum_tree = SumTree(capacity * batch_size,
                                persistent=include_in_checkpoint)
        self.register_buffer("_max_priority",
                             torch.ones((), dtype=torch.float64),
                             persistent=include_in_checkpoint)
        if sampling_seed is None:
            sampling_seed = int(torch.randint(2**62, ()))
        self._split_generator = torch.Generator().manual_seed(sampling_seed)

    def add_batch(self, batch) -> None:
        slot = self._added % self.capacity
        super().add_batch(batch)
        items = slot * self.batch_size + torch.arange(self.batch_size)
        self.sum_tree.update(items, self._max_priority.expand(
            self.batch_size) ** self.alpha)

    def clear(self) -> None:
        super().clear()
        self.sum_tree.tree.zero_()
        self.sum_tree.min_tree.fill_(float("inf"))

    def update_priorities(self, indices: torch.Tensor,
                          priorities: torch.Tensor) -> None:
        """Sets new priorities (e.g. absolute TD errors) of sampled items.

        Raises:
            ValueError: for a NaN, infinite or negative priority, naming it.
        """
        priorities = priorities.detach().to(torch.float64).reshape(-1)
        bad = ~torch.isfinite(priorities) | (priorities < 0)
        if bool(bad.any()):
            raise ValueError(
                f"update_priorities: priority {priorities[bad][0].item()} of "
                f"item {indices.reshape(-1)[bad][0].item()} is not a finite "
                "number >= 0 (a NaN loss upstream?)")
        if priorities.numel():
            self._max_priority.copy_(torch.maximum(self._max_priority,
                                                   priorities.max()))
        self.sum_tree.update(indices, (priorities + self.eps) ** self.alpha)

    def sample(self, batch_size: int, beta: float = 0.4,
               generator: Optional[torch.Generator] = None
               ) -> ReplaySample:
        """Draws a minibatch with replacement.

        Args:
            batch_size: items per rank without ``global_sampling`` (the
                per-rank minibatch); with it, the global minibatch size,
                drawn from the union of all ranks' buffers.
            beta: importance-weight exponent (1: full correction).
            generator: this rank's RNG for the draws within its buffer.

        Raises:
            ValueError: if a buffer (the union, with ``global_sampling``)
                holds fewer items than ``batch_size``.
        """
        tree = self.sum_tree
        world = distributed.get_world_size() if self.global_sampling else 1
        # One all-reduce: every rank fills its own slot of each row.
        stats = torch.zeros(3, world, dtype=torch.float64)
        rank = distributed.get_rank() if world > 1 else 0
        stats[:, rank] = torch.stack([
            tree.total().cpu(), torch.tensor(float(len(self)),
                                             dtype=torch.float64),
            tree.min().cpu().clamp(max=torch.finfo(torch.float64).max)])
        if world > 1:
            distributed.all_reduce_sum(stats)
        totals, sizes, mins = stats
        size = int(sizes.sum())
        if size < batch_size:
            where = " over all ranks" if world > 1 else ""
            raise ValueError(
                f"cannot sample a minibatch of {batch_size} from {size} "
                f"stored items{where}; collect more first (e.g. a larger "
                "initial_collect_steps) or use a smaller minibatch")
        total = float(totals.sum())
        if world > 1:
            ranks = torch.multinomial(totals / total, batch_size,
                                      replacement=True,
                                      generator=self._split_generator)
            n = int((ranks == rank).sum())
        else:
            n = batch_size
        indices, priorities = tree.sample(n, generator)
        p_min = float(mins[sizes > 0].min())
        # w_i / max w = (p_i / p_min)^-beta: N and T cancel in the ratio.
        weights = (priorities / p_min).pow(-beta).float()
        batch = self.gather(indices)
        return ReplaySample(batch, indices,
                            weights.to(self._storage()[0].device),
                            world / batch_size)
