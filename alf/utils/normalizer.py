"""Running mean/variance normalisation of observations.

Statistics are buffers (state, not parameters): backward never touches them,
so under data-parallel training they must be kept equal across ranks by
reducing the same sums everywhere (`commit`), which this module does.
"""
import torch
from torch import nn

from alf.utils import distributed


class RunningNormalizer(nn.Module):
    """Normalises inputs with a running mean and variance.

    Updates are two-phase so that everything normalised during one unroll uses
    the same statistics: `accumulate` adds raw samples to pending sums, and
    `commit` merges them into the statistics (all-reduced across ranks when
    training is distributed, so every rank ends with the statistics one
    process would have computed from all ranks' samples).

    Args:
        shape: shape of one sample.
        clip: normalised values are clipped to ``[-clip, clip]``.
        eps: added to the variance before the square root.
    """

    # Per-copy accumulators: a background collector's copy accumulates its
    # own (see `RLAlgorithm.acting_state`), handed over with `take_pending`.
    local_buffers = ("pending", "pending_count")

    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor
    pending: torch.Tensor
    pending_count: torch.Tensor

    def __init__(self, shape, clip: float = 10.0, eps: float = 1e-8):
        super().__init__()
        shape = tuple(shape)
        self.clip = clip
        self.eps = eps
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        # pending = [sum, sum of squares] of samples not yet committed.
        self.register_buffer("pending",
                             torch.zeros((2, ) + shape, dtype=torch.float64))
        self.register_buffer("pending_count",
                             torch.zeros((), dtype=torch.float64))
        self._unsummed: list = []
        self._refresh()

    def _refresh(self):
        # float32 copies for the hot path (normalize is called every step).
        self._mean32 = self.mean.float()
        self._inv_std32 = (self.var + self.eps).rsqrt().float()

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """Returns ``clip((x - mean) / std)`` for a batch ``x`` of [B, *shape]."""
        return ((x - self._mean32) * self._inv_std32).clamp_(-self.clip,
                                                             self.clip)

    #: Batches gathered before `accumulate` sums them into ``pending``.
    FOLD_BATCHES = 256

    def accumulate(self, x: torch.Tensor) -> None:
        """Adds the samples of a batch ``x`` of [B, *shape] to pending sums.

        An actor calls this every step with one observation; summing it
        there and then (seven tensor operations) cost a fifth of the
        policy's forward pass. The rows are kept (a copy: the caller may
        reuse its tensor) and summed together, in one pass, once
        `FOLD_BATCHES` have gathered or when the sums are read.
        """
        gathered = self._unsummed
        gathered.append(x.detach().clone())
        if len(gathered) >= self.FOLD_BATCHES:
            self._fold()

    def _fold(self) -> None:
        if not self._unsummed:
            return
        x = torch.cat(self._unsummed).double()
        self._unsummed.clear()
        self.pending[0] += x.sum(0)
        self.pending[1] += (x * x).sum(0)
        self.pending_count += x.shape[0]

    def take_pending(self) -> torch.Tensor:
        """The pending sums and count as one tensor, reset to zero here."""
        self._fold()
        flat = torch.cat([self.pending.flatten(), self.pending_count[None]])
        self.pending.zero_()
        self.pending_count.zero_()
        return flat

    def add_pending(self, flat: torch.Tensor) -> None:
        """Adds what another copy's `take_pending` returned."""
        self._fold()
        self.pending += flat[:-1].view_as(self.pending).to(self.pending)
        self.pending_count += flat[-1].to(self.pending_count)

    def commit(self) -> None:
        """Merges the pending sums (of all ranks) into the statistics."""
        self._fold()
        flat = torch.cat([self.pending.flatten(), self.pending_count[None]])
        distributed.all_reduce_sum(flat)
        n_b = flat[-1]
        if n_b > 0:
            s, ss = flat[:-1].view_as(self.pending)
            mean_b = s / n_b
            var_b = (ss / n_b - mean_b * mean_b).clamp_(min=0)
            n = self.count
            total = n + n_b
            delta = mean_b - self.mean
            m2 = self.var * n + var_b * n_b + delta * delta * n * n_b / total
            self.mean += delta * n_b / total
            self.var.copy_(m2 / total)
            self.count.copy_(total)
        self.pending.zero_()
        self.pending_count.zero_()
        self._refresh()

    def _save_to_state_dict(self, *args, **kwargs):
        self._fold()  # a checkpoint keeps every sample counted so far
        super()._save_to_state_dict(*args, **kwargs)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        if prefix + "pending" in state_dict:
            # The loaded sums replace this copy's (acting states, which
            # leave them out, keep them).
            self._unsummed.clear()
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        self._refresh()
