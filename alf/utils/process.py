"""Process utilities shared by the launcher, the trainer and environment
workers: parent-death signals, which signals stop a run, exit codes.

Kept free of torch imports: environment worker subprocesses import this.
"""
import contextlib
import ctypes
import signal
import sys
from multiprocessing import resource_tracker
from typing import Callable, Iterator, List, Optional

EXIT_OK, EXIT_ERROR = 0, 1

# Signals that stop a run cleanly (checkpoint first): Ctrl-C, a scheduler's
# preemption, a closed terminal.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# "Checkpoint now and go on" (habitat-lab's DD-PPO uses SIGUSR1 the same way).
CHECKPOINT_SIGNAL = signal.SIGUSR1
# The launcher's own "leave now" to its ranks, after a failure elsewhere or a
# stop that took too long; users never need to send it.
ABORT_SIGNAL = signal.SIGUSR2

EXIT_INTERRUPTED = 128 + signal.SIGINT  # 130

# What it means when every rank timed out in a collective while all of
# them were alive and answering.
MISMATCHED_COLLECTIVES = (
    "either a rank spent longer than collective_timeout.seconds between "
    "two collectives (rank 0 evaluating, a slow environment), or they "
    "waited in different collectives: one rank made a data-distributed "
    "call (or another collective) that the others did not, e.g. a number "
    "of updates or a data_distributed_when condition that differs across "
    "ranks")

# The first stop signal that training's handlers received in this process
# (0: none). Here, torch-free: the handlers that stand before and after
# training (the CLI's, a launcher rank's) read it to ignore what follows a
# stop already under way.
_stop_received = 0


def note_stop(signum: int) -> None:
    """Records that training received the stop signal ``signum`` (the
    first one is kept)."""
    global _stop_received
    _stop_received = _stop_received or int(signum)


def forget_stop() -> None:
    """A new training starts listening: what stopped an earlier one in
    this process (a library user's loop, a second call of the command
    line's main) is not its stop, nor a stop raised before it
    (`raise_stop_once`: it did not end the process)."""
    global _stop_received, _stop_raised
    _stop_received = 0
    _stop_raised = False


def stop_received() -> int:
    """The first stop signal training received in this process, or 0.

    Once it is set the run is stopping with its checkpoint: a repeat (a
    scheduler's SIGTERM beside the launcher's forward, the parent-death
    signal that the kernel sends once per thread of a dying torchrun agent)
    has nothing more to say, and must not turn the stop into a "stopped
    before training" exit or break off the release of the run's lock.
    """
    return _stop_received


# Called by `stop_saved` (a launcher's rank tells the launcher).
_stop_saved_hook: Optional[Callable[[], None]] = None


def on_stop_saved(hook: Optional[Callable[[], None]]) -> None:
    """Has `stop_saved` call ``hook`` (None: nothing)."""
    global _stop_saved_hook
    _stop_saved_hook = hook


def stop_saved() -> None:
    """Training saved the checkpoint of a stop and is closing: under alf's
    launcher the rank says so at once, so that a second Ctrl-C does not
    abort it (only ranks that have not saved are aborted)."""
    if _stop_saved_hook is not None:
        _stop_saved_hook()


# Whether `raise_stop_once` raised: this process is unwinding to exit.
_stop_raised = False


def raise_stop_once(stop: BaseException) -> None:
    """Raises ``stop`` (the KeyboardInterrupt or SystemExit of a signal
    handler before or after training) unless a stop was raised in this
    process already: it is unwinding to exit, and a repeat (the
    terminal's Ctrl-C beside the launcher's forward) landing in the
    clean-up or its one line would break them off with a traceback."""
    global _stop_raised
    if _stop_raised:
        return
    _stop_raised = True
    raise stop


def interrupt_unless_stopping(signum, frame) -> None:
    """A SIGINT handler for before and after training (the CLI's, a
    launcher rank's): Ctrl-C's KeyboardInterrupt, unless training already
    stopped on a signal (`stop_received`), or a stop was raised already
    (`raise_stop_once`): then it is a repeat (the terminal's beside the
    launcher's forward) and the run is exiting."""
    if stop_received():
        return
    raise_stop_once(KeyboardInterrupt())


def stopped_before_training(signum: int) -> str:
    """What a run stopped by ``signum`` before training says."""
    return (f"{signal_name(signum)} before training started; nothing new "
            "was saved")


def exit_code_for(signum: int) -> int:
    """The shell's convention for a run ended by ``signum`` (128 + signum)."""
    return 128 + int(signum)


def signal_name(signum: int) -> str:
    """``SIGTERM`` for 15, ``signal 99`` for a number without a name."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def describe_exit(code: Optional[int]) -> str:
    """How a process ended, from its exit code (negative: killed by a
    signal, as `multiprocessing` and `subprocess` report it)."""
    if code is not None and code < 0:
        hint = "; out of memory?" if -code == signal.SIGKILL else ""
        return (f"was killed by {signal_name(-code)} (exit {code}{hint})")
    if code is not None and code > 128 and code - 128 < signal.NSIG:
        return f"exited with code {code} ({signal_name(code - 128)})"
    return f"exited with code {code}"


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Asks the kernel to send ``sig`` to this process when its parent dies
    (Linux ``PR_SET_PDEATHSIG``; elsewhere a no-op)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(sig))
        except OSError:
            pass


def stat_fields(pid: int) -> List[str]:
    """The fields of ``/proc/PID/stat`` after the command name (state,
    parent, process group, session, ...), or [] if ``pid`` is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def state(pid: Optional[int]) -> str:
    """Process ``pid``'s state letter in ``/proc`` (``R`` running, ``S``
    sleeping, ``T`` stopped, ...), or "" if it is gone."""
    fields = stat_fields(pid) if pid else []
    return fields[0] if fields else ""


def children(pid: int) -> List[int]:
    """Direct children of ``pid`` (Linux), oldest first; [] if it is gone."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return sorted(int(x) for x in f.read().split())
    except OSError:
        return []


def rank_pids(launcher: int) -> List[int]:
    """The rank processes of `alf.bin.launch`'s launcher ``launcher``, by
    rank (spawned in rank order; its resource tracker is not one)."""
    ranks = []
    for pid in children(launcher):
        try:
            with open(f"/proc/{pid}/cmdline") as f:
                if "spawn_main" in f.read():
                    ranks.append(pid)
        except OSError:
            pass
    return ranks


def ignore_run_signals() -> None:
    """For a helper process that its owner closes (environment workers,
    actors): a signal sent to the whole process group (Ctrl-C, a scheduler's
    SIGTERM, a closed terminal's SIGHUP, SIGUSR1) is the owner's to handle;
    dying of it here would lose the owner's last iteration before its
    checkpoint."""
    for sig in STOP_SIGNALS + (CHECKPOINT_SIGNAL, ABORT_SIGNAL):
        signal.signal(sig, signal.SIG_IGN)
    release_run_signals()  # what came while it started: ignored now


# The signals `run_signals_held` holds.
_HELD = STOP_SIGNALS + (CHECKPOINT_SIGNAL, )


@contextlib.contextmanager
def run_signals_held() -> Iterator[None]:
    """Blocks the run's signals in this thread while it starts processes
    that handle them once ready (`release_run_signals`).

    A spawned child inherits the blocked mask through exec, so a Ctrl-C to
    the process group while it imports and unpickles neither ends it with
    a traceback nor is lost: it waits until the child has its handlers (a
    helper ignores it, a rank holds it). This process gets what arrived
    when the block ends (or at once, in a thread that does not block it).
    """
    # Started later (by the first spawn), the resource tracker would unblock
    # SIGINT and SIGTERM (it blocks them for its own start) and the child
    # would not inherit the block.
    quiet_resource_tracker()
    resource_tracker.ensure_running()
    with _blocked(_HELD):
        yield


def quiet_resource_tracker() -> None:
    """Keeps the resource tracker, once this process starts it, from
    warning of "leaked semaphore objects" at exit: those of a child that
    was killed (an evaluator's environment workers), which the failure's
    own one line already reports, and which the tracker removes anyway.
    It takes its warning filters from ``sys.warnoptions`` (``-W``) when
    it starts, so the alf.bin commands call this first (`cli.run`): a
    queue or lock made before any child starts it."""
    option = "ignore:resource_tracker:UserWarning"
    if option not in sys.warnoptions:
        sys.warnoptions.append(option)


@contextlib.contextmanager
def _blocked(signals) -> Iterator[None]:
    """Blocks ``signals`` in this thread; what arrives meanwhile is
    delivered when the block ends."""
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def import_torch() -> None:
    """Imports torch with the stop signals blocked in this thread; what
    arrives meanwhile is handled once it is imported.

    torch's C code imports numpy and swallows an exception raised in it:
    a stop signal whose handler raises (a CLI's before training) landing
    there was lost, and left numpy half-imported (a run stopped in its
    first second trained on, then failed on ``numpy.matrix``).
    """
    if "torch" in sys.modules:
        return
    with _blocked(STOP_SIGNALS):
        import torch  # noqa: F401


def release_run_signals() -> None:
    """Unblocks what `run_signals_held` blocked in a child's start-up; a
    signal that came meanwhile goes to the handler set now."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _HELD)


def exit_now(code: int) -> None:
    """Leaves the process with ``code`` without the interpreter's shutdown.

    torch's C++ threads can abort that shutdown ("terminate called without
    an active exception", seen after a distributed run), which would turn a
    clean exit into SIGABRT. What training left is finalised first
    (environment queues unregister their semaphores).
    """
    import gc
    import os
    gc.collect()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
