"""The launcher's reports: a peer failure's gist, and a stop that leaves a
rank inside a collective (a consequence, not a failure), under the
launcher and under torchrun."""
import os
import signal
import subprocess
import sys
import time

import pytest

from alf.bin import launch
from alf.utils.distributed import peer_failure_reason
from alf.utils.process import EXIT_ERROR

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def test_a_peer_failure_keeps_the_peers_address():
    gloo = RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:534]"
                        " Connection closed by peer [127.0.0.1]:29500")
    assert peer_failure_reason(gloo) == \
        "Connection closed by peer [127.0.0.1]:29500"
    said = RuntimeError("Connection reset by peer. This may indicate a "
                        "possible application crash on rank 0.")
    assert peer_failure_reason(said) == "Connection reset by peer"


class _Ended:
    exitcode, pid = EXIT_ERROR, None

    def is_alive(self):
        return False


def _round(signum):
    rnd = launch._Round([_Ended(), _Ended()])
    rnd.signal = signum
    rnd.messages = [(1.0, 1, "secondary", "Connection closed by peer")]
    rnd.alive_at_failure = []
    return rnd


def test_lost_peers_are_a_failure_unless_a_stop_explains_them():
    assert _round(None).cause("10 s") == (
        "rank 1 lost its peers: Connection closed by peer", True)
    assert _round(signal.SIGTERM).cause("10 s") is None
    # A crash is still the cause, stop or not.
    rnd = _round(signal.SIGTERM)
    rnd.messages.append((0.5, 0, "crash", "Traceback ...\nValueError: x"))
    assert rnd.cause("10 s") == ("rank 0 failed:\nTraceback ...\n"
                                 "ValueError: x", True)


def test_every_rank_timing_out_alive_names_the_two_causes():
    """No rank died or stalled, yet each one's collective timed out: one
    was too slow between two collectives, or they waited in different ones
    (a rank-dependent number of data-distributed calls). Before, rank 0
    was said to have lost its peers, which pointed at rank 1."""
    rnd = _round(None)
    rnd.messages.append((0.5, 0, "secondary", "Timed out waiting 20000ms"))
    said, retry = rnd.cause("20 s")
    assert said.startswith("every rank lost its peers (Timed out waiting "
                           "20000ms) while all were alive: either a rank "
                           "spent longer than collective_timeout.seconds")
    assert "waited in different collectives" in said and retry
    assert said.endswith("(the timeout is 20 s)")


def _stop_while_a_rank_waits(tmp_path, torchrun: bool):
    """Runs stop_in_collective.py, sends SIGTERM once rank 1 waits in its
    collective; returns (the ready file, stdout, stderr)."""
    ready = tmp_path / "ready"
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE")}
    env["PYTHONPATH"] = os.pathsep.join(
        [REPO, *filter(None, [env.get("PYTHONPATH")])])
    script = os.path.join(HERE, "stop_in_collective.py")
    cmd = ([sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc_per_node", "2", "--monitor-interval", "0.2", script,
            "--torchrun", str(ready)] if torchrun
           else [sys.executable, script, str(ready)])
    out, err = _sigterm_when_ready(cmd, env, ready, settle=1.0)
    return ready, out, err


def _sigterm_when_ready(cmd, env, ready, settle: float):
    """Runs ``cmd``, sends it SIGTERM ``settle`` s after ``ready`` appears;
    returns its (stdout, stderr)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.time() + 60
        while not ready.exists() and time.time() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        assert ready.exists(), "rank 0 never started"
        time.sleep(settle)
        proc.send_signal(signal.SIGTERM)
        return proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.mark.timeout(90)
def test_a_stop_while_a_rank_waits_in_a_collective_is_a_clean_stop(
        tmp_path):
    _, out, err = _stop_while_a_rank_waits(tmp_path, torchrun=False)
    assert out.strip() == f"exit {128 + signal.SIGTERM}", out + err
    assert "lost its peers" not in err, err


@pytest.mark.timeout(90)
def test_the_same_stop_under_torchrun_is_a_clean_stop(tmp_path):
    ready, out, err = _stop_while_a_rank_waits(tmp_path, torchrun=True)
    said = tmp_path / "ready.rank1"
    assert said.exists(), out + err
    assert said.read_text() == f"exit {128 + signal.SIGTERM}", out + err
    assert "lost its peers" not in err, err
    assert "SIGTERM: rank 1 stopped; a peer ended first" in err, err


class _EndsAt:
    """A process that ends ``seconds`` from now."""

    def __init__(self, seconds: float):
        self.end = time.time() + seconds

    def is_alive(self) -> bool:
        return time.time() < self.end


def test_only_a_second_ctrl_c_cuts_the_stop_grace_short():
    """A wrapper that forwards signals (timeout, srun) repeats a
    scheduler's SIGTERM: the ranks still get their grace to checkpoint."""
    for again in (signal.SIGTERM, signal.SIGHUP):
        start = time.time()
        assert launch._wait_all([_EndsAt(0.4)], 5.0, [again])
        assert time.time() - start >= 0.35
    start = time.time()
    assert not launch._wait_all([_EndsAt(5.0)], 5.0, [signal.SIGINT])
    assert time.time() - start < 1.0


class _Aborted(_EndsAt):
    """An `_EndsAt` that records the signals sent to it."""
    pid = None

    def __init__(self, seconds: float):
        super().__init__(seconds)
        self.got = []


def test_a_second_ctrl_c_spares_the_ranks_that_saved(monkeypatch):
    """A second Ctrl-C aborts only the ranks that have not said they saved
    the stop's checkpoint; those that did are exiting. Before, every live
    rank was aborted, and said not to have finished its iteration."""
    procs = [_Aborted(0.5), _Aborted(30)]
    monkeypatch.setattr(launch, "_signal_all", lambda ps, sig: [
        p.got.append(sig) for p in ps if p.is_alive()])
    aborted = launch._stop(procs, 60.0, [signal.SIGINT], lambda: {0})
    assert aborted == [1]
    assert procs[0].got == [] and procs[1].got[0] == \
        launch.process.ABORT_SIGNAL
    procs = [_Aborted(0.5), _Aborted(0.5)]
    assert launch._stop(procs, 60.0, [signal.SIGINT], lambda: {0, 1}) == []
    assert all(p.got == [] for p in procs)  # they ended within 3 s


@pytest.mark.timeout(90)
def test_ranks_that_finish_as_the_stop_comes_exit_0(tmp_path):
    """The stop came with the run's last iteration: every rank finished
    (exit 0). Before, the launcher exited 143 for a finished run."""
    ready = tmp_path / "ready"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [REPO, *filter(None, [os.environ.get("PYTHONPATH")])]))
    out, err = _sigterm_when_ready(
        [sys.executable, os.path.join(HERE, "finish_on_stop.py"),
         str(ready)], env, ready, settle=0.0)
    assert out.strip() == "exit 0", out + err


def test_a_rank_aborted_by_gloo_is_said_with_its_likely_cause():
    """Ranks whose data-distributed calls differ in size: gloo aborts one,
    and "killed by SIGABRT" alone named no cause."""
    rnd = launch._Round([_Ended(), _Ended()])
    rnd.deaths = {1: (1.0, -signal.SIGABRT)}
    said, retry = rnd.cause("10 s")
    assert said.startswith(
        "rank 1 was killed by SIGABRT (exit -6): a C++ abort, its reason "
        "printed above; where it is gloo's \"Received data size doesn't "
        "match expected size\", the ranks' all-reduces differed in size"), \
        said
    assert retry
