"""Short CUDA training runs of every algorithm, synchronous and
asynchronous collection (skipped without a GPU; CI has none).

Run on a GPU machine with ``python -m pytest -q tests/gpu`` (see
``../shared/notes/gpu-checklist.md``).
"""
import glob
import os
import subprocess
import sys

import pytest
import torch

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU"),
    pytest.mark.timeout(300),
]

CASES = {
    "ppo_cart_pole.gin": {"TrainerConfig.num_env_steps": "4096"},
    # an auxiliary phase holds aux_interval x 2 envs x 16 steps = 64
    "ppg_cart_pole.gin": {"TrainerConfig.num_env_steps": "4096",
                          "PPGAlgorithm.aux_interval": "2",
                          "PPGAlgorithm.aux_minibatch_size": "32"},
    "dqn_cart_pole.gin": {"TrainerConfig.num_env_steps": "3000",
                          "TrainerConfig.initial_collect_steps": "500"},
    "sac_pendulum.gin": {"TrainerConfig.num_env_steps": "600",
                         "TrainerConfig.eval_interval": "100"},
}


def run_cli(root_dir, gin_file, **params):
    cmd = [sys.executable, "-m", "alf.bin.train", "--gin_file", gin_file,
           "--root_dir", str(root_dir)]
    for name, value in params.items():
        cmd += ["--gin_param", f"{name.replace('__', '.')}={value}"]
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE")}
    return subprocess.run(cmd, capture_output=True, text=True, env=env,
                          timeout=280)


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("gin_file", sorted(CASES))
def test_trains_on_cuda(tmp_path, gin_file, mode):
    params = {k.replace(".", "__"): v for k, v in CASES[gin_file].items()}
    res = run_cli(tmp_path / "run", gin_file=gin_file,
                  TrainerConfig__device='"cuda"',
                  TrainerConfig__unroll_mode=f'"{mode}"',
                  TrainerConfig__num_envs="2",
                  TrainerConfig__unroll_length="16",
                  TrainerConfig__minibatch_size="32",
                  TrainerConfig__num_eval_episodes="2", **params)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "training on cuda" in out, out
    ckpt = max(glob.glob(str(tmp_path / "run" / "ckpt" / "ckpt-*.pt")))
    state = torch.load(ckpt, weights_only=True)
    assert state["counters"]["env_steps"] > 0
