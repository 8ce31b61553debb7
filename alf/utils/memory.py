"""Available memory, and a check made before a large allocation.

Allocating more than the machine has does not fail cleanly: ``torch.zeros``
of a few times the RAM is refused with an allocator traceback, but an
amount the kernel lets through is then zero-filled page by page until the
OOM killer ends the process without a word. So sizes that come from the
config (a replay buffer's capacity) are checked against what is available
first.
"""
from typing import Callable, Optional, Union

import torch

from alf.utils.errors import ConfigError

__all__ = ["available_bytes", "check_allocation", "format_bytes"]

# cgroup limits (v2, v1) and current use: in a container /proc/meminfo shows
# the host's memory, the container may be allowed much less.
_CGROUP_FILES = (("/sys/fs/cgroup/memory.max",
                  "/sys/fs/cgroup/memory.current"),
                 ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                  "/sys/fs/cgroup/memory/memory.usage_in_bytes"))


def _read_int(path: str) -> Optional[int]:
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):  # absent, or "max"
        return None


def _meminfo_available() -> Optional[int]:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def available_bytes(device="cpu") -> Optional[int]:
    """Bytes that can still be allocated on ``device``, or None if unknown.

    The CPU's is the kernel's MemAvailable, lowered to the room left under
    this process's cgroup limit if it has one; a GPU's is the free memory
    CUDA reports, once this process uses CUDA (asking would create a CUDA
    context in a process that may never use the GPU, such as an actor of
    asynchronous collection, which builds the algorithm too).
    """
    device = torch.device(device)
    if device.type == "cuda":
        if not torch.cuda.is_initialized():
            return None
        return torch.cuda.mem_get_info(device)[0]
    if device.type != "cpu":
        return None
    found = [_meminfo_available()]
    for limit_file, usage_file in _CGROUP_FILES:
        limit, usage = _read_int(limit_file), _read_int(usage_file)
        if limit is not None and usage is not None and limit < 1 << 60:
            found.append(max(limit - usage, 0))
    known = [b for b in found if b is not None]
    return min(known) if known else None


def format_bytes(n: int) -> str:
    """``n`` in bytes and in GB, e.g. ``84000000000 bytes (84.0 GB)``."""
    return f"{n} bytes ({n / 1e9:.1f} GB)"


def check_allocation(nbytes: int, device, what: str,
                     fix: Union[str, Callable[[int], str]],
                     copies: int = 1) -> None:
    """Refuses an allocation of ``copies x nbytes`` that does not fit.

    Args:
        nbytes: the size of one allocation.
        device: where it would be made.
        what: what it is for, starting the message (names the config value).
        fix: how to make it fit, ending the message; or a function of the
            bytes available to one process that returns it.
        copies: how many processes on this machine allocate as much.

    Raises:
        ConfigError: one line with the bytes needed and available.
    """
    available = available_bytes(device)
    needed = nbytes * copies
    if available is None or needed <= available:
        return
    each = (f" ({copies} processes on this machine, {format_bytes(nbytes)} "
            "each)" if copies > 1 else "")
    if callable(fix):
        fix = fix(available // copies)
    raise ConfigError(f"{what} needs {format_bytes(needed)}{each} but "
                      f"{format_bytes(available)} are available on "
                      f"{torch.device(device)}; {fix}")
