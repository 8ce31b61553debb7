"""Running a training function in N processes and supervising them.

Used by ``alf.bin.train --distributed multi-process`` and by the comparison
tool. The launcher owns the exits (contract rule 10):

* Ctrl-C: each rank is asked (SIGINT) to stop after its iteration; rank 0
  saves a checkpoint; the launcher escalates to SIGTERM then SIGKILL for a
  rank still alive after ``stop_grace`` seconds, and exits with 130.
* A crashing rank: its traceback is shown once, the others are stopped within
  ``crash_grace`` seconds, and the exit code is non-zero.
* The launcher dying: each rank gets SIGTERM from the kernel (Linux
  ``PR_SET_PDEATHSIG``), so no rank outlives it.
"""
import ctypes
import gc
import multiprocessing as mp
import os
import signal
import sys
import time
import traceback
from typing import Callable, List, Sequence

from alf.utils.errors import AlfError, one_line

EXIT_OK, EXIT_ERROR, EXIT_INTERRUPTED = 0, 1, 130


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Asks the kernel to send ``sig`` to this process when its parent dies
    (Linux ``PR_SET_PDEATHSIG``; elsewhere a no-op)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(sig))
        except OSError:
            pass


def _exit_on_sigterm(signum, frame):
    # Unwind normally so that `finally` blocks close environment
    # subprocesses (and reap them) before this rank exits.
    raise SystemExit(128 + signum)


def _rank_main(rank: int, world_size: int, init_file: str, backend: str,
               fn: Callable, args: tuple, report) -> None:
    """Entry point of one rank process: set up the group, run ``fn``."""
    die_with_parent()
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    from absl import logging

    from alf.trainers import TrainingInterrupted
    from alf.utils import distributed

    logging.use_absl_handler()
    logging.set_verbosity(logging.INFO if rank == 0 else logging.WARNING)
    code = EXIT_OK
    try:
        with distributed.process_group(rank, world_size, backend,
                                       init_file):
            fn(*args)
    except TrainingInterrupted as e:
        if rank == 0:
            logging.warning("%s", e)
        code = EXIT_INTERRUPTED
    except KeyboardInterrupt:  # Ctrl-C before training started: no state
        code = EXIT_INTERRUPTED
    except AlfError as e:
        report.send((time.time(), rank, "error", one_line(e)))
        code = EXIT_ERROR
    except SystemExit as e:  # SIGTERM from the launcher: it knows why
        code = e.code if isinstance(e.code, int) else EXIT_ERROR
    except BaseException:  # noqa: BLE001 - reported to the launcher
        report.send((time.time(), rank, "crash", traceback.format_exc()))
        code = EXIT_ERROR
    report.close()
    # Finalise what training left (environment queues unregister their
    # semaphores), then leave without the interpreter's shutdown: torch's
    # C++ threads can abort it ("terminate called without an active
    # exception", seen once in ~100 runs), which would turn a clean exit
    # into SIGABRT.
    gc.collect()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _signal_all(procs, sig) -> None:
    for p in procs:
        if p.is_alive():
            try:
                os.kill(p.pid, sig)
            except ProcessLookupError:
                pass


def _wait_all(procs, seconds: float) -> bool:
    deadline = time.time() + seconds
    while time.time() < deadline:
        if not any(p.is_alive() for p in procs):
            return True
        time.sleep(0.05)
    return not any(p.is_alive() for p in procs)


def _stop(procs, grace: float) -> None:
    """Waits ``grace`` s, then SIGTERM, then SIGKILL whatever is still alive."""
    if _wait_all(procs, grace):
        return
    _signal_all(procs, signal.SIGTERM)
    if not _wait_all(procs, 3.0):
        _signal_all(procs, signal.SIGKILL)
        _wait_all(procs, 3.0)


def _stop_resource_tracker() -> None:
    """Stops and reaps multiprocessing's resource tracker, which spawning
    started; left alone it would outlive the launcher as an orphan."""
    from multiprocessing import resource_tracker
    stop = getattr(resource_tracker._resource_tracker, "_stop", None)
    if stop is not None:
        try:
            stop()
        except (OSError, ChildProcessError):
            pass


def launch(fn: Callable, args: Sequence, num_processes: int,
           prog: str = "alf", stop_grace: float = 8.0,
           crash_grace: float = 5.0, backend: str = "gloo") -> int:
    """Runs ``fn(*args)`` in ``num_processes`` ranks on this machine.

    Args:
        fn: a picklable top-level function; it runs inside the process group.
        args: its arguments (picklable).
        num_processes: world size.
        backend: ``gloo`` (CPU ranks) or ``nccl`` (rank r on GPU r).
        prog: name used to prefix the launcher's own messages.
        stop_grace: seconds the ranks get to stop after Ctrl-C.
        crash_grace: seconds the other ranks get after one rank failed.

    Returns:
        The exit code: 0, 1 (error or crash) or 130 (interrupted).
    """
    from alf.utils.distributed import rendezvous_file

    ctx = mp.get_context("spawn")
    # One pipe per rank for its failure report: unlike a queue, a pipe needs
    # no semaphore for the resource tracker to clean up.
    pipes = [ctx.Pipe(duplex=False) for _ in range(num_processes)]
    with rendezvous_file() as init_file:
        procs: List[mp.Process] = [
            ctx.Process(target=_rank_main, name=f"alf-rank{r}",
                        args=(r, num_processes, init_file, backend, fn, tuple(args),
                              pipes[r][1])) for r in range(num_processes)
        ]
        for p in procs:
            p.start()
        for _, writer in pipes:
            writer.close()
        interrupted = False
        try:
            while any(p.is_alive() for p in procs):
                if any(p.exitcode not in (None, EXIT_OK, EXIT_INTERRUPTED)
                       for p in procs):
                    _stop(procs, crash_grace)
                    break
                time.sleep(0.05)
        except KeyboardInterrupt:
            interrupted = True
            # Ignore further Ctrl-C: stopping is already under way.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            _signal_all(procs, signal.SIGINT)
            _stop(procs, stop_grace)
    codes = [p.exitcode for p in procs]
    messages = []
    for reader, _ in pipes:
        if reader.poll():
            try:
                messages.append(reader.recv())
            except EOFError:
                pass
        reader.close()
    _stop_resource_tracker()
    if messages:
        _, rank, kind, text = min(messages)  # the first failure is the cause
        if kind == "error":
            print(f"{prog}: error: {text}", file=sys.stderr)
        else:
            print(f"{prog}: rank {rank} failed:\n{text.rstrip()}",
                  file=sys.stderr)
        return EXIT_ERROR
    if interrupted or EXIT_INTERRUPTED in codes:
        return EXIT_INTERRUPTED
    if any(c != EXIT_OK for c in codes):
        print(f"{prog}: error: rank exit codes {codes}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK
