"""Runs a function in N real gloo processes on this machine, for tests.

Each rank is a new process (forked from a forkserver that has imported
torch) with one torch thread inside
`alf.utils.distributed.process_group` (gloo, loopback only). Results (or
tracebacks) come back through a queue; a rank that does not finish within the
timeout fails the test instead of hanging it.
"""
import multiprocessing as mp
import pickle
import queue as queue_lib
import traceback
from typing import Any, Callable, List, NamedTuple


class RankResult(NamedTuple):
    rank: int
    ok: bool
    value: Any  # fn's return value, or (exception type name, message, tb)


def _entry(rank, world_size, init_file, fn, args, queue):
    import torch

    from alf.utils import distributed
    torch.set_num_threads(1)
    try:
        with distributed.process_group(rank, world_size, "gloo", init_file):
            value = fn(rank, *args)
        result = RankResult(rank, True, value)
    except BaseException as e:  # noqa: BLE001 - reported to the test
        result = RankResult(rank, False, (type(e).__name__, str(e),
                                          traceback.format_exc()))
    # Plain pickle bytes: torch's queue pickler would share tensors through
    # file descriptors that vanish when this process exits.
    queue.put(pickle.dumps(result))


_CONTEXT = None


def fast_context():
    """A multiprocessing context whose processes fork from a server that
    has imported torch, gymnasium and alf's process-side modules but run
    nothing: each starts as fresh as a spawned one (the server shares no
    state with pytest) without paying those imports (~3 s a process on a
    2-core machine, hundreds of times a suite)."""
    global _CONTEXT
    if _CONTEXT is None:
        _CONTEXT = mp.get_context("forkserver")
        _CONTEXT.set_forkserver_preload(
            ["torch", "gymnasium", "alf.utils.distributed",
             "alf.trainers.actor", "alf.trainers.inference_worker",
             "distributed_harness"])
    return _CONTEXT


def run_ranks(fn: Callable, *args, world_size: int = 2,
              timeout: float = 60.0) -> List[RankResult]:
    """Runs ``fn(rank, *args)`` on ``world_size`` ranks; results by rank.

    Raises:
        TimeoutError: if some rank has not finished after ``timeout`` s (all
            ranks are killed first).
    """
    from alf.utils.distributed import rendezvous_file

    ctx = fast_context()
    queue = ctx.Queue()
    with rendezvous_file() as init_file:
        procs = [ctx.Process(target=_entry, args=(r, world_size, init_file,
                                                  fn, args, queue))
                 for r in range(world_size)]
        for p in procs:
            p.start()
        results = {}
        try:
            for _ in range(world_size):
                res = pickle.loads(queue.get(timeout=timeout))
                results[res.rank] = res
        except queue_lib.Empty as e:
            raise TimeoutError(
                f"ranks {sorted(set(range(world_size)) - set(results))} did "
                f"not finish within {timeout} s") from e
        finally:
            for p in procs:
                p.join(timeout=5)
                if p.is_alive():
                    p.kill()
                    p.join()
    return [results[r] for r in range(world_size)]


def errors(results: List[RankResult], kind: str) -> List[str]:
    """The ranks' error messages, failing unless every rank raised an
    error of type ``kind`` (its class name)."""
    for r in results:
        assert not r.ok and r.value[0] == kind, r.value
    return [r.value[1] for r in results]


def values(results: List[RankResult]) -> List[Any]:
    """The return values, failing with the ranks' tracebacks on any error."""
    errors = [f"rank {r.rank}: {r.value[2]}" for r in results if not r.ok]
    assert not errors, "\n".join(errors)
    return [r.value for r in results]
