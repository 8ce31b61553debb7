"""Process-group helpers (the only module that knows about process groups)."""
import torch
import torch.distributed as dist


def is_distributed() -> bool:
    """Whether a default process group of more than one process is active."""
    return (dist.is_available() and dist.is_initialized()
            and dist.get_world_size() > 1)


def get_rank() -> int:
    """This process's rank (0 outside distributed training)."""
    return dist.get_rank() if is_distributed() else 0


def get_world_size() -> int:
    """Number of processes training together (1 outside distributed)."""
    return dist.get_world_size() if is_distributed() else 1


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sums ``tensor`` in place across ranks; a no-op in a single process."""
    if is_distributed():
        dist.all_reduce(tensor)
    return tensor


def all_reduce_mean(tensor: torch.Tensor) -> torch.Tensor:
    """Averages ``tensor`` in place across ranks; a no-op in one process."""
    if is_distributed():
        dist.all_reduce(tensor)
        tensor /= dist.get_world_size()
    return tensor


def standardize(x: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """``(x - mean) / (std + eps)`` with the mean and std of all ranks' ``x``.

    With equal per-rank sizes, N ranks holding parts of a batch get exactly
    what one process holding the whole batch would (one all-reduce of three
    scalars).
    """
    if not is_distributed():
        return (x - x.mean()) / (x.std() + eps)
    sums = torch.stack([x.sum(), x.square().sum(),
                        torch.tensor(float(x.numel()))]).double()
    dist.all_reduce(sums)
    n = sums[2]
    mean = sums[0] / n
    var = (sums[1] - n * mean * mean) / (n - 1)
    return (x - mean.to(x.dtype)) / (var.clamp(min=0).sqrt().to(x.dtype) + eps)
