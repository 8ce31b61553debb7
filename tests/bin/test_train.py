"""Tests of the training CLI, ``python -m alf.bin.train``, run as a subprocess.

Bad input must give a non-zero exit code and exactly one line on stderr,
``alf.bin.train: error: ...``, naming the bad value, with no traceback and
nothing written that looks like a run. A good run writes config.gin, eval.csv,
TensorBoard events and checkpoints, and can be resumed.
"""
import csv
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch

from alf.config import examples_dir

GIN = "ppo_cart_pole.gin"
STEPS = 512  # 16 iterations of 2 envs x 16 steps
TINY = {
    "TrainerConfig.num_env_steps": str(STEPS),
    "TrainerConfig.num_envs": "2",
    "TrainerConfig.unroll_length": "16",
    "TrainerConfig.minibatch_size": "32",
    "TrainerConfig.num_epochs": "2",
    "TrainerConfig.num_eval_episodes": "2",
}
PREFIX = "alf.bin.train: error:"


def _cmd(root_dir, gin_file=GIN, **params):
    merged = dict(TINY)
    merged.update(params)
    cmd = [sys.executable, "-m", "alf.bin.train", "--gin_file", str(gin_file),
           "--root_dir", str(root_dir)]
    for name, value in merged.items():
        cmd += ["--gin_param", f"{name}={value}"]
    return cmd


def _env():
    env = dict(os.environ)
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_cli(root_dir, gin_file=GIN, cwd=None, extra=(), **params):
    """Runs the CLI to completion; ``params`` are gin bindings (name=value,
    with dots written as ``__``)."""
    params = {k.replace("__", "."): v for k, v in params.items()}
    cmd = _cmd(root_dir, gin_file, **params) + list(extra)
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd,
                          env=_env(), timeout=110)


def assert_one_line_error(res, *needles):
    """Non-zero exit, one stderr line with PREFIX naming ``needles``."""
    out = res.stdout + res.stderr
    assert res.returncode != 0, out
    assert "Traceback" not in out, out
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got:\n{res.stderr}"
    assert lines[0].startswith(PREFIX), lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def assert_nothing_written(root_dir):
    """No trace of a run: no checkpoints, config, eval log or summaries."""
    if not os.path.exists(root_dir):
        return
    for name in ("ckpt", "config.gin", "eval.csv", "train", "eval"):
        assert not os.path.exists(os.path.join(root_dir, name)), (
            f"{name} written in {root_dir} by a refused run: "
            f"{os.listdir(root_dir)}")


def snapshot(root_dir):
    """{relative path: bytes} of every file under ``root_dir``."""
    out = {}
    for dirpath, _, files in os.walk(root_dir):
        for f in files:
            p = os.path.join(dirpath, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root_dir)] = fh.read()
    return out


def read_eval_rows(root_dir):
    with open(os.path.join(root_dir, "eval.csv"), newline="") as f:
        return list(csv.DictReader(f))


# ---- bad input ----------------------------------------------------------------
@pytest.mark.timeout(120)
def test_missing_gin_file_lists_where_it_looked(tmp_path):
    root = tmp_path / "run"
    res = run_cli(root, gin_file="no_such_file.gin", cwd=tmp_path)
    line = assert_one_line_error(res, "no_such_file.gin")
    assert str(tmp_path) in line  # the current directory
    assert examples_dir() in line  # the packaged examples
    assert_nothing_written(root)


@pytest.mark.timeout(120)
def test_a_folder_as_gin_file_says_so(tmp_path):
    root = tmp_path / "run"
    res = run_cli(root, gin_file=examples_dir())
    line = assert_one_line_error(res, "is a folder; give a .gin file")
    assert os.path.join(examples_dir(), "custom_algorithm.gin") in line
    assert_nothing_written(root)


@pytest.mark.timeout(120)
def test_unknown_gin_binding(tmp_path):
    root = tmp_path / "run"
    res = run_cli(root, TrainerConfig__num_envz="3")
    assert_one_line_error(res, "num_envz")
    assert_nothing_written(root)


@pytest.mark.timeout(120)
def test_typo_in_configurable_name(tmp_path):
    root = tmp_path / "run"
    res = run_cli(root, TrainerConfg__num_envs="3")
    assert_one_line_error(res, "TrainerConfg")
    assert_nothing_written(root)


@pytest.fixture(scope="module")
def unknown_env_result(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad_env") / "run"
    res = run_cli(root, TrainerConfig__env_name='"CartPol-v1"')
    return root, res


@pytest.mark.timeout(120)
def test_unknown_environment_id(unknown_env_result):
    root, res = unknown_env_result
    out = res.stdout + res.stderr
    assert res.returncode != 0, out
    assert "Traceback" not in out, out
    first = res.stderr.strip().splitlines()[0]
    assert first.startswith(PREFIX), first
    assert "'CartPol-v1'" in first
    assert "CartPole-v1" in first.replace("'CartPol-v1'", "")  # suggestion
    assert_nothing_written(root)
    assert not root.exists()  # made for the run, removed with it


@pytest.mark.timeout(120)
def test_a_refused_run_keeps_a_folder_the_user_made(tmp_path):
    root = tmp_path / "run"
    root.mkdir()
    res = run_cli(root, TrainerConfig__env_name='"CartPol-v1"')
    assert res.returncode == 1
    assert root.is_dir() and not os.listdir(root)


@pytest.mark.timeout(120)
def test_unknown_environment_id_is_one_line(unknown_env_result):
    _, res = unknown_env_result
    assert_one_line_error(res, "CartPol-v1", "CartPole-v1")


@pytest.mark.timeout(120)
def test_invalid_trainer_config_value_is_one_line(tmp_path):
    root = tmp_path / "run"
    res = run_cli(root, TrainerConfig__num_envs="0")
    assert_one_line_error(res, "num_envs")
    assert_nothing_written(root)


@pytest.mark.timeout(120)
def test_invalid_algorithm_option_is_one_line(tmp_path):
    root = tmp_path / "run"
    res = run_cli(root, PPOAlgorithm__lr_schedule='"cosine"')
    assert_one_line_error(res, "cosine")
    assert_nothing_written(root)


@pytest.mark.timeout(120)
def test_unknown_device_is_one_line(tmp_path):
    root = tmp_path / "run"
    res = run_cli(root, TrainerConfig__device='"gpu"')
    assert_one_line_error(res, "TrainerConfig.device='gpu'", "'cuda:N'")
    assert not root.exists()


@pytest.mark.timeout(120)
def test_gpu_device_without_gpu_is_one_line(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    root = tmp_path / "run"
    res = run_cli(root, TrainerConfig__device='"cuda"')
    assert_one_line_error(res, "TrainerConfig.device='cuda'", "no GPU")
    assert not root.exists()


@pytest.mark.timeout(120)
def test_dqn_on_continuous_actions_is_one_line(tmp_path):
    root = tmp_path / "run"
    res = run_cli(root, "dqn_cart_pole.gin",
                  TrainerConfig__env_name='"Pendulum-v1"')
    assert_one_line_error(res, "Discrete action space", "Pendulum-v1",
                          "SACAlgorithm")
    assert_nothing_written(root)


@pytest.mark.timeout(120)
def test_root_dir_that_cannot_be_written(tmp_path):
    # A path under a regular file: not creatable even by root.
    afile = tmp_path / "afile"
    afile.write_text("not a folder\n")
    root = afile / "sub"
    res = run_cli(root)
    assert_one_line_error(res, str(root))
    assert afile.is_file() and afile.read_text() == "not a folder\n"
    assert sorted(os.listdir(tmp_path)) == ["afile"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("extra", [(), ("--distributed", "multi-process",
                                        "--num_processes", "2")])
def test_a_root_dir_another_training_holds_is_refused(tmp_path, extra):
    from alf.trainers.run_lock import RunLock
    root = tmp_path / "run"
    held = RunLock.acquire(str(root))  # another training, as far as it sees
    try:
        res = run_cli(root, extra=extra)
    finally:
        held.release()
    assert_one_line_error(res, str(root), "in use by another training",
                          f"pid {os.getpid()} on ")
    assert_nothing_written(root)


# ---- a good run -------------------------------------------------------------
@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A finished tiny run (do not modify: copy it with `copy_run`)."""
    root = tmp_path_factory.mktemp("finished") / "run"
    res = run_cli(root)
    return root, res


def copy_run(finished_run, tmp_path):
    root, res = finished_run
    assert res.returncode == 0, res.stderr
    dst = tmp_path / "run"
    shutil.copytree(root, dst)
    return dst


@pytest.mark.timeout(120)
def test_end_to_end_run_writes_everything(finished_run):
    root, res = finished_run
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Traceback" not in res.stderr

    config = (root / "config.gin").read_text()
    assert "TrainerConfig.num_env_steps = %d" % STEPS in config
    assert "PPOAlgorithm" in config

    header = (root / "eval.csv").read_text().splitlines()[0]
    assert header.startswith("env_steps,average_return,average_episode_length")
    rows = read_eval_rows(root)
    assert [int(float(r["env_steps"])) for r in rows] == [STEPS]
    assert float(rows[0]["average_episode_length"]) > 0

    for sub in ("train", "eval"):
        events = glob.glob(str(root / sub / "events.out.tfevents.*"))
        assert events, f"no TensorBoard events in {sub}/"

    ckpts = sorted(os.listdir(root / "ckpt"))
    # The one evaluation is the best so far: kept as best.pt too.
    assert ckpts == ["best.json", "best.pt", f"ckpt-{STEPS}.pt"]
    best = json.loads((root / "ckpt" / "best.json").read_text())
    assert best == {"env_steps": STEPS, "metric": "average_return",
                    "value": pytest.approx(float(rows[0]["average_return"]))}
    state = torch.load(root / "ckpt" / ckpts[-1], weights_only=True)
    assert state["counters"]["env_steps"] == STEPS
    assert state["counters"]["iteration"] == STEPS // 32


@pytest.mark.timeout(120)
def test_tensorboard_events_hold_scalars(finished_run):
    root, res = finished_run
    assert res.returncode == 0
    from tensorboard.backend.event_processing.event_accumulator import \
        EventAccumulator
    tags = {}
    for sub in ("train", "eval"):
        ea = EventAccumulator(str(root / sub))
        ea.Reload()
        tags[sub] = set(ea.Tags()["scalars"])
    assert "eval/average_return" in tags["eval"]
    assert "train/loss" in tags["train"]
    ea = EventAccumulator(str(root / "eval"))
    ea.Reload()
    assert [e.step for e in ea.Scalars("eval/average_return")] == [STEPS]


@pytest.fixture(scope="module")
def rerun_finished(finished_run, tmp_path_factory):
    root = copy_run(finished_run, tmp_path_factory.mktemp("rerun"))
    before = snapshot(root)
    res = run_cli(root)
    return root, res, before, snapshot(root)


@pytest.mark.timeout(120)
def test_rerun_of_finished_run_does_nothing(rerun_finished):
    root, res, before, after = rerun_finished
    assert res.returncode == 0, res.stderr
    assert "already finished" in res.stderr
    assert "Traceback" not in res.stderr
    for name in before:  # nothing changed
        assert after[name] == before[name], name
    assert sorted(os.listdir(root / "ckpt")) == [
        "best.json", "best.pt", f"ckpt-{STEPS}.pt"]


@pytest.mark.timeout(120)
def test_resume_with_larger_budget_continues_counters(finished_run, tmp_path):
    root = copy_run(finished_run, tmp_path)
    res = run_cli(root, TrainerConfig__num_env_steps=str(2 * STEPS))
    assert res.returncode == 0, res.stdout + res.stderr
    resumed = [ln for ln in res.stderr.splitlines() if "resumed from" in ln]
    assert len(resumed) == 1, res.stderr
    assert f"ckpt-{STEPS}.pt" in resumed[0]
    assert "iteration 16" in resumed[0] and f"{STEPS} env steps" in resumed[0]

    steps = [int(float(r["env_steps"])) for r in read_eval_rows(root)]
    # The old row, then eval_interval=20 (from the gin file) counted from the
    # restored iteration 16: iteration 20 = 640 steps, and the end.
    assert steps == [STEPS, 640, 2 * STEPS]
    assert f"ckpt-{2 * STEPS}.pt" in os.listdir(root / "ckpt")
    state = torch.load(root / "ckpt" / f"ckpt-{2 * STEPS}.pt",
                       weights_only=True)
    assert state["counters"] == {"iteration": 32, "env_steps": 2 * STEPS,
                                 "episodes": state["counters"]["episodes"]}
    # The first run's config is kept; the changed one is saved beside it.
    assert f"num_env_steps = {STEPS}" in (root / "config.gin").read_text()
    assert os.path.exists(root / f"config-resumed-{STEPS}.gin")


@pytest.fixture(scope="module")
def corrupt_run(finished_run, tmp_path_factory):
    root = copy_run(finished_run, tmp_path_factory.mktemp("corrupt"))
    newest = max(glob.glob(str(root / "ckpt" / "ckpt-*.pt")),
                 key=lambda p: int(p.rsplit("-", 1)[1][:-3]))
    garbage = b"\x00garbage, not a checkpoint\xff" * 16
    with open(newest, "wb") as f:
        f.write(garbage)
    before = snapshot(root)
    res = run_cli(root, TrainerConfig__num_env_steps=str(2 * STEPS))
    return root, res, newest, garbage, before, snapshot(root)


@pytest.mark.timeout(120)
def test_corrupt_checkpoint_is_refused(corrupt_run):
    root, res, newest, garbage, before, after = corrupt_run
    assert_one_line_error(res, newest)
    with open(newest, "rb") as f:
        assert f.read() == garbage  # left as it was
    # No checkpoint, eval row or config written by the refused run.
    assert sorted(os.listdir(root / "ckpt")) == [
        "best.json", "best.pt", os.path.basename(newest)]
    for name in ("eval.csv", "config.gin", "ckpt/best.pt"):
        assert after[name] == before[name]
    assert not glob.glob(str(root / "config-resumed-*"))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", ["rerun_finished", "corrupt_run"])
def test_refused_or_noop_run_creates_no_files(case, request):
    result = request.getfixturevalue(case)
    before, after = result[-2], result[-1]
    assert sorted(after) == sorted(before)


# ---- Ctrl-C -------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_ctrl_c_saves_checkpoint_and_resumes(tmp_path):
    root = tmp_path / "run"
    cmd = _cmd(root, **{"TrainerConfig.num_env_steps": "10000000",
                        "TrainerConfig.log_interval_seconds": "0.1",
                        "TrainerConfig.eval_interval": "0"})
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env())
    lines, started = [], threading.Event()

    def read(stream):
        for line in stream:
            lines.append(line)
            if "iter " in line or "eval at" in line:
                started.set()

    readers = [threading.Thread(target=read, args=(s, ), daemon=True)
               for s in (proc.stdout, proc.stderr)]
    for t in readers:
        t.start()
    try:
        assert started.wait(60), "no progress line:\n" + "".join(lines)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    for t in readers:
        t.join(5)
    out = "".join(lines)
    assert rc == 130, out
    assert "Traceback" not in out, out
    said = [ln for ln in lines if "stopped at" in ln]
    assert len(said) == 1, out
    assert "checkpoint" in said[0] and "resume" in said[0]
    ckpts = glob.glob(str(root / "ckpt" / "ckpt-*.pt"))
    assert ckpts, out
    newest = max(ckpts, key=lambda p: int(p.rsplit("-", 1)[1][:-3]))
    assert newest in said[0]
    counters = torch.load(newest, weights_only=True)["counters"]
    steps = counters["env_steps"]
    assert steps > 0
    # Stopped at an iteration boundary: the counters agree.
    assert steps == counters["iteration"] * 32

    # Same root_dir again (a budget two iterations beyond the checkpoint so
    # that the rerun ends quickly): it resumes from that checkpoint.
    res = run_cli(root, TrainerConfig__num_env_steps=str(steps + 64),
                  TrainerConfig__eval_interval="0")
    assert res.returncode == 0, res.stdout + res.stderr
    resumed = [ln for ln in res.stderr.splitlines() if "resumed from" in ln]
    assert len(resumed) == 1 and newest in resumed[0], res.stderr


@pytest.mark.timeout(120)
def test_num_processes_without_multi_process_is_one_line(tmp_path):
    res = run_cli(tmp_path / "run", extra=["--num_processes", "4"])
    assert_one_line_error(res, "--num_processes 4", "--distributed "
                          "multi-process", "--distributed none")
    assert not (tmp_path / "run").exists()
