"""benchmarks/calibration_replay.py on a real calibrating run: the replay
of the run's own calibration is its evaluations (the same candidates'
scores, the same choice, the same evaluation score), other episode counts
and other calibration environments are replayed beside it, and bad inputs
are one-line errors."""
import csv
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
pytestmark = pytest.mark.timeout(300)
SCRIPT = os.path.join(REPO, "benchmarks", "calibration_replay.py")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """PPO on Pendulum, calibrating a torque offset on 2 episodes of
    20-step Pendulums (the training environments' are 200 steps) before
    each of its 3 evaluations."""
    root = tmp_path_factory.mktemp("replay") / "run"
    res = subprocess.run(
        [sys.executable, "-m", "alf.bin.train", "--gin_file",
         "ppo_pendulum.gin", "--root_dir", str(root)]
        + [a for p in (
            "TrainerConfig.num_env_steps=3072",
            "TrainerConfig.num_envs=4", "TrainerConfig.unroll_length=256",
            "TrainerConfig.eval_interval=1", "TrainerConfig.num_epochs=2",
            "TrainerConfig.checkpoint_interval=1",
            "TrainerConfig.num_eval_episodes=2",
            "TrainerConfig.num_calibration_episodes=2",
            "TrainerConfig.calibrate_offsets={0: (-1.5, 1.5)}",
            "TrainerConfig.calibration_env_load_fn="
            "@calibration/suite_gym.load",
            "calibration/suite_gym.load.max_episode_steps=20")
           for a in ("--gin_param", p)],
        capture_output=True, text=True, timeout=200, cwd=REPO)
    assert res.returncode == 0, res.stderr[-3000:]
    return root


def _replay(root, *args):
    return subprocess.run([sys.executable, SCRIPT, "--root_dir", str(root),
                           *args], capture_output=True, text=True,
                          timeout=250, cwd=REPO)


def _table(out, step):
    """``{offsets: [values]}`` of checkpoint ``step``'s table."""
    block = out.split(f"checkpoint {step}:")[1].split("\n\n")[0]
    return {m.group(1): [float(v) for v in m.group(2).split(" | ")]
            for m in re.finditer(r"^\| (0=\S+) \| (.*) \|$", block, re.M)}


def test_the_replay_of_the_runs_calibration_is_its_evaluations(run):
    res = _replay(run, "--episodes", "2,3", "--last", "2", "--parallel", "2")
    assert res.returncode == 0, res.stderr[-3000:]
    out = res.stdout
    assert "note:" not in out  # same choices, same evaluation scores
    with open(run / "calibration.csv") as f:
        rows = list(csv.DictReader(f))
    with open(run / "eval.csv") as f:
        evals = {int(float(r["env_steps"])): r for r in csv.DictReader(f)}
    steps = sorted(evals)[-2:]
    for step in steps:
        table = _table(out, step)
        assert sorted(table) == ["0=+0", "0=+1.5", "0=-1.5"]
        for r in rows:
            if int(float(r["env_steps"])) != step:
                continue
            name = f"0={float(r['offset_0']):+.3g}"
            # columns: calibration (2), calibration (3), training
            assert table[name][0] == pytest.approx(
                float(r["average_return"]), abs=1e-3)
        # Three episodes are another mean than two (20-step episodes
        # of a random start each).
        assert any(v[0] != v[1] for v in table.values())
    summary = out.split("mean over the checkpoints")[1]
    line = next(ln for ln in summary.splitlines()
                if ln.startswith("| calibrated on 2 | training |"))
    for step, cell in zip(steps, line.split(" | ")[2:4]):
        name, score = cell.split(": ")
        assert name == f"0={float(evals[step]['offset_0']):+.3g}"
        assert float(score) == pytest.approx(
            float(evals[step]["average_return"]), abs=1e-3)
    assert "| calibrated on 3 | training |" in summary
    assert "| best on training (in-sample) | training |" in summary


def test_other_calibration_environments_are_replayed_beside_the_run(run):
    # 40-step calibration Pendulums instead of the run's 20: the
    # calibration column changes, the evaluations' episodes do not.
    res = _replay(run, "--last", "1", "--parallel", "2", "--gin_param",
                  "calibration/suite_gym.load.max_episode_steps=40")
    assert res.returncode == 0, res.stderr[-3000:]
    out = res.stdout
    assert "eval.csv is not compared" in out and "note:" not in out
    with open(run / "calibration.csv") as f:
        rows = list(csv.DictReader(f))
    with open(run / "eval.csv") as f:
        evals = {int(float(r["env_steps"])): r for r in csv.DictReader(f)}
    step = max(evals)
    table = _table(out, step)
    ran = {f"0={float(r['offset_0']):+.3g}": float(r["average_return"])
           for r in rows if int(float(r["env_steps"])) == step}
    assert sorted(table) == sorted(ran)
    # columns: calibration (2), training
    assert all(table[n][0] != pytest.approx(ran[n], abs=1e-3) for n in ran)
    chosen = f"0={float(evals[step]['offset_0']):+.3g}"
    assert table[chosen][1] == pytest.approx(
        float(evals[step]["average_return"]), abs=1e-3)


@pytest.mark.parametrize("args,message", [
    (["--checkpoints", "7"], r"no ckpt-7\.pt in"),
    (["--checkpoints", "x"], r"--checkpoints='x'; valid: evaluated"),
    (["--episodes", "0"], r"--episodes='0'; valid: positive"),
    (["--held_out"], r"--held_out: the run has no held-out"),
    (["--offsets", "1=a"], r"--offsets='1=a'; valid: D=X,Y"),
    (["--gin_param", "Nope.x=1"], r"No configurable matching 'Nope'"),
    (["--metric", "speed", "--last", "1", "--parallel", "2"],
     r"--metric/--report 'speed': the episodes report return, length"),
])
def test_bad_inputs_are_one_line_errors(run, args, message):
    res = _replay(run, *args)
    assert res.returncode == 1
    last = res.stderr.strip().splitlines()[-1]
    assert "Traceback" not in res.stderr, res.stderr
    assert re.search(message, last), res.stderr


def test_a_folder_that_is_no_run_is_a_one_line_error(tmp_path):
    res = _replay(tmp_path)
    assert res.returncode == 1
    assert "no config.gin there" in res.stderr


SPEED = os.path.join(REPO, "benchmarks", "calibration_speed.py")


def test_calibration_speed_times_both_ways_and_finds_them_alike(run):
    res = subprocess.run([sys.executable, SPEED, "--root_dir", str(run),
                          "--rounds", "2"], capture_output=True, text=True,
                         timeout=250, cwd=REPO)
    assert res.returncode == 0, res.stderr[-3000:]
    out = res.stdout
    assert "3 candidates x 2 episodes in 2 environments" in out
    assert out.count("every candidate scored alike both ways: yes") == 2
    for way in ("one after the other", "queued"):
        assert re.search(rf"^round 1 {way} *: +[\d.]+ s, +120 episode steps",
                         out, re.M), out
        assert re.search(rf"^{way} *: +[\d.]+ s in all", out, re.M), out


def test_calibration_speed_refuses_a_run_that_does_not_calibrate(run):
    res = subprocess.run([sys.executable, SPEED, "--root_dir", str(run),
                          "--gin_param",
                          "TrainerConfig.calibrate_offsets=None"],
                         capture_output=True, text=True, timeout=250,
                         cwd=REPO)
    assert res.returncode == 1
    assert res.stderr.strip().splitlines()[-1].endswith(
        "does not calibrate (TrainerConfig.calibrate_offsets=None)")
