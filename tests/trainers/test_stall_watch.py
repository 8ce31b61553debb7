"""Tests of alf/trainers/stall_watch.py: which actors a waiting learner
reports, when, and how it describes their processes."""
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from alf.trainers.stall_watch import (CollectionError, CollectionStopped,
                                      StallWatch, WorkerWatch)


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _watch(pids, clock, **kw):
    return StallWatch(pids, lambda i: f"actor {i}", clock=clock, **kw)


def test_only_actors_silent_past_the_limit_are_reported_once_per_limit():
    clock = _Clock()
    watch = _watch([os.getpid(), os.getpid()], clock, min_seconds=10)
    clock.now = 9
    assert watch.check([0, 1]) == []
    watch.heard(1)
    clock.now = 11
    lines = watch.check([0, 1])
    assert len(lines) == 1 and lines[0].startswith("actor 0 has sent "
                                                   "nothing for 11 s"), lines
    assert "is running" in lines[0], lines  # this test's own process
    clock.now = 15
    assert watch.check([0, 1]) == []  # not again within the limit
    clock.now = 22
    assert len(watch.check([0, 1])) == 2  # actor 1 silent 11 s by now
    assert watch.check([]) == []


def test_beyond_three_silent_actors_one_line_counts_the_rest():
    clock = _Clock()
    watch = _watch([os.getpid()] * 6, clock, min_seconds=10)
    clock.now = 25
    watch.heard(5)  # 5 s before: not silent
    clock.now = 30
    lines = watch.silent(range(6), 10)
    assert [ln.split(" has")[0] for ln in lines[:3]] == [
        "actor 0", "actor 1", "actor 2"], lines
    assert lines[3] == "2 more actors have sent nothing for 10 s or more"
    assert len(lines) == 4


def test_only_a_stopped_actor_is_stopped_and_start_restarts_the_clock():
    clock = _Clock()
    watch = _watch([os.getpid()], clock, min_seconds=10)
    clock.now = 30
    assert watch.silent([0], 10) and watch.stopped([0], 10) == []
    watch.restart()
    assert watch.silent([0], 10) == []


def test_the_limit_grows_with_the_slowest_unroll():
    clock = _Clock()
    watch = _watch([os.getpid()], clock, min_seconds=10, factor=3)
    watch.unroll_took(5)
    assert watch.limit == 15
    clock.now = 12
    assert watch.check([0]) == []
    clock.now = 16
    assert watch.check([0])


@pytest.mark.timeout(30)
def test_a_stuck_server_is_named_beside_the_actors_waiting_on_it():
    """Actors that wait on a stopped inference worker sleep: the worker is
    the one to name; one working normally is not named."""
    child = subprocess.Popen([sys.executable, "-c",
                              "import time; time.sleep(60)"])
    try:
        os.kill(child.pid, signal.SIGSTOP)
        clock = _Clock()
        watch = StallWatch([os.getpid()], lambda i: f"process {i}",
                           min_seconds=1, clock=clock,
                           servers=[os.getpid(), child.pid])
        assert watch.silent([0], 1) == []  # nothing silent: nothing said
        clock.now = 2
        for _ in range(100):
            lines = watch.silent([0], 1)
            if len(lines) == 2:
                break
            time.sleep(0.1)
        assert lines[0].startswith("process 0 has sent nothing"), lines
        assert lines[1] == (f"process 2: its process (pid {child.pid}) is "
                            "stopped (SIGSTOP or a job control stop: "
                            "SIGCONT resumes it)"), lines
    finally:
        child.kill()
        child.wait()


@pytest.mark.timeout(30)
def test_a_stopped_process_is_named_as_stopped_and_a_gone_one_as_gone():
    child = subprocess.Popen([sys.executable, "-c",
                              "import time; time.sleep(60)"])
    try:
        os.kill(child.pid, signal.SIGSTOP)
        clock = _Clock()
        watch = _watch([child.pid, 2 ** 22 + 1], clock, min_seconds=1)
        clock.now = 2
        for _ in range(100):  # the stop takes effect once it is scheduled
            lines = watch.check([0, 1])
            if "stopped" in lines[0]:
                break
            watch._warned_at = None
            time.sleep(0.1)
        assert "is stopped (SIGSTOP" in lines[0], lines
        assert f"pid {child.pid}" in lines[0], lines
        assert lines[1].endswith("is gone"), lines
        # Stopped for `stopped` once seen so for a second by checks at
        # most 3 s apart (a job suspended whole may resume this process
        # first); a longer gap (this one stopped too) counts afresh.
        assert watch.stopped([0, 1], 1) == []
        clock.now = 2.9
        assert watch.stopped([0, 1], 1) == []
        clock.now = 3.0
        assert watch.stopped([0, 1], 1) == watch.silent([0, 1], 1)
        clock.now = 6.5
        assert watch.stopped([0, 1], 1) == []
        clock.now = 7.5
        assert watch.stopped([0, 1], 1) == watch.silent([0, 1], 1)
    finally:
        child.kill()
        child.wait()


def test_a_worker_watch_warns_past_the_limit_and_gives_up_after_a_stop(
        caplog):
    clock, stop = _Clock(), [False]
    watch = WorkerWatch([os.getpid(), os.getpid()],
                        lambda i: f"training environment worker {i} of 2",
                        lambda: stop[0], clock=clock)
    watch.stepped(40.0)  # the slowest step: the limit is 120 s, stop 80 s
    clock.now = 1000.0
    watch.waiting([1], 1.0)  # a step that began at 999
    clock.now = 1118.0
    watch.waiting([1], 119.0)
    assert "waiting for a step" not in caplog.text
    clock.now = 1122.0
    watch.waiting([1], 123.0)
    assert ("waiting for a step of the environments: training environment "
            "worker 1 of 2 has sent nothing for 123 s") in caplog.text, \
        caplog.text
    stop[0] = True
    watch.waiting([1], 123.0)  # the stop is seen now
    clock.now = 1201.0
    watch.waiting([1], 202.0)  # 79 s after it: not yet
    clock.now = 1203.0
    with pytest.raises(CollectionStopped, match=re.escape(
            "the environments' step (or reset) did not come within 80 s of "
            "the stop (twice the slowest so far, at least 5 s); training "
            "environment worker 1 of 2 has sent nothing for 204 s")):
        watch.waiting([1], 204.0)
    # A step that came counts afresh: a stop waits for the next one anew.
    watch.stepped(1.0)
    clock.now = 1300.0
    watch.waiting([0], 1.0)
    clock.now = 1370.0
    watch.waiting([0], 71.0)


@pytest.mark.timeout(30)
def test_a_ranks_worker_watch_fails_a_step_a_stopped_worker_holds(caplog):
    """Other ranks wait for this one's unroll in a collective: a stopped
    worker fails the step after the stop limit, without any stop asked
    for; a worker that is merely slow does not."""
    child = subprocess.Popen([sys.executable, "-c",
                              "import time; time.sleep(60)"])
    try:
        clock = _Clock()
        watch = WorkerWatch(
            [os.getpid(), child.pid],
            lambda i: f"rank 1's training environment worker {i} of 2",
            lambda: False, "rank 1's unroll cannot come", clock=clock)
        clock.now = 10.0
        watch.waiting([0, 1], 6.0)  # past 5 s, but running and sleeping
        os.kill(child.pid, signal.SIGSTOP)
        watch.waiting([0], 6.0)  # the stopped one answered
        for _ in range(100):  # the stop takes effect once it is scheduled
            try:
                watch.waiting([1], clock.now - 4.0)
            except CollectionError as e:
                error = str(e)
                break
            time.sleep(0.1)
            clock.now += 0.5  # seen stopped a second, checks 0.5 s apart
        else:
            raise AssertionError("the stopped worker was not given up")
        assert error.startswith(
            "rank 1's training environment worker 1 of 2 has sent nothing "
            "for "), error
        assert f"its process (pid {child.pid}) is stopped (SIGSTOP" in error
        assert error.endswith(
            ": rank 1's unroll cannot come, and the other ranks would wait "
            "for it until their collectives time out"), error
        assert CollectionError.retryable
    finally:
        child.kill()
        child.wait()
