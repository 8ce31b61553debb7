"""benchmarks/actor_overhead.py and learner_floor.py run on a small config
and print what they measured."""
import re

import pytest

from benchmark_harness import run_script


def _run(script, *args):
    return run_script(script, "--gin_file", "ppo_cart_pole.gin", *args,
                      timeout=150)


def _number(pattern, text):
    m = re.search(pattern, text)
    assert m, text
    return float(m.group(1))


@pytest.mark.timeout(180)
def test_actor_overhead_prints_the_overhead_and_the_floor():
    out = _run("actor_overhead.py", "--unrolls", "2")
    loop = _number(r"actor loop, free environment\s+([\d.]+)", out)
    own = _number(r"free environment's own step\s+([\d.]+)", out)
    overhead = _number(r"actor overhead\s+([\d.]+)", out)
    assert overhead == pytest.approx(loop - own, abs=2e-4) and overhead > 0
    floor = _number(r"policy forward alone\s+([\d.]+)", out)
    assert floor > 0
    # The printed ratio comes from unrounded times; the printed times are
    # rounded to 0.1 us, so recomputing it from them moves the last digit.
    ratio = _number(r"overhead is ([\d.]+)x the floor", out)
    assert ratio == pytest.approx(overhead / floor, rel=0.02, abs=0.06)


@pytest.mark.timeout(180)
def test_learner_floor_counts_the_products_of_every_update():
    out = _run("learner_floor.py", "--iterations", "2", "--gin_param",
               "PPOAlgorithm.target_kl=None")
    # ppo_cart_pole.gin: 8 x 32 steps, one minibatch of 256, 20 epochs.
    assert "40 gradient updates timed (40 in the counted iterations)" in out
    learner = _number(r"learner\s+([\d.]+) ms", out)
    floor = _number(r"floor\s+([\d.]+) ms", out)
    assert learner > 0 and floor > 0
    assert _number(r"ratio\s+([\d.]+)x", out) == pytest.approx(
        learner / floor, rel=0.02, abs=0.01)


@pytest.mark.timeout(180)
def test_actor_overhead_times_dqns_q_network_as_the_floor():
    out = run_script("actor_overhead.py", "--gin_file", "dqn_cart_pole.gin",
                     "--unrolls", "1", timeout=150)
    assert _number(r"policy forward alone\s+([\d.]+)", out) > 0


@pytest.mark.timeout(120)
@pytest.mark.parametrize("script", ["actor_overhead.py", "learner_floor.py",
                                    "call_order_check_cost.py"])
def test_a_bad_config_is_one_line(script):
    import subprocess
    import sys

    from benchmark_harness import BENCHMARKS, REPO
    res = subprocess.run(
        [sys.executable, f"{BENCHMARKS}/{script}", "--gin_param",
         "NoSuchThing.x=1"], capture_output=True, text=True, timeout=100,
        cwd=REPO)
    assert res.returncode == 1
    assert res.stderr.startswith(f"{script[:-3]}: bad gin configuration: "
                                 "No configurable matching 'NoSuchThing'")
    assert "Traceback" not in res.stderr


@pytest.mark.timeout(120)
def test_replay_save_memory_prints_the_peak_of_each_save():
    out = run_script("replay_save_memory.py", "--capacity", "200000",
                     "--dim", "20", timeout=100)
    assert "storage 15 MB" in out
    full = _number(r"filled 100%: file\s+([\d.]+) MB", out)
    half = _number(r"filled\s+50%: file\s+([\d.]+) MB", out)
    assert full == pytest.approx(15, abs=1) and half == pytest.approx(8, abs=1)
    assert len(re.findall(r"peak\s+\d+ MB during the save", out)) == 2
