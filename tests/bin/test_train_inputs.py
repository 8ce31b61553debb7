"""Bad inputs through the training CLI (issue 11): each gives one stderr line
``alf.bin.train: error: ...`` naming the value, exit code 1, and nothing
written under --root_dir."""
import os
import re
import subprocess

import pytest

from test_train import (GIN, PREFIX, _cmd, _env, assert_nothing_written,
                        assert_one_line_error, run_cli)

SAC_TINY = {"TrainerConfig.num_env_steps": "200",
            "TrainerConfig.initial_collect_steps": "100",
            "TrainerConfig.minibatch_size": "32",
            "TrainerConfig.num_eval_episodes": "1",
            "SquashedGaussianActor.hidden_sizes": "(16,)",
            "CriticEnsemble.hidden_sizes": "(16,)"}
DQN_TINY = {"TrainerConfig.num_env_steps": "256",
            "TrainerConfig.initial_collect_steps": "128",
            "TrainerConfig.num_eval_episodes": "1"}


def assert_error_line(res, *needles):
    """For a run that failed after training started (absl's progress lines
    on stderr before it): exit 1, no traceback, and one line besides the
    log lines, the error, naming ``needles``."""
    assert res.returncode == 1, res.stderr
    assert "Traceback" not in res.stdout + res.stderr, res.stderr
    lines = [ln for ln in res.stderr.strip().splitlines()
             if not re.match(r"[IWEF]\d{4} \d\d:\d\d:\d\d", ln)]
    assert len(lines) == 1, f"expected one error line, got:\n{res.stderr}"
    assert lines[0].startswith(PREFIX), lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def _refused(tmp_path, gin_file, params, *needles):
    """Runs the CLI; asserts one line naming ``needles``, exit 1, nothing
    written."""
    root = tmp_path / "run"
    res = run_cli(root, gin_file, **{k.replace(".", "__"): v
                                     for k, v in params.items()})
    assert res.returncode == 1, res.stderr
    line = assert_one_line_error(res, *needles)
    assert_nothing_written(root)
    return line


@pytest.mark.timeout(120)
@pytest.mark.parametrize("gin_file,params,name", [
    ("sac_pendulum.gin", SAC_TINY, "SACAlgorithm"),
    ("dqn_cart_pole.gin", DQN_TINY, "DQNAlgorithm"),
    ("ppg_cart_pole.gin", {}, "PPGAlgorithm")])
def test_misspelled_algorithm_parameter(tmp_path, gin_file, params, name):
    params = dict(params, **{f"{name}.learning_rat": "3e-4"})
    line = _refused(tmp_path, gin_file, params, f"'{name}'",
                    "'learning_rat'", "learning_rate?")
    assert not (tmp_path / "run").exists(), line  # refused at parse time


@pytest.mark.timeout(120)
@pytest.mark.parametrize("value,mode", [("'abc'", "sync"), ("-1.0", "sync"),
                                        ("-1.0", "async")])
def test_bad_learning_rate(tmp_path, value, mode):
    # Asynchronous: every actor builds the algorithm too, and each one's
    # traceback was logged before the one line.
    _refused(tmp_path, "ppo_cart_pole.gin",
             {"PPOAlgorithm.learning_rate": value,
              "TrainerConfig.unroll_mode": f'"{mode}"'},
             f"PPOAlgorithm.learning_rate={value}", "positive float")


@pytest.mark.timeout(120)
def test_gin_import_of_missing_module(tmp_path):
    gin_file = tmp_path / "imports.gin"
    gin_file.write_text("include 'ppo_cart_pole.gin'\nimport no_such_module\n")
    _refused(tmp_path, gin_file, {}, "no_such_module", str(gin_file),
             "line 2")


@pytest.mark.timeout(120)
def test_undefined_gin_macro(tmp_path):
    _refused(tmp_path, "ppo_cart_pole.gin",
             {"TrainerConfig.num_envs": "%NUM_ENVS"}, "%NUM_ENVS",
             "TrainerConfig.num_envs")


@pytest.mark.timeout(120)
def test_run_with_gin_include_logs_no_error(tmp_path):
    res = run_cli(tmp_path / "run", "ppg_cart_pole.gin",
                  TrainerConfig__num_env_steps="64")
    assert res.returncode == 0, res.stderr
    assert "Path not found" not in res.stderr, res.stderr
    assert not [ln for ln in res.stderr.splitlines()
                if ln.startswith("E")], res.stderr


@pytest.mark.timeout(120)
def test_env_kwarg_gymnasium_rejects(tmp_path):
    _refused(tmp_path, "ppo_cart_pole.gin", {"load.env_kwargs": "{'foo': 1}"},
             "load.env_kwargs={'foo': 1}", "render_mode")


@pytest.mark.timeout(120)
def test_negative_max_episode_steps(tmp_path):
    _refused(tmp_path, "ppo_cart_pole.gin", {"load.max_episode_steps": "-5"},
             "load.max_episode_steps=-5", "positive integer")


@pytest.mark.timeout(120)
def test_checkpoint_with_wrong_structure(tmp_path):
    import torch
    root = tmp_path / "run"
    (root / "ckpt").mkdir(parents=True)
    torch.save({"a": 1}, root / "ckpt" / "ckpt-100.pt")
    res = run_cli(root)
    assert res.returncode == 1, res.stderr
    assert_one_line_error(res, "ckpt-100.pt", "no 'algorithm' in it")
    assert sorted(p.name for p in root.iterdir()) == ["ckpt"]
    assert [p.name for p in (root / "ckpt").iterdir()] == ["ckpt-100.pt"]


@pytest.mark.timeout(120)
def test_resume_with_other_network_shapes_names_the_tensor(tmp_path):
    root = tmp_path / "run"
    assert run_cli(root).returncode == 0
    before = sorted(str(p) for p in root.rglob("*"))
    res = run_cli(root, TrainerConfig__num_env_steps="1024",
                  ActorDistributionNetwork__hidden_sizes="(32, 32)")
    assert res.returncode == 1, res.stderr
    assert_one_line_error(res, "size mismatch for actor.",
                          "checkpoint [64, 4], this config [32, 4]")
    assert sorted(str(p) for p in root.rglob("*")) == before


def _run_on_full_disk(tmp_path, root, room, **params):
    """Runs the CLI with checkpoint writes failing after ``room`` bytes
    (tests/bin/full_disk.py, imported by the gin file)."""
    import os
    import subprocess

    from test_train import _cmd, _env
    gin_file = tmp_path / "full_disk.gin"
    gin_file.write_text("include 'ppo_cart_pole.gin'\nimport full_disk\n")
    env = _env()
    env["ALF_TEST_DISK_ROOM"] = str(room)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(os.path.abspath(__file__)),
         env.get("PYTHONPATH", "")])
    params = {k.replace("__", "."): v for k, v in params.items()}
    return subprocess.run(_cmd(root, gin_file, **params), capture_output=True,
                          text=True, env=env, timeout=110)


@pytest.mark.timeout(120)
def test_disk_full_at_first_checkpoint(tmp_path):
    root = tmp_path / "run"
    res = _run_on_full_disk(tmp_path, root, 4096)
    assert_error_line(res, "cannot write checkpoint",
                          str(root / "ckpt" / "ckpt-512.pt"),
                          "the disk is full", "bytes free")
    assert list((root / "ckpt").iterdir()) == []  # no .tmp left


@pytest.mark.timeout(120)
def test_disk_full_on_resume_leaves_older_checkpoint_untouched(tmp_path):
    root = tmp_path / "run"
    assert run_cli(root).returncode == 0
    old = root / "ckpt" / "ckpt-512.pt"
    before = old.read_bytes()
    res = _run_on_full_disk(tmp_path, root, 0,
                            TrainerConfig__num_env_steps="1024")
    assert_error_line(res, "ckpt-1024.pt", "the disk is full")
    assert sorted(p.name for p in (root / "ckpt").iterdir()) == [
        "best.json", "best.pt", "ckpt-512.pt"]
    assert old.read_bytes() == before


@pytest.mark.timeout(120)
def test_replay_capacity_larger_than_memory(tmp_path):
    # 42 TB: more than any machine the tests run on, refused before the
    # storage is allocated and before any file is written.
    _refused(tmp_path, "sac_pendulum.gin",
             dict(SAC_TINY, **{"TrainerConfig.replay_buffer_capacity":
                               "1000000000000"}),
             "TrainerConfig.replay_buffer_capacity=1000000000000",
             "needs 42000000000000 bytes", "are available")


@pytest.mark.timeout(120)
def test_minibatch_larger_than_the_batch(tmp_path):
    _refused(tmp_path, "ppo_cart_pole.gin",
             {"TrainerConfig.minibatch_size": "4096"},
             "TrainerConfig.minibatch_size=4096", "32 transitions",
             "use at most 32")


@pytest.mark.timeout(120)
def test_minibatch_larger_than_the_batch_with_2_processes(tmp_path):
    root = tmp_path / "run"
    res = run_cli(root, TrainerConfig__minibatch_size="4096",
                  extra=["--distributed", "multi-process",
                         "--num_processes", "2"])
    assert res.returncode == 1, res.stderr
    assert_one_line_error(res, "TrainerConfig.minibatch_size=4096",
                          "per process, 2048 of 16", "use at most 32")
    assert not root.exists()  # refused before any process was started


@pytest.mark.timeout(120)
@pytest.mark.parametrize("gin_file,param,value,needles", [
    ("ppo_cart_pole.gin", "ActorDistributionNetwork.activation", "'foo'",
     ("unknown activation 'foo'", "'relu'")),
    ("dqn_cart_pole.gin", "QNetwork.init", "'xavier'",
     ("unknown init 'xavier'", "'orthogonal'"))])
def test_bad_network_choice_is_one_line(tmp_path, gin_file, param, value,
                                        needles):
    # Raised inside the networks while the algorithm is built: a
    # ConfigError, so the CLI prints one line and not a traceback.
    params = dict(DQN_TINY) if gin_file.startswith("dqn") else {}
    _refused(tmp_path, gin_file, dict(params, **{param: value}), *needles)


@pytest.mark.timeout(120)
def test_segments_for_an_off_policy_algorithm_are_refused_before_writing(
        tmp_path):
    # The algorithm decides it, so it is known only once built: still
    # before config.gin or a summary is written.
    _refused(tmp_path, "dqn_cart_pole.gin", dict(DQN_TINY, **{
        "TrainerConfig.unroll_mode": '"async"',
        "TrainerConfig.segment_length": "8"}),
        "TrainerConfig.segment_length=8 is for on-policy algorithms; "
        "DQNAlgorithm")


@pytest.mark.timeout(120)
def test_an_environment_that_cannot_be_built_is_one_line(tmp_path):
    """It was gymnasium's traceback (LunarLander-v3 without Box2D), and the
    new root dir stayed behind, empty."""
    root = tmp_path / "run"
    here = os.path.dirname(os.path.abspath(__file__))  # the module's
    res = run_cli(root, "ppo_cart_pole.gin", cwd=here, extra=[
        "--gin_param", "import needs_extra_env", "--gin_param",
        'TrainerConfig.env_name="alf_test/NeedsExtra-v0"'])
    assert_one_line_error(
        res, "environment alf_test/NeedsExtra-v0 cannot be built: "
        "DependencyNotInstalled: Box2D is not installed")
    assert not root.exists()


@pytest.mark.timeout(120)
def test_a_stop_as_a_finished_run_exits_changes_nothing(tmp_path):
    """Before, a SIGTERM landing once main had restored the default
    handlers killed the finished run (exit -15), and one landing between
    the training's return and that, with the handlers before training
    back, said "SIGTERM before training started"."""
    import os
    import subprocess
    import sys
    here = os.path.dirname(__file__)
    res = subprocess.run(
        [sys.executable, os.path.join(here, "late_stop.py"), "--gin_file",
         "ppo_cart_pole.gin", "--root_dir", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=100)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.split() == ["main", "0", "survived"], res.stdout
    assert "before training" not in res.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("flags, said", [
    (["--distributed", "multi-process", "--num_processes", "4"],
     "--distributed multi-process --num_processes are the built-in "
     "launcher's; under torchrun (WORLD_SIZE=2) torchrun starts the "
     "processes"),
    (["--distributed", "multi-gpu"], "--distributed multi-gpu is the "),
    (["--num_processes", "4"], "--num_processes is the built-in "
     "launcher's"),
    (["--max_restarts", "2"], "under torchrun use torchrun --max-restarts")])
def test_the_launchers_flags_under_torchrun_are_refused(tmp_path, flags,
                                                        said):
    """They were ignored without a word: 2 processes trained where 4 were
    asked for."""
    root = tmp_path / "run"
    env = dict(_env(), RANK="0", WORLD_SIZE="2", LOCAL_RANK="0")
    res = subprocess.run(_cmd(root, GIN) + flags, capture_output=True,
                         text=True, env=env, timeout=110)
    assert_one_line_error(res, said)
    assert_nothing_written(root)


def test_train_refuses_a_broken_checkpoint_link_and_writes_nothing(tmp_path):
    """It used to look like a fresh run: eval.csv's rows went aside, it
    trained, and failed at its first checkpoint ("File exists")."""
    import os
    root = tmp_path / "run"
    root.mkdir()
    (root / "eval.csv").write_text("env_steps,average_return,"
                                   "average_episode_length\n512,9.5,9.5\n")
    os.symlink(tmp_path / "unmounted", root / "ckpt")
    before = sorted(os.listdir(root))
    line = assert_one_line_error(run_cli(root))
    assert line == (
        f"{PREFIX} {root}/ckpt is a link to {tmp_path}/unmounted, which does "
        "not exist (storage not mounted?): its checkpoints cannot be read; "
        "mount it, or remove the link to train afresh")
    assert sorted(os.listdir(root)) == before
    assert (root / "eval.csv").read_text().endswith("512,9.5,9.5\n")
