"""Standardisation over all ranks' data, in one all-reduce.

PPO standardises its advantages over the whole iteration's batch; with the
batch spread over ranks, the mean and the std must be the global ones, or
an N-process run would not be the 1-process experiment.
"""
from typing import List

import torch

from alf.utils.distributed.collectives import all_reduce_sum


def standardize(x: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """``(x - mean) / (std + eps)`` with the mean and std of all ranks' ``x``
    (see `standardize_parts`).

    Args:
        x: this rank's values.
        eps: added to the std.

    Returns:
        A new tensor shaped like ``x``.
    """
    return standardize_parts([x], eps)[0]


def standardize_parts(parts: List[torch.Tensor],
                      eps: float = 1e-8) -> List[torch.Tensor]:
    """Standardises each tensor of ``parts`` with its own mean and std over
    all ranks, all in one all-reduce.

    With equal per-rank sizes, N ranks holding pieces of each part get
    exactly what one process holding the whole parts would. On CPU a
    collective costs more than a small minibatch's compute, so PPO passes
    every minibatch of an iteration at once. The std is the population one,
    so a single element gives 0, not NaN.

    Args:
        parts: this rank's pieces, one per statistic, in the same order on
            every rank; the statistics are cast to the first one's dtype.
        eps: added to each std.

    Returns:
        One new tensor per part, shaped like it.
    """
    sums = torch.stack([
        torch.stack([p.sum(), p.square().sum(),
                     torch.tensor(float(p.numel()), device=p.device)])
        for p in parts
    ]).double()
    all_reduce_sum(sums)
    mean = sums[:, 0] / sums[:, 2]
    std = (sums[:, 1] / sums[:, 2] - mean * mean).clamp(min=0).sqrt()
    return [(p - m) / (sd + eps)
            for p, m, sd in zip(parts, mean.to(parts[0].dtype),
                                std.to(parts[0].dtype))]
