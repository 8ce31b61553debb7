"""Small collectives that are no-ops in a single process.

Code above this package calls them unconditionally: in one process they
return their input, so a 1-process and an N-process run share one code
path (the distributed contract's rule 7).
"""
import torch
import torch.distributed as dist

from alf.utils.distributed.group import is_distributed


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sums ``tensor`` in place across ranks; a no-op in a single process.

    Args:
        tensor: the same shape and dtype on every rank.

    Returns:
        ``tensor`` itself, now holding the sum.
    """
    if is_distributed():
        dist.all_reduce(tensor)
    return tensor


def all_reduce_max(tensor: torch.Tensor) -> torch.Tensor:
    """Elementwise maximum of ``tensor`` across ranks, in place; a no-op in
    a single process.

    Args:
        tensor: the same shape and dtype on every rank.

    Returns:
        ``tensor`` itself, now holding the maximum.
    """
    if is_distributed():
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return tensor


def any_rank(flag: bool) -> bool:
    """Whether ``flag`` holds on any rank: one collective decision (every
    rank must call it); ``flag`` itself in a single process."""
    return bool(all_reduce_max(torch.tensor([float(flag)]))[0])


def all_reduce_mean(tensor: torch.Tensor) -> torch.Tensor:
    """Averages ``tensor`` in place across ranks; a no-op in one process.

    Args:
        tensor: the same shape and a floating dtype on every rank.

    Returns:
        ``tensor`` itself, now holding the mean.
    """
    if is_distributed():
        dist.all_reduce(tensor)
        tensor /= dist.get_world_size()
    return tensor


def broadcast_object(obj, src: int = 0):
    """Returns rank ``src``'s ``obj`` on every rank (pickled; trusted data).

    Args:
        obj: any picklable object; only rank ``src``'s is used.
        src: the rank that sends.

    Returns:
        Rank ``src``'s ``obj`` (``obj`` itself in a single process).
    """
    if not is_distributed():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]
