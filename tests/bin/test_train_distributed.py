"""The train CLI with several processes: training, Ctrl-C, a crashing rank,
torchrun, the user's example algorithm, and launch errors."""
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from alf.trainers.checkpointer import Checkpointer
from alf.trainers.evaluator import read_eval_csv
from cli_harness import session_processes

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
TINY = ["TrainerConfig.num_env_steps=1024", "TrainerConfig.num_envs=4",
        "TrainerConfig.unroll_length=16", "TrainerConfig.minibatch_size=32",
        "TrainerConfig.num_epochs=2",
        "TrainerConfig.num_eval_episodes=2", "TrainerConfig.eval_interval=4",
        "TrainerConfig.sync_check_interval=1"]
MP = ["--distributed", "multi-process", "--num_processes", "2"]


def _cmd(root, params=(), gin_file="ppo_cart_pole.gin", extra=MP,
         module=("-m", "alf.bin.train")):
    cmd = [sys.executable, *module, "--gin_file", gin_file, "--root_dir",
           str(root), *extra]
    for p in params:
        cmd += ["--gin_param", p]
    return cmd


def _run(cmd, timeout=150, env=None):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          cwd=REPO, env=env)


@pytest.mark.timeout(200)
def test_two_processes_train_and_checkpoint_loads_single_process(tmp_path):
    res = _run(_cmd(tmp_path, TINY))
    assert res.returncode == 0, res.stderr[-3000:]
    curve = read_eval_csv(str(tmp_path / "eval.csv"))
    assert curve["env_steps"] == [256, 512, 768, 1024]
    with open(tmp_path / "eval.csv") as f:  # rank 0 alone writes it
        assert len(f.read().strip().splitlines()) == 5
    ckpt = torch.load(tmp_path / "ckpt" / "ckpt-1024.pt", weights_only=True)
    assert not any(k.startswith("module.") or ".module." in k
                   for k in ckpt["algorithm"])
    # The same run, resumed single-process with a larger budget.
    params = [p for p in TINY if "num_env_steps" not in p]
    res = _run(_cmd(tmp_path, params + ["TrainerConfig.num_env_steps=1280"],
                    extra=[]))
    assert res.returncode == 0, res.stderr[-3000:]
    assert "resumed from" in res.stderr and "1024 env steps" in res.stderr


@pytest.mark.timeout(200)
def test_sizes_that_do_not_divide_are_a_clear_error(tmp_path):
    res = _run(_cmd(tmp_path, TINY + ["TrainerConfig.num_envs=3"]))
    assert res.returncode == 1
    lines = res.stderr.strip().splitlines()
    assert lines[-1].startswith("alf.bin.train: error:"), res.stderr
    assert "num_envs=3" in lines[-1] and "2 processes" in lines[-1]
    assert "Traceback" not in res.stderr


def test_multi_gpu_without_gpu_is_a_clear_error(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    res = _run(_cmd(tmp_path, TINY, extra=["--distributed", "multi-gpu"]))
    assert res.returncode == 1
    assert "multi-process" in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


@pytest.mark.timeout(200)
def test_ctrl_c_stops_every_process_saves_and_resumes(tmp_path):
    params = TINY + ["TrainerConfig.num_env_steps=10000000",
                     "TrainerConfig.log_interval_seconds=0.2",
                     "TrainerConfig.eval_interval=1000",
                     "TrainerConfig.sync_check_interval=50",
                     "TrainerConfig.async_env=True"]
    proc = subprocess.Popen(_cmd(tmp_path, params), cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    out = []
    deadline = time.time() + 120
    while time.time() < deadline:
        line = proc.stdout.readline()
        out.append(line)
        if "steps/s" in line:
            break
    assert "steps/s" in out[-1], "".join(out)
    # Every process of the run (launcher, ranks, env workers) is alive now.
    assert len(session_processes(proc.pid)) >= 1 + 2 + 2 * 2
    start = time.time()
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=30)
    elapsed = time.time() - start
    text = "".join(out) + rest
    assert proc.returncode == 130, text[-3000:]
    # An iteration and a checkpoint take well under a second here; 20 s
    # leaves a loaded 2-core machine room to schedule 7 processes' exits.
    assert elapsed < 20, f"took {elapsed:.1f} s to stop"
    assert "Traceback" not in text
    assert sum("SIGINT: stopped at" in ln for ln in text.splitlines()) == 1
    assert text.count("stopping after this iteration") == 1, text[-3000:]
    time.sleep(0.5)
    assert session_processes(proc.pid) == []  # no zombie or orphan
    saved = Checkpointer(str(tmp_path / "ckpt")).saved()
    assert saved
    # Two more iterations of 64 steps than were saved.
    params = [p.replace("=10000000", f"={max(saved) + 128}")
              for p in params]
    res = _run(_cmd(tmp_path, params))
    assert res.returncode == 0, res.stderr[-3000:]
    assert "resumed from" in res.stderr


@pytest.mark.timeout(200)
def test_a_crashing_rank_ends_the_run_with_its_traceback_once(tmp_path):
    gin_file = tmp_path / "crash.gin"
    gin_file.write_text("include 'ppo_cart_pole.gin'\n"
                        "import crashing_algorithm\n"
                        "TrainerConfig.algorithm_ctor = @CrashingPPO\n")
    env = dict(os.environ, PYTHONPATH=os.path.dirname(__file__))
    start = time.time()
    proc = subprocess.Popen(_cmd(tmp_path / "run", TINY + [
        "TrainerConfig.num_env_steps=100000",
        "TrainerConfig.async_env=True"], gin_file=str(gin_file)),
        cwd=REPO, env=env, text=True, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, start_new_session=True)
    out, err = proc.communicate(timeout=150)
    assert proc.returncode == 1, err[-3000:]
    assert time.time() - start < 60
    assert err.count("RuntimeError: injected crash on rank 1") == 1, err[-3000:]
    assert err.count("Traceback") == 1
    assert "rank 1 failed" in err
    time.sleep(0.5)
    assert session_processes(proc.pid) == []


@pytest.mark.timeout(200)
@pytest.mark.parametrize("find_unused", [None, "False"])
def test_user_algorithm_whose_losses_leave_parameters_unused(tmp_path,
                                                             find_unused):
    """tests/bin/two_loss_algorithm.py: an actor loss and a critic loss
    with their own optimizers, each leaving the other network without
    gradient, and no find_unused_parameters line: alf turns DDP's search
    on by itself (one log line); explicitly False is one error line."""
    here = os.path.dirname(__file__)
    params = ["TrainerConfig.num_env_steps=2048",
              "TrainerConfig.eval_interval=8",
              "TrainerConfig.num_eval_episodes=2",
              "TrainerConfig.sync_check_interval=1"]
    if find_unused:
        params.append(f"make_ddp_performer.find_unused_parameters="
                      f"{find_unused}")
    res = _run(_cmd(tmp_path, params,
                    gin_file=os.path.join(here, "two_loss_a2c.gin")),
               env=dict(os.environ, PYTHONPATH=here))
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    critic = ("critic.encoder.layers.0.weight, critic.encoder.layers.0.bias, "
              "critic.encoder.layers.1.weight, critic.encoder.layers.1.bias, "
              "critic.head.weight, critic.head.bias")
    if find_unused is None:
        assert res.returncode == 0, res.stderr[-3000:]
        steps = read_eval_csv(str(tmp_path / "eval.csv"))["env_steps"]
        assert steps[-1] == 2048
        assert res.stderr.count("without gradient") == 1, res.stderr
        assert (f"TwoLossA2C.actor_loss leaves 6 parameter(s) without "
                f"gradient ({critic}): alf turned on DDP's unused-parameter "
                "search") in res.stderr
    else:
        assert res.returncode == 1, res.stderr[-3000:]
        errors = [line for line in res.stderr.splitlines()
                  if "error" in line.lower()]
        assert errors == [
            f"alf.bin.train: error: TwoLossA2C.actor_loss left parameters "
            f"without gradient ({critic}) while make_ddp_performer."
            "find_unused_parameters = False; add `make_ddp_performer."
            "find_unused_parameters = True` to the gin file (or, if its "
            "output is not a loss, call it under torch.no_grad())"], \
            res.stderr


@pytest.mark.timeout(200)
def test_a_misused_decorator_is_one_line_and_not_retried(tmp_path):
    """tests/bin/misused_ddp.py decorates a method of a module without
    parameters: a DistributedError, the algorithm's mistake, which a
    restart would repeat. It was a crash: each rank's traceback, then every
    restart of --max_restarts failing the same way."""
    here = os.path.dirname(__file__)
    gin_file = tmp_path / "misused.gin"
    gin_file.write_text(f"include '{here}/two_loss_a2c.gin'\n"
                        "import misused_ddp\n"
                        "TrainerConfig.algorithm_ctor = @MisusedDDPA2C\n")
    res = _run(_cmd(tmp_path / "run", ["TrainerConfig.num_env_steps=1024"],
                    gin_file=str(gin_file), extra=MP + ["--max_restarts", "1"]),
               env=dict(os.environ, PYTHONPATH=here))
    assert res.returncode == 1, res.stderr[-3000:]
    assert "Traceback" not in res.stderr and "restart" not in res.stderr, \
        res.stderr[-3000:]
    errors = [line for line in res.stderr.splitlines()
              if "error" in line.lower()]
    assert errors == [
        "alf.bin.train: error: @data_distributed on Doubler.scale: Doubler "
        "has no trainable parameters for DDP to average; decorate a method "
        "of the module that holds them (e.g. the algorithm's loss)"], \
        res.stderr[-3000:]


@pytest.mark.timeout(200)
def test_torchrun_standalone_trains(tmp_path):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc_per_node", "2", "-m", "alf.bin.train", "--gin_file",
           "ppo_cart_pole.gin", "--root_dir", str(tmp_path)]
    for p in TINY:
        cmd += ["--gin_param", p]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    res = _run(cmd, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    assert read_eval_csv(str(tmp_path / "eval.csv"))["env_steps"][-1] == 1024


@pytest.mark.timeout(200)
def test_user_algorithm_example_trains_with_two_processes(tmp_path):
    """alf/examples/custom_algorithm.py: the worked example of
    docs/distributed.md."""
    res = _run(_cmd(tmp_path, [
        "TrainerConfig.num_env_steps=2048", "TrainerConfig.eval_interval=8",
        "TrainerConfig.num_eval_episodes=2",
        "TrainerConfig.sync_check_interval=1"
    ], gin_file="custom_algorithm.gin"))
    assert res.returncode == 0, res.stderr[-3000:]
    assert read_eval_csv(str(tmp_path / "eval.csv"))["env_steps"][-1] == 2048


@pytest.mark.timeout(200)
@pytest.mark.parametrize("gin_file,params", [
    ("sac_pendulum.gin", ["TrainerConfig.num_env_steps=400",
                          "TrainerConfig.eval_interval=100",
                          "SACAlgorithm.replay=@PrioritizedGlobalReplay()"]),
    ("dqn_cart_pole.gin", ["TrainerConfig.num_env_steps=2048",
                           "TrainerConfig.eval_interval=4",
                           "TrainerConfig.initial_collect_steps=512"]),
])
def test_off_policy_examples_train_with_two_processes(tmp_path, gin_file,
                                                       params):
    res = _run(_cmd(tmp_path, params + [
        "TrainerConfig.num_eval_episodes=2",
        "TrainerConfig.sync_check_interval=10"], gin_file=gin_file))
    assert res.returncode == 0, res.stderr[-3000:]
    steps = read_eval_csv(str(tmp_path / "eval.csv"))["env_steps"]
    assert steps[-1] == int(params[0].split("=")[1])
    assert len(steps) == 2
