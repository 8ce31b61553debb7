"""alf.bin.calibrate: the candidates it plays, the choice, the binding that
replays the chosen offset, the held-out check and one-line errors."""
import re
import subprocess
import sys

import pytest

from alf.bin import calibrate
from alf.utils.errors import ConfigError
from test_train_distributed import REPO

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def pendulum_run(tmp_path_factory):
    """A short PPO run on Pendulum (a Box action in [-2, 2]) whose
    evaluations also play a held-out copy of the environment."""
    root = tmp_path_factory.mktemp("calibrate") / "run"
    _train(root, "TrainerConfig.eval_interval=1",
           "TrainerConfig.held_out_env_load_fn=@held_out/suite_gym.load")
    return root


def _train(root, *gin_params) -> str:
    """Trains ppo_pendulum.gin for 2048 steps, two episodes an evaluation,
    with ``gin_params``; returns the log."""
    res = subprocess.run(
        [sys.executable, "-m", "alf.bin.train", "--gin_file",
         "ppo_pendulum.gin", "--root_dir", str(root),
         "--gin_param", "TrainerConfig.num_env_steps=2048",
         "--gin_param", "TrainerConfig.num_eval_episodes=2",
         *[a for p in gin_params for a in ("--gin_param", p)]],
        capture_output=True, text=True, timeout=200, cwd=REPO)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stderr


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "alf.bin.calibrate", *args],
        capture_output=True, text=True, timeout=200, cwd=REPO)


def test_offsets_parse_into_every_combination_with_zero():
    assert calibrate.parse_offsets(["1=-0.2,-0.1"]) == [
        {1: -0.2}, {1: -0.1}, {1: 0.0}]
    assert calibrate.parse_offsets(["0=0.5", "1=-0.1"]) == [
        {0: 0.0, 1: -0.1}, {0: 0.0, 1: 0.0}, {0: 0.5, 1: -0.1},
        {0: 0.5, 1: 0.0}]
    for bad in ("x=1", "1=", "1=a", "-1=0.2", "1=nan"):
        with pytest.raises(ConfigError, match="valid: D=X,Y"):
            calibrate.parse_offsets([bad])
    with pytest.raises(ConfigError, match="given twice"):
        calibrate.parse_offsets(["1=0.1", "1=0.2"])


def test_the_best_wins_and_a_tie_keeps_the_smaller_offset():
    results = [({1: -0.2}, {"m": 0.8}), ({1: 0.0}, {"m": 0.8}),
               ({1: -0.1}, {"m": 0.7})]
    assert calibrate.choose(results, "m")[0] == {1: 0.0}
    results.append(({1: -0.3}, {"m": 0.9}))
    assert calibrate.choose(results, "m")[0] == {1: -0.3}
    assert calibrate.binding({0: 0.0, 1: -0.3}) == (
        "PPOAlgorithm.deterministic_offset={0: 0.0, 1: -0.3}")


def test_calibration_plays_each_offset_and_its_binding_replays_it(
        pendulum_run):
    out = _cli("--root_dir", str(pendulum_run), "--checkpoint", "latest",
               "--offsets", "0=-2.0,1.0", "--num_episodes", "2",
               "--held_out")
    assert out.returncode == 0, out.stderr[-3000:]
    rows = {m.group(1): float(m.group(2)) for m in re.finditer(
        r"^\s*0=([-+.\d]+)\s+(-?[\d.]+)", out.stdout, re.M)}
    assert set(rows) == {"-2", "+0", "+1"}, out.stdout
    # An offset of -2 pushes every action to the box's edge: another
    # policy, another return (a calibration that ignored the binding
    # would print one number three times).
    assert len(set(rows.values())) == 3, out.stdout
    best = max(rows, key=rows.get)
    assert f"chosen: 0={best}\n" in out.stdout
    binding = re.search(r"--gin_param '([^']+)'", out.stdout).group(1)
    assert binding == f"PPOAlgorithm.deterministic_offset={{0: " \
        f"{float(best)}}}"
    play = subprocess.run(
        [sys.executable, "-m", "alf.bin.play", "--root_dir",
         str(pendulum_run), "--num_episodes", "2", "--gin_param", binding],
        capture_output=True, text=True, timeout=200, cwd=REPO)
    assert play.returncode == 0, play.stderr[-3000:]
    mean = [ln.split() for ln in play.stdout.splitlines()
            if ln.split()[:1] == ["mean"]][0]
    assert float(mean[1]) == pytest.approx(rows[best], abs=1e-3)
    assert re.search(r"held out: return -?[\d.]+ with it, -?[\d.]+ "
                     r"without", out.stdout), out.stdout
    header = next(ln for ln in out.stdout.splitlines()
                  if ln.split()[:1] == ["offsets"])
    assert header.split() == ["offsets", "return", "length"], header


def test_held_out_is_checked_before_any_candidate_is_played(pendulum_run):
    out = _cli("--root_dir", str(pendulum_run), "--checkpoint", "latest",
               "--offsets", "0=-2.0,1.0", "--num_episodes", "1",
               "--held_out", "--gin_param",
               "TrainerConfig.held_out_env_load_fn=None")
    assert out.returncode == 1, out.stdout
    assert out.stdout == "", out.stdout  # no candidate's row: none played
    assert re.fullmatch(r"alf\.bin\.calibrate: error: the run in \S+ has no "
                        r"held-out environments to play .*\n",
                        out.stderr), out.stderr


@pytest.mark.parametrize("args, message", [
    (["--offsets", "0=x"], "--offsets='0=x'; valid: D=X,Y"),
    (["--offsets", "0=0.5", "--metric", "success"],
     "--metric='success': the episodes report return, length"),
    (["--offsets", "3=0.5", "--offsets", "0=0.1"],
     "--offsets for dimension 3: the action has 1 (0..0)\n"),
    ([], "--offsets: give at least one"),
    # Pendulum's torque is in [-2, 2]: 1e9 held every action at a bound.
    (["--offsets", "0=0.5,1e9"],
     "--offsets: offset 1000000000.0 for dimension 0 is not within the "
     "width of its range [-2, 2] (a wider one holds every action at a "
     "bound); valid: |offset| <= 4\n"),
])
def test_bad_inputs_are_one_line_errors(pendulum_run, args, message):
    out = _cli("--root_dir", str(pendulum_run), "--num_episodes", "1",
               "--checkpoint", "latest", *args)
    assert out.returncode == 1, out.stdout
    assert out.stderr.strip().count("\n") == 0, out.stderr
    assert out.stderr.startswith("alf.bin.calibrate: error: " + message), \
        out.stderr
    assert out.stdout == ""  # refused before any candidate is played


def test_an_algorithm_without_the_offset_is_refused_before_play(
        pendulum_run):
    """SAC, DQN or a user's algorithm would play every candidate alike
    and "choose" 0 (the binding is PPO's): refused, nothing played."""
    out = _cli("--root_dir", str(pendulum_run), "--num_episodes", "1",
               "--checkpoint", "latest", "--offsets", "0=0.5", "--gin_param",
               "TrainerConfig.algorithm_ctor=@SACAlgorithm")
    assert out.returncode == 1 and out.stdout == "", out.stdout
    assert out.stderr == (
        f"alf.bin.calibrate: error: the run in {pendulum_run} trains "
        "SACAlgorithm, "
        "which has no deterministic offset "
        "(PPOAlgorithm.deterministic_offset is PPO's and PPG's)\n")


# A validation split: the same environment with episodes of 50 steps
# (which alf.bin.calibrate reproduces with an unscoped binding), played
# by an evaluator process while actors collect (neither may be sent a
# gin-scoped function: it does not pickle).
VALIDATION = ["TrainerConfig.calibration_env_load_fn=@validation/"
              "suite_gym.load", "validation/suite_gym.load."
              "max_episode_steps=50", "TrainerConfig.async_eval=True",
              "TrainerConfig.unroll_mode='async'"]


@pytest.mark.parametrize("split", ["training", "validation"])
def test_a_run_that_calibrates_as_it_goes_replays_its_last_choice(
        tmp_path, split):
    """``TrainerConfig.calibrate_offsets``: the checkpoint acts with the
    offset its evaluation chose (alf.bin.play replays the evaluation), and
    alf.bin.calibrate on it plays the run's last calibration again (a
    binding overrides the calibrated offset)."""
    import csv
    root = tmp_path / "run"
    extra = VALIDATION if split == "validation" else []
    log = _train(root, "TrainerConfig.eval_interval=0",
                 "TrainerConfig.calibrate_offsets={0: (-2.0, 1.0)}", *extra)
    assert "calibrated offset 0=" in log
    with open(root / "calibration.csv") as f:
        played = {float(r["offset_0"]): float(r["average_return"])
                  for r in csv.DictReader(f)}
    with open(root / "eval.csv") as f:
        last = list(csv.DictReader(f))[-1]
    chosen = float(last["offset_0"])
    assert played[chosen] == max(played.values())
    play = subprocess.run(
        [sys.executable, "-m", "alf.bin.play", "--root_dir", str(root),
         "--num_episodes", "2"],
        capture_output=True, text=True, timeout=200, cwd=REPO)
    assert play.returncode == 0, play.stderr[-3000:]
    mean = [ln.split() for ln in play.stdout.splitlines()
            if ln.split()[:1] == ["mean"]][0]
    assert float(mean[1]) == pytest.approx(
        float(last["average_return"]), abs=1e-3)
    short = (["--gin_param", "suite_gym.load.max_episode_steps=50"]
             if extra else [])
    out = _cli("--root_dir", str(root), "--checkpoint", "latest",
               "--offsets", "0=-2.0,1.0", "--num_episodes", "2", *short)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = {float(m.group(1)): float(m.group(2)) for m in re.finditer(
        r"^\s*0=([-+.\d]+)\s+(-?[\d.]+)", out.stdout, re.M)}
    assert rows == pytest.approx(played, abs=1e-3)


@pytest.mark.parametrize("sig_name", ["SIGTERM", "SIGHUP"])
def test_a_stop_signal_is_one_line_and_the_shells_code(pendulum_run,
                                                       sig_name):
    """It died on the signal, silently (exit -15), where play says it
    stopped."""
    import signal
    import time
    sig = getattr(signal, sig_name)
    proc = subprocess.Popen(
        [sys.executable, "-m", "alf.bin.calibrate", "--root_dir",
         str(pendulum_run), "--offsets",
         "0=" + ",".join(f"{x / 100:.2f}" for x in range(-40, 40)),
         "--num_episodes", "5"], cwd=REPO, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(8)  # importing torch, then playing candidates
        assert proc.poll() is None
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + sig, err
    assert err.strip().splitlines()[-1] == \
        f"alf.bin.calibrate: {sig_name}: stopped", err
