"""benchmarks/async_collection.py: its workloads train, and it prints what
it measured (the latency workload's ideal included)."""
import re

import pytest

from benchmark_harness import run_script

# Every workload shrunk to a few iterations on a few environments: what is
# tested is that its bindings make a run (a gin file's new setting once
# broke the latency workload, whose Pendulum lacks MetaDrive's actions).
SMALL = {
    "latency": ["TrainerConfig.num_envs=4", "TrainerConfig.unroll_length=64",
                "TrainerConfig.minibatch_size=128",
                "straggler_load.delay=0.002"],
    "cart_pole": [],
}


def _run(workload, modes):
    params = [a for p in SMALL[workload] for a in ("--gin_param", p)]
    return run_script("async_collection.py", "--workload", workload,
                      "--repeats", "1", "--processes", "1", "--modes",
                      # Three iterations: the steady rate needs two progress
                      # lines before the final evaluation.
                      modes, "--num_env_steps", "768", *params, timeout=170)


@pytest.mark.timeout(200)
def test_the_latency_workload_reports_each_variants_share_of_its_ideal():
    # One variant (a second cost 20 s of CI): its name and its share.
    out = _run("latency", "async+actor_niceness=5")
    for mode in ("async+actor_niceness=5", ):
        m = re.search(rf"1 proc {re.escape(mode)}: ideal (\d+) env steps/s "
                      rf"\(4 x 1000 / \(2\.00 ms mean delay \+ actor "
                      rf"[\d.]+ ms\)\), reached ([\d.]+)", out)
        assert m, out
        assert int(m.group(1)) < 2000 and float(m.group(2)) > 0


@pytest.mark.timeout(200)
def test_cart_pole_sync_and_async_report_their_ratio():
    out = _run("cart_pole", "sync,async")
    m = re.search(r"1 proc async\s+(\d+)\s+([\d.]+)", out)
    assert m, out
    assert int(m.group(1)) > 0 and float(m.group(2)) > 0
