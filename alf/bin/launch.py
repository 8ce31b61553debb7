"""Running a training function in N processes and supervising them.

Used by ``alf.bin.train --distributed multi-process|multi-gpu`` and by the
comparison tool. The launcher owns the exits (the design's clean-exit and
dead-rank rules: docs/distributed.md, "Exits, preemption and failures"):

* Ctrl-C, SIGTERM, SIGHUP (to the launcher or to the whole process group):
  every rank is asked to stop after its iteration; rank 0 saves a
  checkpoint. A rank still alive after ``stop_grace`` seconds, or when a
  second Ctrl-C comes, is aborted, then killed, and the launcher says
  so in one line (that stop saved no checkpoint, unless rank 0 said it
  had saved one before it was aborted). The exit code is 128 +
  the signal (130, 143, 129).
* SIGUSR1: forwarded; rank 0 saves a checkpoint and training goes on.
* A failing rank: the cause is reported once, naming the rank and how it
  failed (its traceback, "was killed by SIGKILL", "stopped answering");
  the other ranks' secondary connection errors are not shown as the cause.
  With ``max_restarts`` left, every rank is started again and resumes from
  the last checkpoint.
* The launcher dying: each rank gets SIGTERM from the kernel (Linux
  ``PR_SET_PDEATHSIG``), so it checkpoints and no rank outlives it.

The rendezvous folder is removed on every kind of exit; ranks remove it
themselves when the launcher was killed.
"""
import multiprocessing as mp
import os
import signal
import sys
import time
import traceback
from multiprocessing.process import BaseProcess
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

from alf.utils import process
from alf.utils.errors import AlfError, one_line
from alf.utils.process import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK

def _abort(signum, frame):
    # Unwind normally so that `finally` blocks close environment
    # subprocesses (and reap them) before this rank exits.
    raise SystemExit(EXIT_ERROR)


def _on_stop_signal(signum, frame):
    # Only before training has installed its own handler (or after it
    # restored this one): there is nothing to checkpoint yet, unless
    # training already stopped on an earlier signal and is exiting.
    if process.stop_received():
        return
    process.raise_stop_once(SystemExit(process.exit_code_for(signum)))


# Stop signals a rank got before its group formed (`_rank_main`).
_held: List[int] = []


def _hold(signum, frame):
    _held.append(signum)


def _stop_if_held() -> None:
    """Once the group is formed: every rank stops if any got a stop signal
    while starting (one decision for all: a rank that left alone would
    leave its peers waiting for it in their first collective)."""
    import torch

    from alf.utils.distributed import all_reduce_max
    held = int(_held[0]) if _held else 0
    signum = int(all_reduce_max(torch.tensor([held]))[0])
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _on_stop_signal)
    signal.signal(signal.SIGINT, process.interrupt_unless_stopping)
    if signum:
        # Once: a signal landing as this unwinds (the launcher forwards
        # the terminal's) is a repeat.
        process.raise_stop_once(SystemExit(process.exit_code_for(signum)))


def _tell(report, message: tuple) -> None:
    """Sends the launcher a report; nothing if it is gone (killed: the
    rank is stopping on the parent-death signal, and must still clean up
    for it)."""
    try:
        report.send(message)
    except OSError:
        pass


def _said_stopped_early(rank: int, signum: int) -> None:
    """Rank 0 says that a stop came before training: no checkpoint."""
    if rank == 0:
        from absl import logging
        logging.warning("%s", process.stopped_before_training(signum))


def _rank_main(rank: int, world_size: int, init_file: str, backend: str,
               fn: Callable, args: tuple, setup: Optional[Tuple], report
               ) -> None:
    """Entry point of one rank process: set up, form the group, run ``fn``.

    It starts with the stop signals blocked (`process.run_signals_held`)
    and holds them until the group is formed: a rank ended by a Ctrl-C
    during start-up would leave a peer that is joining the group waiting
    for it (gloo's rendezvous cannot be interrupted).
    """
    process.die_with_parent(signal.SIGTERM)
    launcher = os.getppid()
    signal.signal(process.ABORT_SIGNAL, _abort)
    for sig in process.STOP_SIGNALS:
        signal.signal(sig, _hold)
    signal.signal(process.CHECKPOINT_SIGNAL, signal.SIG_IGN)  # nothing yet
    process.release_run_signals()  # what came meanwhile goes to _hold
    from absl import flags, logging

    from alf.utils.errors import TrainingInterrupted

    # A spawned rank parses no command line; absl would say so ("Logging
    # before flag parsing goes to stderr") on its first log line.
    flags.FLAGS.mark_as_parsed()
    logging.use_absl_handler()
    logging.set_verbosity(logging.INFO if rank == 0 else logging.WARNING)
    code = EXIT_OK
    try:
        # Inside: torch takes seconds to import, and a Ctrl-C meanwhile is
        # a stop before training, not a traceback.
        from alf.utils import distributed
        # Before the group: it reads settings (the collective timeout) that
        # the setup (parsing the config) provides.
        if setup is not None:
            setup[0](*setup[1])
        with distributed.process_group(rank, world_size, backend, init_file):
            _stop_if_held()
            # The stop's checkpoint is saved: a second Ctrl-C to the
            # launcher need not abort this rank, which is exiting.
            process.on_stop_saved(
                lambda: _tell(report, (time.time(), rank, "saved", "")))
            fn(*args)
    except TrainingInterrupted as e:
        if rank == 0 and not e.said:
            logging.warning("%s", e)
        code = e.exit_code
    except KeyboardInterrupt:  # Ctrl-C before training started: no state
        code = EXIT_INTERRUPTED
        _said_stopped_early(rank, signal.SIGINT)
    except AlfError as e:
        # A process that died (retryable) is a failure, not the input's.
        _tell(report, (time.time(), rank,
                       "failure" if e.retryable else "error", one_line(e)))
        code = EXIT_ERROR
    except SystemExit as e:  # a signal before training, or the launcher's
        code = e.code if isinstance(e.code, int) else EXIT_ERROR
        if code > 128:
            _said_stopped_early(rank, code - 128)
    except BaseException as e:  # noqa: BLE001 - reported to the launcher
        from alf.utils import distributed  # (if importing it failed: again)
        secondary = distributed.is_peer_failure(e)
        kind = "secondary" if secondary else "crash"
        text = (distributed.peer_failure_reason(e) if secondary else
                traceback.format_exc())
        _tell(report, (time.time(), rank, kind, text))
        code = EXIT_ERROR
    # A stop signal still on its way (the terminal's and the launcher's)
    # must not break off the clean-up; one landing while the handlers are
    # being set (a Ctrl-C during start-up) has no more to say.
    try:
        process.ignore_run_signals()
    except (KeyboardInterrupt, SystemExit):
        process.ignore_run_signals()
    report.close()
    if os.getppid() != launcher:  # the launcher was killed: clean up for it
        from alf.utils.distributed import remove_rendezvous
        remove_rendezvous(init_file)
    process.exit_now(code)


def _signal_all(procs, sig) -> None:
    for p in procs:
        if p.is_alive():
            try:
                os.kill(p.pid, sig)
            except ProcessLookupError:
                pass


def _wait_all(procs, seconds: float,
              got: Optional[List[int]] = None) -> bool:
    """Waits up to ``seconds`` for every process to end (less if ``got``
    receives a Ctrl-C); returns whether they all did."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        if not any(p.is_alive() for p in procs):
            return True
        if got and signal.SIGINT in got:
            break  # a second Ctrl-C: stop now
        time.sleep(0.05)
    return not any(p.is_alive() for p in procs)


def _stop(procs, grace: float, got: Optional[List[int]] = None,
          saved: Callable[[], Set[int]] = set) -> List[int]:
    """Waits ``grace`` s (or until ``got`` receives a Ctrl-C), then aborts
    the ranks that have not said they ``saved`` the stop's checkpoint,
    then kills whatever is still alive; returns the ranks it aborted.

    Only a Ctrl-C means "now": a repeated SIGTERM or SIGHUP is what a
    wrapper that forwards signals (``timeout``, ``srun``) sends beside a
    scheduler's group-wide one, and it must not cost the stop's checkpoint.
    """
    if _wait_all(procs, grace, got):
        return []
    done = saved()
    aborted = [r for r, p in enumerate(procs)
               if p.is_alive() and r not in done]
    _signal_all([procs[r] for r in aborted], process.ABORT_SIGNAL)
    if not _wait_all(procs, 3.0):
        _signal_all(procs, signal.SIGKILL)
        _wait_all(procs, 3.0)
    return aborted


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


class _Round:
    """One start of all ranks: what happened to them, and why it ended."""

    def __init__(self, procs: Sequence[BaseProcess], readers: Sequence = ()):
        self.procs = procs
        self._readers = readers  # the ranks' report pipes
        self.signal: Optional[int] = None  # a stop signal the launcher got
        # Ranks that ended on their own with a failure: rank -> (t, code).
        self.deaths: Dict[int, Tuple[float, int]] = {}
        # At the first failure: the ranks still alive, and which of those
        # were stopped (SIGSTOP).
        self.alive_at_failure: List[int] = []
        self.stopped: List[int] = []
        self.messages: List[tuple] = []  # the ranks' reports
        # Ranks aborted during a stop, and why ("" when none was).
        self.aborted: List[int] = []
        self.aborted_why = ""

    def read_reports(self) -> None:
        """Moves the reports the ranks have sent so far into
        ``messages``."""
        for reader in self._readers:
            while not reader.closed and reader.poll():
                try:
                    self.messages.append(reader.recv())
                except EOFError:
                    break

    def saved(self) -> Set[int]:
        """The ranks that said they saved the stop's checkpoint."""
        self.read_reports()
        return {m[1] for m in self.messages if m[2] == "saved"}

    def watch(self) -> None:
        """Records ranks that end on their own with a failure."""
        for rank, p in enumerate(self.procs):
            if (rank not in self.deaths and p.exitcode is not None
                    and p.exitcode != EXIT_OK
                    and p.exitcode < 128):  # not a clean stop on a signal
                if not self.deaths:
                    self.alive_at_failure = [
                        r for r, q in enumerate(self.procs) if q.is_alive()]
                    self.stopped = [
                        r for r in self.alive_at_failure
                        if (pid := self.procs[r].pid) is not None
                        and process.state(pid) == "T"]
                self.deaths[rank] = (time.time(), p.exitcode)

    def cause(self, timeout_hint: str) -> Optional[Tuple[str, bool]]:
        """(one report of the failure, whether restarting may help), or
        None when no rank failed."""
        reported = {m[1] for m in self.messages if m[2] != "saved"}
        primary = [(t, r, k, text) for t, r, k, text in self.messages
                   if k in ("error", "failure", "crash")]
        for rank, (t, code) in self.deaths.items():
            if rank not in reported:  # died without a word: killed, exit()
                primary.append((t, rank, "death", code))
        if primary:
            _, rank, kind, text = min(primary)
            if kind in ("error", "failure"):
                return f"error: {text}", kind == "failure"
            if kind == "crash":
                return f"rank {rank} failed:\n{text.rstrip()}", True
            said = f"rank {rank} {process.describe_exit(text)}"
            if text == -signal.SIGABRT:
                # DDP's own checks cannot see it: the sizes differ only
                # across ranks, and gloo aborts the process.
                said += (": a C++ abort, its reason printed above; where "
                         "it is gloo's \"Received data size doesn't match "
                         "expected size\", the ranks' all-reduces differed "
                         "in size: they used different parameters, or made "
                         "different calls, in a data-distributed method "
                         "(docs/distributed.md, 'Your own algorithm')")
            return said, True
        secondary = [m for m in self.messages if m[2] == "secondary"]
        if not secondary or self.signal is not None:
            # Under a stop the lost peers are its consequence: a rank
            # stopped before training had a checkpoint to save leaves the
            # others inside a collective.
            return None
        silent = [r for r in self.alive_at_failure if r not in reported]
        if silent:
            names = ", ".join(f"rank {r}" for r in silent)
            how = (" (its process was stopped, SIGSTOP)"
                   if set(silent) & set(self.stopped) else "")
            return (f"{names} stopped answering{how}: the other ranks' "
                    f"collectives timed out after {timeout_hint} "
                    "(collective_timeout.seconds)"), True
        _, rank, _, text = min(secondary)
        if {m[1] for m in secondary} >= set(range(len(self.procs))):
            return (f"every rank lost its peers ({text}) while all were "
                    f"alive: {process.MISMATCHED_COLLECTIVES} (the "
                    f"timeout is {timeout_hint})"), True
        return f"rank {rank} lost its peers: {text}", True


def _run_round(fn, args, setup, num_processes, backend, stop_grace,
               crash_grace) -> _Round:
    from alf.utils.distributed import rendezvous_file

    ctx = mp.get_context("spawn")
    # One pipe per rank for its failure report: unlike a queue, a pipe needs
    # no semaphore for the resource tracker to clean up.
    pipes = [ctx.Pipe(duplex=False) for _ in range(num_processes)]
    with rendezvous_file() as init_file:
        procs = [
            ctx.Process(target=_rank_main, name=f"alf-rank{r}",
                        args=(r, num_processes, init_file, backend, fn,
                              tuple(args), setup, pipes[r][1]))
            for r in range(num_processes)
        ]
        rnd = _Round(procs, [reader for reader, _ in pipes])
        got = []

        def on_signal(signum, frame):
            got.append(signum)
            if signum in process.STOP_SIGNALS:
                # What handles signals once this round is over (the CLI's)
                # then ignores a repeat of the stop under way.
                process.note_stop(signum)

        handled = process.STOP_SIGNALS + (process.CHECKPOINT_SIGNAL, )
        previous = {s: signal.signal(s, on_signal) for s in handled}
        try:
            with process.run_signals_held():  # the ranks hold them later
                for p in procs:
                    p.start()
            for _, writer in pipes:
                writer.close()
            _supervise(rnd, got, stop_grace, crash_grace)
        finally:
            _signal_all(procs, signal.SIGKILL)  # only if supervising failed
            for s, h in previous.items():
                signal.signal(s, h)
    rnd.read_reports()
    for reader, _ in pipes:
        reader.close()
    return rnd


def _supervise(rnd: _Round, got: List[int], stop_grace: float,
               crash_grace: float) -> None:
    procs = rnd.procs
    while any(p.is_alive() for p in procs):
        while got:
            sig = got.pop(0)
            if sig == process.CHECKPOINT_SIGNAL:
                _signal_all(procs, sig)
                continue
            if rnd.signal is None:
                rnd.signal = sig
                # Ranks ignore repeats of a stop they already have.
                _signal_all(procs, sig)
                rnd.aborted = _stop(procs, stop_grace, got, rnd.saved)
                if rnd.aborted:
                    rnd.aborted_why = (
                        "a second SIGINT" if signal.SIGINT in got
                        else f"{stop_grace:g} s (--stop_grace)")
                return
        rnd.watch()
        if rnd.deaths:
            # The others usually fail on their own at once (their peer is
            # gone); aborting them mid-way could break off their closing of
            # environment workers.
            _stop(procs, crash_grace)
            return
        time.sleep(0.05)
    rnd.watch()


def launch(fn: Callable, args: Sequence, num_processes: int,
           prog: str = "alf", stop_grace: float = 120.0,
           crash_grace: float = 5.0, backend: str = "gloo",
           setup: Optional[Tuple[Callable, tuple]] = None,
           max_restarts: int = 0, timeout_hint: str = "the timeout") -> int:
    """Runs ``fn(*args)`` in ``num_processes`` ranks on this machine.

    Args:
        fn: a picklable top-level function; it runs inside the process group.
        args: its arguments (picklable).
        num_processes: world size.
        backend: ``gloo`` (CPU ranks) or ``nccl`` (rank r on GPU r).
        prog: name used to prefix the launcher's own messages.
        stop_grace: seconds the ranks get to finish their iteration and
            checkpoint after a stop signal (an iteration of a slow
            simulator takes many seconds; a scheduler that kills sooner
            kills anyway); a second stop signal aborts them at once.
        crash_grace: seconds the other ranks get after one rank failed.
        setup: ``(function, args)`` each rank calls before forming the
            process group (e.g. parsing the configuration, which sets the
            collective timeout).
        max_restarts: how many times a failed run (a crash, a killed or
            stalled rank; not an error in the input) is started again; each
            start resumes from the last checkpoint.
        timeout_hint: how the collective timeout reads in a report.

    Returns:
        The exit code: 0, 1 (error or crash) or 128 + the stop signal.
    """
    restarts = 0
    try:
        while True:
            rnd = _run_round(fn, args, setup, num_processes, backend,
                             stop_grace, crash_grace)
            codes = [p.exitcode for p in rnd.procs]
            cause = rnd.cause(timeout_hint)
            if cause is None:
                break
            report, retry = cause
            if retry and restarts < max_restarts and rnd.signal is None:
                restarts += 1
                print(f"{prog}: {report}\n{prog}: restarting every rank "
                      f"from the last checkpoint, if any (restart {restarts} "
                      f"of {max_restarts})", file=sys.stderr, flush=True)
                continue
            print(f"{prog}: {report}", file=sys.stderr, flush=True)
            return EXIT_ERROR
    finally:
        _stop_resource_tracker()
    if rnd.signal is not None:
        if not rnd.aborted and all(c == EXIT_OK for c in codes):
            return EXIT_OK  # the stop came as the ranks finished the run
        if rnd.aborted:
            ranks = ", ".join(str(r) for r in rnd.aborted)
            print(f"{prog}: {process.signal_name(rnd.signal)}: rank(s) "
                  f"{ranks} had not finished stopping after "
                  f"{rnd.aborted_why}; aborted. Unless rank 0 said above "
                  "that it saved the stop's checkpoint (which is then "
                  "whole: checkpoints are renamed into place), this stop "
                  "saved none; run the same command to resume from the "
                  "newest one",
                  file=sys.stderr, flush=True)
        return process.exit_code_for(rnd.signal)
    stopped = [c for c in codes if c is not None and c > 128]
    if stopped:  # ranks stopped on a signal sent to them, not to us
        return max(stopped)
    if any(c != EXIT_OK for c in codes):
        print(f"{prog}: error: rank exit codes {codes}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK


if __name__ == "__main__":
    sys.exit("alf.bin.launch is the library behind alf.bin.train "
             "--distributed and alf.bin.compare, not a command: run "
             "alf.bin.train --distributed multi-process (--help lists its "
             "flags)")
