"""The MetaDrive example configs build and train a few iterations (CLI, no
network), auxiliary phase included."""
import csv
import os
import subprocess
import sys

import pytest

pytest.importorskip("metadrive")

# One environment (one actor: each MetaDrive process costs ~10 s of CPU to
# start), two iterations.
TINY = {
    "TrainerConfig.num_envs": "1",
    "TrainerConfig.unroll_length": "32",
    "TrainerConfig.minibatch_size": "32",
    "TrainerConfig.num_epochs": "1",
    "TrainerConfig.num_env_steps": "64",
    "TrainerConfig.eval_interval": "0",
    "TrainerConfig.num_eval_episodes": "1",
    "PPGAlgorithm.aux_interval": "1",
    "PPGAlgorithm.aux_epochs": "1",
    "PPGAlgorithm.aux_minibatch_size": "32",
    "suite_metadrive.load.horizon": "40",
}


@pytest.mark.timeout(240)
@pytest.mark.parametrize("gin_file,async_eval", [
    # The config's own (asynchronous) collection; the evaluator process
    # builds MetaDrive's subprocess environments. (The learner's own
    # evaluation runs in the one below.)
    ("ppg_metadrive.gin", True),
    # Top-down rendering in actors. (In subprocess environments, as the
    # synchronous path has them: test_suite_metadrive's top-down test.)
    ("ppg_metadrive_bev.gin", False),
])
def test_config_trains_a_few_iterations(gin_file, async_eval, tmp_path):
    cmd = [sys.executable, "-m", "alf.bin.train", "--gin_file", gin_file,
           "--root_dir", str(tmp_path)]
    params = dict(TINY)
    if async_eval:
        params["TrainerConfig.async_eval"] = "True"
    for name, value in params.items():
        cmd += ["--gin_param", f"{name}={value}"]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    try:
        res = subprocess.run(cmd, capture_output=True, text=True,
                             timeout=220, env=env)
    except subprocess.TimeoutExpired as e:  # say where it hung
        pytest.fail(f"timed out; output:\n{e.stdout}\n{e.stderr}")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    # Training and held-out scenarios (ppg_metadrive_bev.gin includes
    # ppg_metadrive.gin's split) are evaluated side by side.
    for name in ("eval.csv", "eval_held_out.csv"):
        with open(tmp_path / name, newline="") as f:
            rows = list(csv.DictReader(f))
        assert [r["env_steps"] for r in rows] == ["64"]
        for column in ("success_rate", "route_completion", "crash_rate"):
            assert 0.0 <= float(rows[0][column]) <= 1.0, rows[0]
    assert os.listdir(tmp_path / "ckpt")
    # Every config includes ppg_metadrive.gin's calibrated deterministic
    # evaluation.
    with open(tmp_path / "calibration.csv", newline="") as f:
        offsets = sorted(float(r["offset_1"]) for r in csv.DictReader(f))
    assert offsets == [-0.5, -0.4, -0.3, -0.2, -0.1, 0.0]
    # The auxiliary phase ran (its summaries exist) at every iteration.
    from tensorboard.backend.event_processing.event_accumulator import \
        EventAccumulator
    acc = EventAccumulator(str(tmp_path / "train"))
    acc.Reload()
    assert len(acc.Scalars("train/aux/loss")) == 2


def test_the_1m_step_config_parses():
    """ppg_metadrive_deterministic.gin is ppg_metadrive.gin at 1M steps
    (its schedules and budget): what training the other two covers, its
    own bindings must still parse (training it too cost 45 s of CI)."""
    import gin

    from alf.trainers import TrainerConfig, parse_config
    parse_config(["ppg_metadrive_deterministic.gin"], [])
    try:
        assert TrainerConfig().num_env_steps == 1_000_000
    finally:
        gin.clear_config()
