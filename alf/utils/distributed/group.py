"""The default process group: forming and tearing it down, and what this
process is in it (rank, world size, device).

Single-machine runs rendezvous through a file (`rendezvous_file`); under
torchrun the group joins torchrun's store, and a heartbeat names a rank that
stalls (`silent_ranks`). Every collective waits at most `collective_timeout`,
so that a hang becomes an error.
"""
import contextlib
import datetime
import os
import shutil
import tempfile
from typing import Iterator, List, Optional, Tuple

import gin
import torch
import torch.distributed as dist

from alf.utils.distributed.heartbeat import Heartbeat


# Registered under the package's name, the path users import it from.
@gin.configurable(module="alf.utils.distributed")
def collective_timeout(seconds: float = 300.0) -> datetime.timedelta:
    """How long any collective may wait before it raises instead of hanging.

    Rank 0's evaluation runs while the other ranks wait in their next
    collective, so this must exceed the longest evaluation.

    Args:
        seconds: the timeout (gin: ``collective_timeout.seconds``).

    Returns:
        The timeout as a ``timedelta``, as torch's process groups take it.
    """
    return datetime.timedelta(seconds=seconds)


@contextlib.contextmanager
def process_group(rank: int, world_size: int, backend: str = "gloo",
                  init_file: Optional[str] = None,
                  use_env: bool = False) -> Iterator[None]:
    """Sets up the default process group for this process; tears it down.

    The analogue of DI-engine's DDPContext. Single-machine runs rendezvous
    through a file (``init_file``), so no port listens on any network
    interface; gloo's own connections are pinned to the loopback interface.
    Under ``torchrun`` (``use_env``), the group joins torchrun's rendezvous
    (``MASTER_ADDR``/``MASTER_PORT``), which is the multi-node path.

    Args:
        rank: this process's rank.
        world_size: number of processes.
        backend: ``gloo`` (CPU) or ``nccl`` (GPU).
        init_file: a path every rank can see (single machine).
        use_env: take the rendezvous from torchrun's environment variables.

    Yields:
        None, with the group formed; it is destroyed on exit.

    Raises:
        ValueError: for a backend other than ``gloo`` or ``nccl``.
    """
    global _LOCAL_RANK
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend {backend!r}: expected 'gloo' or 'nccl'")
    if not use_env:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    _LOCAL_RANK = int(os.environ.get("LOCAL_RANK", rank)) if use_env else rank
    if backend == "nccl":
        # Before the group exists, so that NCCL binds this rank's GPU.
        torch.cuda.set_device(_LOCAL_RANK)
        # CPU tensors (stop flags, episode counters, pickled objects such as
        # the checkpoint rank 0 sends) go through gloo, GPU tensors (the
        # gradients) through NCCL.
        backend = "cpu:gloo,cuda:nccl"
    kwargs = dict(backend=backend, rank=rank, world_size=world_size,
                  timeout=collective_timeout())
    global _HEARTBEAT, _STORE
    if use_env:
        kwargs["store"] = _torchrun_store(rank, world_size)
    else:
        assert init_file is not None, "init_file is needed without use_env"
        kwargs["store"] = dist.FileStore(init_file, world_size)
    dist.init_process_group(**kwargs)
    # The group's own keys live under its prefix; alf's under "alf/".
    _STORE = dist.PrefixStore("alf/", kwargs["store"])
    if use_env and world_size > 1:
        # The built-in launcher sees its ranks' states itself.
        _HEARTBEAT = Heartbeat(
            lambda: _torchrun_store(rank, world_size, client=True), rank,
            world_size)
    try:
        yield
    finally:
        if _HEARTBEAT is not None:
            _HEARTBEAT.stop()
        dist.destroy_process_group()
        _LOCAL_RANK = _HEARTBEAT = _STORE = None


_LOCAL_RANK: Optional[int] = None
_HEARTBEAT: Optional[Heartbeat] = None
_STORE: Optional[dist.Store] = None


def store() -> Optional[dist.Store]:
    """The key-value store of the group `process_group` formed (keys
    prefixed ``alf/``), for coordination that must not wait in a collective
    (e.g. straggler preemption); None outside such a group."""
    return _STORE


def silent_ranks() -> Optional[Tuple[List[int], float]]:
    """Under torchrun: (the other ranks that showed no sign of life, the
    seconds watched), after watching that long; None where no heartbeat
    runs."""
    if _HEARTBEAT is None:
        return None
    return _HEARTBEAT.silent_ranks(), _HEARTBEAT.window


def _torchrun_store(rank: int, world_size: int,
                    client: bool = False) -> dist.Store:
    """The rendezvous store of a process started by torchrun, with keys of
    this restart round only.

    torchrun's agent keeps one store across ``--max-restarts`` rounds; torch's
    ``env://`` reuses its keys, so a restarted group read the old round's
    addresses (gloo: "Connection refused", or a hang in init). A prefix per
    run and round gives every round a clean key space.
    """
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
        world_size, is_master=rank == 0 and not agent_store and not client,
        timeout=collective_timeout(), wait_for_workers=False)
    round_ = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    run = os.environ.get("TORCHELASTIC_RUN_ID", "none")
    return dist.PrefixStore(f"alf/{run}/round{round_}/", store)


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


def uses_gpus() -> bool:
    """Whether the active process group reduces GPU tensors (NCCL)."""
    return (dist.is_available() and dist.is_initialized()
            and "nccl" in dist.get_backend_config())


def local_device() -> torch.device:
    """This rank's GPU in a NCCL group (``cuda:LOCAL_RANK``), else the CPU."""
    if uses_gpus():
        return torch.device("cuda", _LOCAL_RANK or 0)
    if _LOCAL_RANK is None and torch.cuda.is_available():
        return torch.device("cuda")  # outside any group: the current GPU
    return torch.device("cpu")


@contextlib.contextmanager
def rendezvous_file() -> Iterator[str]:
    """A fresh path for `process_group`'s ``init_file``; removed afterwards."""
    folder = tempfile.mkdtemp(prefix="alf-rendezvous-")
    try:
        yield os.path.join(folder, "store")
    finally:
        remove_rendezvous(os.path.join(folder, "store"))


def remove_rendezvous(init_file: str) -> None:
    """Removes the folder of a `rendezvous_file` path (if still there)."""
    folder = os.path.dirname(init_file)
    if os.path.basename(folder).startswith("alf-rendezvous-"):
        shutil.rmtree(folder, ignore_errors=True)

