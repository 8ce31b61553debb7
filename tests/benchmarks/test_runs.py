"""benchmarks/runs.py: the steady rate and a benchmark's clean-up."""
import math
import os
import signal
import subprocess
import sys
import time

import pytest

BENCHMARKS = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks")
sys.path.insert(0, BENCHMARKS)
import runs  # noqa: E402


def _line(clock: str, steps: int) -> str:
    return (f"I1126 {clock} 1401 reporting.py:167] iter 3 | env steps "
            f"{steps}/65536 | 1306 steps/s | recent return -1.00")


def test_steady_rate_leaves_out_what_came_before_the_first_line():
    out = "\n".join(["start-up", _line("06:28:10.000000", 4096),
                     "an evaluation", _line("06:28:12.500000", 8192),
                     _line("06:28:14.000000", 12288)])
    assert runs.steady_rate(out) == pytest.approx(8192 / 4.0)


def test_steady_rate_across_midnight_and_without_two_lines():
    out = "\n".join([_line("23:59:59.000000", 0), _line("00:00:01.000000",
                                                         1000)])
    assert runs.steady_rate(out) == pytest.approx(500.0)
    assert math.isnan(runs.steady_rate(_line("06:28:10.000000", 4096)))


def test_steady_rate_leaves_out_the_final_evaluation():
    """The trainer's last progress line comes after its final evaluation
    (and calibration): 11 s of MetaDrive evaluation counted as training."""
    out = "\n".join([
        _line("06:28:10.000000", 4096), _line("06:28:12.000000", 8192),
        "I1126 06:28:13.000000 1401 evaluator.py:88] calibrating",
        "I1126 06:28:30.000000 1401 reporting.py:264] eval at 12288 env "
        "steps: return 1.00, episode length 10.0",
        _line("06:28:30.100000", 12288)])
    assert runs.steady_rate(out) == pytest.approx(4096 / 2.0)


@pytest.mark.timeout(60)
def test_sigterm_stops_the_whole_run_it_started():
    """A benchmark that `timeout` stops with SIGTERM leaves no process of
    its run behind (the run's own children included) to load the next
    benchmark."""
    marker = "61.4142"
    script = (
        f"import sys; sys.path.insert(0, {BENCHMARKS!r}); import runs\n"
        "runs.terminate_on_sigterm()\n"
        f"runs.run_in_own_group(['bash', '-c', 'sleep {marker} & "
        f"sleep {marker}; wait'])\n")
    bench = subprocess.Popen([sys.executable, "-c", script])

    def sleeping() -> int:  # the run's sleeps, not the benchmark's command
        out = subprocess.run(["pgrep", "-c", "-f", f"^sleep {marker}"],
                             capture_output=True, text=True).stdout
        return int(out or 0)
    try:
        deadline = time.time() + 30
        while sleeping() < 2:
            assert time.time() < deadline, "the run never started"
            time.sleep(0.1)
        bench.send_signal(signal.SIGTERM)
        assert bench.wait(timeout=30) != 0
        time.sleep(0.2)
        assert sleeping() == 0, "a process of the run outlived its benchmark"
    finally:
        bench.kill()
        subprocess.run(["pkill", "-f", f"^sleep {marker}"])


def test_the_train_command_and_a_runs_output():
    """One command line for every benchmark that trains (curves, throughput,
    mode_curves), and the run's output and exit status, both streams."""
    assert runs.train_command("/r", ["a.gin", "b.gin"], ["X.y=1"], 2,
                              ["--stop_grace", "5"])[1:] == [
        "-m", "alf.bin.train", "--root_dir", "/r", "--gin_file", "a.gin",
        "--gin_file", "b.gin", "--gin_param", "X.y=1", "--distributed",
        "multi-process", "--num_processes", "2", "--stop_grace", "5"]
    assert "--distributed" not in runs.train_command("/r", ["a.gin"])
    out = runs.run_in_own_group(["bash", "-c", "echo out; echo err >&2; "
                                 "exit 3"])
    assert out.returncode == 3 and out.stdout.split() == ["out", "err"]


@pytest.mark.parametrize("slowest", ["slowest", "slowest segment"])
def test_a_runs_progress_line_is_parsed(monkeypatch, slowest):
    line = ("I1126 10:00:00.000000 1 reporting.py:167] iter 12 | env steps "
            "49152/49152 | 491 steps/s | recent return 8.16 | time left "
            "00:00:00 | learner 0.389 ms CPU/step (wall 0.512) | actors "
            "3.238 ms CPU/step (env step 2.665; busy wall 4.100), waiting "
            "3% for a policy, "
            f"{slowest} 1.39x the fastest | learner waiting 46% for "
            "unrolls")
    monkeypatch.setattr(runs, "run_in_own_group", lambda cmd: (
        subprocess.CompletedProcess(cmd, 0, line + "\n")))
    r = runs.train_throughput(["a.gin"], [], "/r")
    assert (r["rate"], r["learner_ms"], r["learner_wall_ms"]) == (
        491.0, 0.389, 0.512)
    assert (r["actor_ms"], r["env_ms"], r["busy_ms"], r["actor_spread"],
            r["inference_ms"]) == (3.238, 2.665, 4.1, 1.39, 0.0)
    assert r["actor_wait"] == pytest.approx(0.03)
    assert r["learner_wait"] == pytest.approx(0.46)


def test_counts_below_one_are_a_usage_error():
    import argparse
    assert runs.positive_int("3") == 3
    for bad in ("0", "-5", "x"):
        with pytest.raises(argparse.ArgumentTypeError, match=">= 1"):
            runs.positive_int(bad)


@pytest.mark.timeout(120)
def test_a_failed_seed_names_the_runs_own_error(tmp_path):
    with pytest.raises(SystemExit) as e:
        runs.train_runs("no_such.gin", str(tmp_path), [0, 1])
    assert str(e.value).startswith(
        "seed 0 failed: alf.bin.train: error: gin file 'no_such.gin' not "
        "found")
    assert f"(whole log: {tmp_path}/seed0.log)" in str(e.value)
