"""Says which actors a learner waiting for an unroll has not heard from,
and how long a learner asked to stop waits for them.

An actor that stops sending (its process stopped with SIGSTOP, a debugger,
an environment that deadlocked or waits on a lost connection) would
otherwise leave a run waiting silently, with the console's last progress
line as the only sign. Slow environments are not a stall: the limit grows
with the longest unroll seen, so only waiting well past what the run
normally takes is reported, and it is a warning (a step that takes minutes
may be legitimate), repeated at each further limit's worth of waiting.
"""
import time
from typing import (Any, Callable, Dict, Iterable, List, Optional,
                    Sequence, Tuple)

from absl import logging

from alf.environments.batched import StepWatch
from alf.utils import process
from alf.utils.errors import CollectionError, CollectionStopped


# What /proc/PID/stat's state letter says of a process that sends nothing.
_STATES = {
    "T": "is stopped (SIGSTOP or a job control stop: SIGCONT resumes it)",
    "t": "is stopped by a debugger",
    "D": "waits in the kernel (uninterruptible: a disk or network file "
         "system?)",
    "Z": "has exited (a zombie)",
    "R": "is running (a slow environment step, or a loop?)",
    "S": "is sleeping (waiting on something: its simulator, a lock, a "
         "socket?)",
}


class StallWatch:
    """Tracks when each actor was last heard from; `check` warns about
    those silent for longer than the limit.

    Args:
        pids: the actors' process ids, by actor index.
        name: names actor ``i`` for a message.
        min_seconds: the least silence reported.
        factor: the limit is at least this times the longest time an
            unroll took so far.
        stop_seconds: the least `stop_limit`.
        clock: seconds (a test's).
        servers: the process ids of those the actors wait on (inference
            workers), named by ``name(len(pids) + j)``: one of them that is
            stopped or stuck is named beside the silent actors.
        waiting_for: what the warnings say is waited for.
        noun: what the watched processes are, in the plural.
    """

    def __init__(self, pids: List[Optional[int]], name: Callable[[int], str],
                 min_seconds: float = 120.0, factor: float = 3.0,
                 stop_seconds: float = 5.0,
                 clock: Callable[[], float] = time.monotonic,
                 servers: Sequence[Optional[int]] = (),
                 waiting_for: str = "an unroll", noun: str = "actors"):
        self._pids, self._name, self._servers = pids, name, list(servers)
        self._waiting_for, self._noun = waiting_for, noun
        self._min, self._factor, self._clock = min_seconds, factor, clock
        self._stop_min = stop_seconds
        self._heard: Dict[int, float] = dict.fromkeys(range(len(pids)), 0.0)
        self.restart()
        self._longest = 0.0
        self._warned_at: Optional[float] = None
        self._stopped = StoppedClock(clock)  # for `stopped`

    @property
    def limit(self) -> float:
        """The silence (seconds) reported now."""
        return max(self._min, self._factor * self._longest)

    def restart(self, at: Optional[float] = None) -> None:
        """Counts every actor as heard from now, or at clock time ``at``
        (they start stepping)."""
        now = self._clock() if at is None else at
        self._heard = {i: now for i in self._heard}

    def stopped(self, waiting_for: Iterable[int],
                seconds: float) -> List[str]:
        """`silent`'s lines, if one of the actors of ``waiting_for`` silent
        for ``seconds`` is stopped (SIGSTOP, a debugger): it cannot send
        until someone resumes it. Stopped means seen stopped by calls at
        most `STOP_CHECK_GAP` apart for `STOP_CONFIRM` seconds: a job
        suspended as a whole may resume this process a moment before the
        actor, and a call after a longer gap (this process was stopped
        too) starts counting afresh."""
        now = self._clock()
        stopped = self._stopped.seconds(
            (i, self._pids[i]) for i in waiting_for
            if now - self._heard[i] >= seconds)
        if any(t >= STOP_CONFIRM for t in stopped.values()):
            return self.silent(waiting_for, seconds)
        return []

    def heard(self, actor: int) -> None:
        """Actor ``actor`` sent something."""
        self._heard[actor] = self._clock()

    def unroll_took(self, seconds: float) -> None:
        """An unroll (or a segment) took ``seconds`` to arrive."""
        self._longest = max(self._longest, seconds)

    @property
    def stop_limit(self) -> float:
        """How long a learner asked to stop still waits for an unroll:
        twice the slowest so far (healthy actors deliver within it), and
        at least ``stop_seconds``."""
        return max(self._stop_min, 2 * self._longest)

    def check(self, waiting_for: Iterable[int]) -> List[str]:
        """Warns (and returns the lines) about the actors of
        ``waiting_for`` silent for longer than the limit, at most once
        per limit's worth of time."""
        now, limit = self._clock(), self.limit
        if self._warned_at is not None and now - self._warned_at < limit:
            return []
        lines = self.silent(waiting_for, limit)
        if lines:
            self._warned_at = now
            for line in lines:
                logging.warning("waiting for %s: %s", self._waiting_for,
                                line)
        return lines

    def silent(self, waiting_for: Iterable[int],
               seconds: float) -> List[str]:
        """Says, for each actor of ``waiting_for`` silent for at least
        ``seconds``, how long and what its process is doing."""
        now, lines = self._clock(), []
        silent = [i for i in sorted(set(waiting_for))
                  if now - self._heard[i] >= seconds]
        # The longest silent first; many actors alike are one line more.
        silent.sort(key=lambda i: self._heard[i])
        for i in silent[:_NAMED]:
            pid = self._pids[i]
            lines.append(f"{self._name(i)} has sent nothing for "
                         f"{now - self._heard[i]:.0f} s; its process (pid "
                         f"{pid}) {_how(process.state(pid))}")
        if len(silent) > _NAMED:
            lines.append(f"{len(silent) - _NAMED} more {self._noun} have "
                         f"sent nothing for {seconds:.0f} s or more")
        if lines:  # and what they may be waiting on, if it is stuck
            n = len(self._pids)
            for j, pid in enumerate(self._servers):
                state = process.state(pid)
                if state not in ("R", "S"):
                    lines.append(f"{self._name(n + j)}: its process (pid "
                                 f"{pid}) {_how(state)}")
        return lines


# The most silent actors named one by one.
_NAMED = 3
# The least silence reported (`StallWatch.limit`), in seconds.
STALL_SECONDS = 120.0
# `StallWatch.stopped`: how long a process must be seen stopped, by checks
# at most how far apart (seconds).
STOP_CONFIRM, STOP_CHECK_GAP = 1.0, 3.0


def doing(pid: Optional[int]) -> str:
    """"(pid P) is ...": what process ``pid`` is doing, from /proc."""
    return f"(pid {pid}) {_how(process.state(pid))}"


def _how(state: str) -> str:
    """What a process in ``state`` (a /proc state letter, "" if gone)
    is doing."""
    if not state:
        return "is gone"
    return _STATES.get(state, f"is in state {state}")


class WorkerWatch(StepWatch):
    """A `StepWatch` on environment workers that collection or an
    evaluation waits for (`alf.environments.batched.BatchedEnvironment.
    watch`): a step that waits for a worker longer than `StallWatch.limit`
    is a warning naming it; once a stop is asked for, a step waits at most
    `StallWatch.stop_limit` longer (``stop_error``); in a multi-rank run,
    where the other ranks wait for this one, a step that a stopped worker
    (SIGSTOP) holds back fails after that long (``give_up_error``), so
    that they save instead of timing out.

    Args:
        pids: the workers' process ids.
        name: names worker ``i`` ("training environment worker 0 of 2").
        stop_asked: whether a stop was asked for.
        held: what a stopped worker holds back, in a multi-rank run
            ("rank 1's unroll cannot come"); None: never give a step up
            for a stopped worker (a stop still gives it up).
        stop_error: the error of a step given up after a stop.
        give_up_error: the error of a step given up for a stopped worker.
        clock: seconds (a test's); the steps' own durations come from the
            environment.
    """

    def __init__(self, pids: List[int], name: Callable[[int], str],
                 stop_asked: Callable[[], bool], held: Optional[str] = None,
                 stop_error: Callable[[str], BaseException] = CollectionStopped,
                 give_up_error: Callable[[str], BaseException] = (
                     CollectionError),
                 clock: Callable[[], float] = time.monotonic):
        self._stall = StallWatch(list(pids), name, STALL_SECONDS, clock=clock,
                                 waiting_for="a step of the environments",
                                 noun="workers")
        self._stop_asked, self._held, self._clock = stop_asked, held, clock
        self._stop_error, self._give_up_error = stop_error, give_up_error
        self._new_step = True  # the next `waiting` is a new step's first
        self._stop_seen: Optional[float] = None

    def stepped(self, seconds: float) -> None:
        self._stall.unroll_took(seconds)
        self._new_step, self._stop_seen = True, None

    def waiting(self, workers: Sequence[int], seconds: float) -> None:
        now = self._clock()
        if self._new_step:
            self._stall.restart(now - seconds)  # when the step began
            self._new_step = False
        self._stall.check(workers)
        limit = self._stall.stop_limit
        if self._held is not None and seconds > limit:
            stopped = self._stall.stopped(workers, limit)
            if stopped:
                raise self._give_up_error(held_back("; ".join(stopped),
                                                    self._held))
        if self._stop_asked():
            self._stop_seen = self._stop_seen or now
            if now - self._stop_seen > limit:
                raise self._stop_error("; ".join(
                    [stop_waited("the environments' step (or reset)",
                                 limit)] + self._stall.silent(workers, limit)))


class StoppedClock:
    """How long processes have been seen stopped (SIGSTOP, a debugger) by
    checks at most `STOP_CHECK_GAP` apart: a check after a longer gap (the
    checking process was stopped too, as when a job is suspended whole and
    resumed, this process perhaps a moment before the other) counts
    afresh.

    Args:
        clock: seconds (a test's).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._checked: Optional[float] = None
        self._since: Dict[Any, float] = {}

    def seconds(self, processes: Iterable[Tuple[Any, Optional[int]]]
                ) -> Dict[Any, float]:
        """For each ``(key, pid)`` of ``processes`` whose process is
        stopped now, how long it has been seen so (0 at first sight);
        the others are forgotten."""
        now = self._clock()
        if self._checked is None or now - self._checked > STOP_CHECK_GAP:
            self._since = {}
        self._checked = now
        self._since = {key: self._since.get(key, now)
                       for key, pid in processes
                       if process.state(pid) in ("T", "t")}
        return {key: now - since for key, since in self._since.items()}


def held_back(why: str, held: str) -> str:
    """The error of a wait given up because a stopped helper (``why``)
    holds back ``held`` ("rank 1's unroll cannot come"), which other ranks
    wait for in a collective."""
    return (f"{why}: {held}, and the other ranks would wait for it until "
            "their collectives time out")


def stop_waited(what: str, limit: float) -> str:
    """The error of a wait for ``what`` given up ``limit`` seconds after a
    stop (`StallWatch.stop_limit`)."""
    return (f"{what} did not come within {limit:.0f} s of the stop (twice "
            "the slowest so far, at least 5 s)")
