"""Tests of ``alf.bin.compare``: its tolerance and result names, the two
sides' settings and commands, reuse of finished runs, and the tool end to
end as a subprocess (the curves' analysis: test_curves.py)."""
import csv
import os
import subprocess
import sys

import pytest

from alf.bin import compare
from alf.utils.errors import AlfError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def test_tolerance_defaults_only_for_the_return():
    assert compare.tolerance("average_return", None) == 25.0
    assert compare.tolerance("route_completion", 0.05) == 0.05
    with pytest.raises(AlfError, match="--metric success_rate needs "
                       "--tol_abs"):
        compare.tolerance("success_rate", None)


def test_output_names_keep_each_judgement():
    assert compare.output_name("average_return", False) == "compare"
    assert compare.output_name("average_return", True) == \
        "compare-held_out"
    assert compare.output_name("route_completion", True) == \
        "compare-route_completion-held_out"


# ---- tolerance, names, files and commands ---------------------------------


def test_train_commands():
    jobs = compare.train_commands("/r", ["a.gin"], ["X.y=1"], 3, 2)
    assert list(jobs) == [("single", 0), ("ddp3", 0), ("single", 1),
                          ("ddp3", 1)]
    single, ddp = jobs[("single", 1)], jobs[("ddp3", 1)]
    assert single[1:3] == ["-m", "alf.bin.train"]
    assert "--distributed" not in single
    assert ddp[ddp.index("--distributed"):][:4] == [
        "--distributed", "multi-process", "--num_processes", "3"]
    assert single[single.index("--root_dir") + 1] == "/r/single/seed1"
    # The user's params are passed, the seed comes last so that it wins.
    assert single[-4:] == ["--gin_param", "X.y=1", "--gin_param",
                           "TrainerConfig.seed=1"]


# ---- two settings: sides, commands, names ------------------------------------
def test_make_sides_default_form_is_one_vs_n():
    Side = compare.Side
    assert compare.make_sides() == (Side("single", 1), Side("ddp2", 2))
    assert compare.make_sides(num_processes=4) == (Side("single", 1),
                                                   Side("ddp4", 4))
    # Process counts alone keep the single/ddp{N} names.
    assert compare.make_sides(a_processes=2, b_processes=4) == (
        Side("ddp2", 2), Side("ddp4", 4))
    assert compare.make_sides(a_name="one", b_name="two") == (
        Side("one", 1), Side("two", 2))


def test_make_sides_two_settings():
    a, b = compare.make_sides(["X.y=1"], ["X.y=2", "X.z=3"])
    assert a == compare.Side("a", 1, ("X.y=1",))
    assert b == compare.Side("b", 1, ("X.y=2", "X.z=3"))
    # Only B's bindings: A is the config as it is.
    a, b = compare.make_sides(b_params=["X.y=2"], b_processes=2,
                              a_name="base", b_name="y2")
    assert a == compare.Side("base", 1, ())
    assert b == compare.Side("y2", 2, ("X.y=2",))
    assert b.describe() == "2 processes; X.y=2"
    assert a.describe() == "1 process"


@pytest.mark.parametrize("name", ["x/y", "/abs", "", ".", "..", ".hidden",
                                  "a,b", "a b", "tab\there"])
def test_make_sides_refuses_names_that_cannot_be_folders(name):
    with pytest.raises(AlfError, match=r"^--a_name .* cannot name a folder"):
        compare.make_sides(["X.y=1"], a_name=name)
    with pytest.raises(AlfError, match=r"^--b_name .* cannot name a folder"):
        compare.make_sides(["X.y=1"], b_name=name)


def test_make_sides_refuses_equal_names_and_ambiguous_num_processes():
    with pytest.raises(AlfError, match="--a_name and --b_name are both "
                       "'same'"):
        compare.make_sides(["X.y=1"], ["X.y=2"], "same", "same")
    # Default names clash: the message names the flags the user passed,
    # never a --a_name or --b_name they did not, and what to pass.
    with pytest.raises(AlfError) as e:
        compare.make_sides(a_processes=2)
    assert str(e.value) == (
        "--a_processes 2 gives side A side B's default 2 processes and "
        "neither has bindings, so both would be named 'ddp2': set "
        "--b_processes to another count, or --a_param/--b_param to compare "
        "settings (or --a_name and --b_name to run the same setting twice)")
    with pytest.raises(AlfError, match=r"^--a_processes 3 and --b_processes "
                       "3 give both sides 3 processes and neither has "
                       "bindings, so both would be named 'ddp3'"):
        compare.make_sides(a_processes=3, b_processes=3)
    with pytest.raises(AlfError, match=r"^--a_processes 4 and "
                       "--num_processes 4 give both sides 4 processes"):
        compare.make_sides(a_processes=4, num_processes=4)
    # One name given, the other side's default: name the missing flag.
    with pytest.raises(AlfError, match=r"^--a_name 'b' is the other side's "
                       "default name too; pass --b_name as well, with "
                       "another name$"):
        compare.make_sides(["X.y=1"], a_name="b")
    for kwargs in ({"a_params": ["X.y=1"]}, {"b_processes": 3}):
        with pytest.raises(AlfError, match="--num_processes sets side B"):
            compare.make_sides(num_processes=4, **kwargs)


def test_train_commands_two_settings():
    sides = compare.make_sides(["P.a=1"], ["P.b=2"], "sync", "async",
                               b_processes=2)
    jobs = compare.train_commands("/r", ["c.gin"], ["X.y=1"], sides, 2)
    assert list(jobs) == [("sync", 0), ("async", 0), ("sync", 1),
                          ("async", 1)]
    a, b = jobs[("sync", 1)], jobs[("async", 1)]
    assert a[a.index("--root_dir") + 1] == "/r/sync/seed1"
    assert b[b.index("--root_dir") + 1] == "/r/async/seed1"
    assert "--distributed" not in a
    assert b[b.index("--distributed"):][:4] == [
        "--distributed", "multi-process", "--num_processes", "2"]
    # The side's bindings follow the common ones (so they win) and only the
    # seed comes after them.
    assert a[-6:] == ["--gin_param", "X.y=1", "--gin_param", "P.a=1",
                      "--gin_param", "TrainerConfig.seed=1"]
    assert b[-6:] == ["--gin_param", "X.y=1", "--gin_param", "P.b=2",
                      "--gin_param", "TrainerConfig.seed=1"]
    assert "P.b=2" not in a and "P.a=1" not in b
    # An int is the default pair.
    assert compare.train_commands("/r", ["c.gin"], [], 3, 1) == \
        compare.train_commands("/r", ["c.gin"], [], compare.make_sides(
            num_processes=3), 1)


def test_claim_folder_records_and_checks_settings(tmp_path):
    root = str(tmp_path)
    side = compare.Side("a", 1, ("X.y=1",))
    compare.claim_folder(root, side, ["/g/ppo.gin"], ["X.n=1"])
    with open(tmp_path / "a" / "side.json") as f:
        assert f.read() == ('{"processes": 1, "params": ["X.y=1"], '
                            '"gin_files": ["/g/ppo.gin"], "gin_params": '
                            '["X.n=1"]}\n')
    # The same settings: reused.
    compare.claim_folder(root, side, ["/g/ppo.gin"], ["X.n=1"])
    for other, gin_files, gin_params, differs in (
            (compare.Side("a", 1, ("X.y=2",)), ["/g/ppo.gin"], ["X.n=1"],
             "the side's bindings: ['X.y=1'] then, ['X.y=2'] now"),
            (compare.Side("a", 2, ("X.y=1",)), ["/g/ppo.gin"], ["X.n=1"],
             "processes per run: 1 then, 2 now"),
            (side, ["/g/dqn.gin"], ["X.n=1"],
             "--gin_file: ['/g/ppo.gin'] then, ['/g/dqn.gin'] now"),
            (side, ["/g/ppo.gin"], ["X.n=1", "X.lr=0.5"],
             "--gin_param: ['X.n=1'] then, ['X.n=1', 'X.lr=0.5'] now")):
        with pytest.raises(AlfError) as e:
            compare.claim_folder(root, other, gin_files, gin_params)
        assert str(e.value) == (
            f"{tmp_path / 'a'} holds runs of other settings ({differs}); use "
            "a new --root_dir, or the settings those runs were trained with")
    # Runs from before the record: adopted.
    os.makedirs(tmp_path / "single" / "seed0")
    compare.claim_folder(root, compare.Side("single"))
    assert os.path.exists(tmp_path / "single" / "side.json")
    with open(tmp_path / "a" / "side.json", "w") as f:
        f.write("{not json")
    with pytest.raises(AlfError, match=r"side.json cannot be read \({not "
                       r"json\), so the settings of the runs in .* are "
                       "unknown; use a new --root_dir$"):
        compare.claim_folder(root, side)


def test_claim_folder_checks_an_older_record_on_what_it_has(tmp_path):
    """A record from before the gin files and params were recorded: the
    side's settings are checked, the rest cannot be, and it is kept."""
    (tmp_path / "a").mkdir()
    old = '{"processes": 1, "params": ["X.y=1"]}\n'
    (tmp_path / "a" / "side.json").write_text(old)
    side = compare.Side("a", 1, ("X.y=1",))
    compare.claim_folder(str(tmp_path), side, ["/g/dqn.gin"], ["X.lr=0.5"])
    assert (tmp_path / "a" / "side.json").read_text() == old
    with pytest.raises(AlfError, match="the side's bindings: "):
        compare.claim_folder(str(tmp_path), compare.Side("a", 1, ("X.y=2",)))


def test_finished_runs_are_reused_without_starting(tmp_path, capsys):
    """A run with a checkpoint at its last env step and that step's
    evaluation is not started again (alf.bin.train would only say that it
    already finished); one short of it, without checkpoints, or without
    the final evaluation (stopped: alf.bin.train evaluates it), is."""
    ckpt = tmp_path / "a" / "seed0" / "ckpt"
    ckpt.mkdir(parents=True)
    run_dir = str(tmp_path / "a" / "seed0")
    assert not compare.finished(run_dir, 1024)
    (ckpt / "ckpt-768.pt").write_bytes(b"")
    (ckpt / "best.pt").write_bytes(b"")  # not a regular checkpoint
    assert not compare.finished(run_dir, 1024)
    (ckpt / "ckpt-1024.pt").write_bytes(b"")
    assert not compare.finished(run_dir, 1024)  # the final evaluation
    (tmp_path / "a" / "seed0" / "eval.csv").write_text(
        "env_steps,average_return\n768,5.0\n")
    assert not compare.finished(run_dir, 1024)
    with open(tmp_path / "a" / "seed0" / "eval.csv", "a") as f:
        f.write("1024,7.0\n")
    assert compare.finished(run_dir, 1024)
    assert not compare.finished(run_dir, 2048)  # a longer run resumes
    true = [sys.executable, "-c", "pass"]
    started = []
    compare.run_all({("a", 0): true, ("a", 1): true}, str(tmp_path), 1,
                    on_start=started.append,
                    done=lambda run: compare.finished(
                        str(tmp_path / run[0] / f"seed{run[1]}"), 1024))
    assert started == [("a", 1)]
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "a/seed0: reused"
    assert out[1].startswith("a/seed1: trained in "), out


def test_check_refusing_a_run_stops_before_the_next(tmp_path):
    """What ``check`` refuses (a misspelt --metric) is found after the first
    run, reused or trained, not after every run has trained."""
    true = [sys.executable, "-c", "pass"]
    started, checked = [], []

    def check(run):
        checked.append(run)
        raise AlfError(f"no such column in {run}")

    with pytest.raises(AlfError, match=r"no such column in \('a', 0\)"):
        compare.run_all({("a", 0): true, ("a", 1): true}, str(tmp_path), 1,
                        on_start=started.append, check=check)
    assert started == [("a", 0)] and checked == [("a", 0)]
    started.clear(), checked.clear()
    with pytest.raises(AlfError, match=r"no such column in \('a', 0\)"):
        compare.run_all({("a", 0): true, ("a", 1): true}, str(tmp_path), 1,
                        on_start=started.append, check=check,
                        done=lambda run: run == ("a", 0))
    assert started == [] and checked == [("a", 0)]


# ---- end to end ----------------------------------------------------------------
SHORT = ["TrainerConfig.num_env_steps=1024", "TrainerConfig.eval_interval=1",
         "TrainerConfig.num_eval_episodes=2"]  # 4 iterations of 8 x 32 steps


def _run_tool(root, params=SHORT, extra=("--num_processes", "2"),
              gin_file="ppo_cart_pole.gin", pythonpath=None):
    cmd = [sys.executable, "-m", "alf.bin.compare", "--gin_file", gin_file,
           "--seeds", "1", "--root_dir", str(root), *extra]
    for p in params:
        cmd += ["--gin_param", p]
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE")}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return subprocess.run(cmd, capture_output=True, text=True, timeout=150,
                          cwd=REPO, env=env)


@pytest.mark.timeout(300)
def test_end_to_end_short_cart_pole(tmp_path):
    res = _run_tool(tmp_path)
    assert res.returncode in (0, 3, 4), res.stdout + res.stderr
    with open(tmp_path / "compare.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    steps = {m: [int(r["env_steps"]) for r in rows if r["mode"] == m]
             for m in ("single", "ddp2")}
    assert steps == {"single": [256, 512, 768, 1024],
                     "ddp2": [256, 512, 768, 1024]}
    with open(tmp_path / "compare.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    verdict = [x for x in res.stdout.splitlines() if x.startswith("verdict:")]
    assert len(verdict) == 1 and "single" in verdict[0] and \
        "ddp2" in verdict[0], res.stdout
    outcome = verdict[0].split()[4]  # verdict: single and ddp2 <OUTCOME>
    assert compare.EXIT_CODES[outcome] == res.returncode, res.stdout
    for log in ("single/seed0.log", "ddp2/seed0.log"):
        assert os.path.getsize(tmp_path / log) > 0
    # Running again reuses both finished runs and gives the same figures.
    again = _run_tool(tmp_path)
    assert again.returncode == res.returncode, again.stdout + again.stderr
    assert again.stdout.count(": reused") == 2, again.stdout
    report = res.stdout.split("compare.png\n", 1)[1]  # table and verdict
    assert again.stdout.endswith(report) and "mode" in report
    # Another column of the same finished runs: nothing trains again.
    lengths = _run_tool(tmp_path, extra=(
        "--num_processes", "2", "--metric", "average_episode_length",
        "--tol_abs", "1000"))
    assert lengths.returncode == 0, lengths.stdout + lengths.stderr
    assert lengths.stdout.count(": reused") == 2, lengths.stdout
    assert "final average_episode_length: mean single " in lengths.stdout
    out = tmp_path / "compare-average_episode_length"
    assert f"wrote {out}.csv and compare-average_episode_length.png" in \
        lengths.stdout
    with open(f"{out}.csv", newline="") as f:
        header = f.readline().strip()
    assert header == "env_steps,mode,seed,average_episode_length"
    with open(tmp_path / "compare.csv", newline="") as f:  # still the return's
        assert f.readline().strip() == "env_steps,mode,seed,average_return"
    for extra, message in (
            # Refused before the runs are even looked at.
            (("--metric", "nope", "--tol_abs", "1"), "side single (1 "
             "process): --metric 'nope' is not what its evaluations write; "
             "valid: ['average_episode_length', 'average_return']"),
            (("--held_out",), "side single (1 process): --held_out compares "
             "eval_held_out.csv, which a run writes only with "
             "TrainerConfig.held_out_env_load_fn set")):
        bad = _run_tool(tmp_path, extra=("--num_processes", "2", *extra))
        assert bad.returncode == 1, bad.stdout + bad.stderr
        assert bad.stderr == f"alf.bin.compare: error: {message}\n"


FAILING_PPO = """import gin

from alf.algorithms.ppo_algorithm import PPOAlgorithm


@gin.configurable
class FailingPPO(PPOAlgorithm):
    def train_iter(self, progress):
        raise RuntimeError("injected failure in training")
"""


@pytest.mark.timeout(120)
def test_failed_run_names_run_and_log(tmp_path):
    # An algorithm that builds (so every check before the runs passes) but
    # fails once training.
    (tmp_path / "failing_ppo.py").write_text(FAILING_PPO)
    gin_file = tmp_path / "failing.gin"
    gin_file.write_text("include 'ppo_cart_pole.gin'\nimport failing_ppo\n"
                        "TrainerConfig.algorithm_ctor = @FailingPPO\n")
    root = tmp_path / "r"
    res = _run_tool(root, gin_file=str(gin_file), pythonpath=str(tmp_path))
    assert res.returncode == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    log = str(root / "single" / "seed0.log")
    # A crash (no one-line error of train.py's to quote): the log tells.
    assert lines[0] == ("alf.bin.compare: error: run single/seed0 failed "
                        f"(exit code 1); log: {log}"), lines[0]
    with open(log) as f:
        assert "RuntimeError: injected failure in training" in f.read()
    assert not os.path.exists(root / "ddp2")  # stopped at the first


def test_check_sides_builds_each_sides_algorithm():
    """What the algorithm's constructor refuses (a learning rate of 0) or
    an environment that cannot be built is found for either side before
    any run, not when that side's first run starts."""
    a, b = compare.make_sides(b_params=["PPOAlgorithm.learning_rate=0.0"],
                              b_name="lr0")
    with pytest.raises(AlfError) as e:
        compare.check_sides(["ppo_cart_pole.gin"], SHORT, (a, b))
    assert str(e.value) == (
        "side lr0 (1 process; PPOAlgorithm.learning_rate=0.0): "
        "PPOAlgorithm.learning_rate=0.0; it must be a positive float, e.g. "
        "3e-4")
    with pytest.raises(AlfError, match=r"^side a \(1 process; "
                       r"TrainerConfig.env_name='NoSuch-v0'\): .*NoSuch-v0"):
        compare.check_sides(["ppo_cart_pole.gin"], SHORT, compare.make_sides(
            ["TrainerConfig.env_name='NoSuch-v0'"]))
    # A calibration the algorithm cannot do: the trainer's own check.
    with pytest.raises(AlfError, match=r"^side b .*calibrate_offsets"):
        compare.check_sides(["dqn_cart_pole.gin"], [], compare.make_sides(
            b_params=["TrainerConfig.calibrate_offsets={0: (0.1,)}"]))
    assert compare.check_sides(["ppo_cart_pole.gin"], SHORT, (a, compare.Side(
        "lr", 1, ("PPOAlgorithm.learning_rate=1e-3",)))) == {"a": 1024,
                                                              "lr": 1024}


def test_held_out_without_a_held_out_environment_is_refused_first():
    """It was said only after side A's first run had trained."""
    with pytest.raises(AlfError) as e:
        compare.check_sides(["ppo_cart_pole.gin"], SHORT,
                            compare.make_sides(), held_out=True)
    assert str(e.value) == (
        "side single (1 process): --held_out compares eval_held_out.csv, "
        "which a run writes only with TrainerConfig.held_out_env_load_fn "
        "set")
    assert compare.check_sides(["ppo_cart_pole.gin"], SHORT + [
        "TrainerConfig.held_out_env_load_fn = @held_out/suite_gym.load"],
        compare.make_sides(), held_out=True) == {"single": 1024, "ddp2": 1024}


def test_a_metric_no_evaluation_writes_is_refused_first():
    """It was said only after side A's first run had trained."""
    with pytest.raises(AlfError) as e:
        compare.check_sides(["ppo_cart_pole.gin"], SHORT,
                            compare.make_sides(), metric="bogus")
    assert str(e.value) == (
        "side single (1 process): --metric 'bogus' is not what its "
        "evaluations write; valid: ['average_episode_length', "
        "'average_return']")
    for metric in ("average_episode_length", "offset_0"):
        compare.check_sides(["ppo_cart_pole.gin"], SHORT,
                            compare.make_sides(), metric=metric)


@pytest.mark.timeout(120)
def test_bad_b_binding_is_refused_before_side_a_trains(tmp_path):
    res = _run_tool(tmp_path / "r", extra=[
        "--b_param", "PPOAlgorithm.learning_rate=0.0", "--b_name", "lr0"])
    assert res.returncode == 1, res.stdout + res.stderr
    assert res.stderr == (
        "alf.bin.compare: error: side lr0 (1 process; PPOAlgorithm."
        "learning_rate=0.0): PPOAlgorithm.learning_rate=0.0; it must be a "
        "positive float, e.g. 3e-4\n")
    assert res.stdout == "" and not os.path.exists(tmp_path / "r")


@pytest.mark.timeout(120)
def test_end_to_end_two_settings(tmp_path):
    sides = ["--a_param", "TrainerConfig.minibatch_size=128",
             "--b_param", "PPOAlgorithm.learning_rate=3e-4"]
    res = _run_tool(tmp_path, extra=sides)
    assert res.returncode in (0, 3, 4), res.stdout + res.stderr
    assert res.stdout.startswith(
        "side A, a: 1 process; TrainerConfig.minibatch_size=128\n"
        "side B, b: 1 process; PPOAlgorithm.learning_rate=3e-4\n")
    with open(tmp_path / "compare.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["mode"] for r in rows] == ["a"] * 4 + ["b"] * 4
    assert "ppo_cart_pole.gin, a vs b, 1 seed(s): 4 evaluation steps" in \
        res.stdout
    assert "\nverdict: a and b " in res.stdout
    assert "warning" not in res.stderr, res.stderr  # their configs differ
    # Each side's runs got its bindings, in one process.
    for side, param in (("a", "minibatch_size=128"),
                        ("b", "learning_rate=3e-4")):
        with open(tmp_path / side / "seed0.log") as f:
            command = f.readline()
        assert param in command and "--distributed" not in command
        assert ("minibatch_size=128" in command) == (side == "a")
    # (Reruns reuse finished runs: test_end_to_end_short_cart_pole.) The
    # same names with other bindings: refused before anything trains.
    other = _run_tool(tmp_path, extra=[
        "--a_param", "TrainerConfig.minibatch_size=64", *sides[2:]])
    assert other.returncode == 1
    assert other.stderr.count("\n") == 1 and other.stderr.startswith(
        f"alf.bin.compare: error: {tmp_path / 'a'} holds runs of other "
        "settings"), other.stderr
    assert "reused" not in other.stdout and "trained" not in other.stdout


def test_same_config_warning_only_for_alike_configs(tmp_path):
    a = compare.Side("a", 1, ("DQNAlgorithm.learning_rate=3e-4",))
    b = compare.Side("b", 1)
    assert compare.same_config_warning(str(tmp_path), a, b, 0) is None
    for name, text in (("a", "X.y = 1\n"), ("b", "X.y = 1\n")):
        (tmp_path / name / "seed0").mkdir(parents=True)
        (tmp_path / name / "seed0" / "config.gin").write_text(text)
    said = compare.same_config_warning(str(tmp_path), a, b, 0)
    assert said == (
        f"warning: {tmp_path / 'a/seed0/config.gin'} and "
        f"{tmp_path / 'b/seed0/config.gin'} are the same: sides a and b "
        "trained one config, so DQNAlgorithm.learning_rate=3e-4 changed "
        "nothing the learner used (a binding of a configurable that this "
        "config never calls?)")
    # As many processes only: 1 vs 2 processes are different runs.
    assert compare.same_config_warning(
        str(tmp_path), a, compare.Side("b", 2), 0) is None
    (tmp_path / "b" / "seed0" / "config.gin").write_text("X.y = 2\n")
    assert compare.same_config_warning(str(tmp_path), a, b, 0) is None


@pytest.mark.timeout(300)
def test_a_binding_the_config_never_calls_is_named(tmp_path):
    # PPO's config builds no DQNAlgorithm: both sides train the same thing.
    res = _run_tool(tmp_path, extra=[
        "--b_param", "DQNAlgorithm.learning_rate=3e-4"])
    assert res.returncode in (0, 3, 4), res.stdout + res.stderr
    warnings = [x for x in res.stderr.splitlines() if "warning" in x]
    assert len(warnings) == 1 and warnings[0].startswith(
        f"warning: {tmp_path / 'a/seed0/config.gin'} and "), res.stderr
    assert "DQNAlgorithm.learning_rate=3e-4 changed nothing" in warnings[0]


@pytest.mark.timeout(120)
def test_malformed_b_param_is_refused_before_any_run(tmp_path):
    res = _run_tool(tmp_path, extra=[
        "--a_param", "TrainerConfig.minibatch_size=128",
        "--b_param", "TrainerConfig.minibatch_size 128"])  # no '='
    assert res.returncode == 1, res.stdout + res.stderr
    assert res.stderr.count("\n") == 1 and res.stderr.startswith(
        "alf.bin.compare: error: side b (1 process; TrainerConfig."
        "minibatch_size 128): bad gin configuration: "), res.stderr
    assert "--gin_param 'TrainerConfig.minibatch_size 128'" in res.stderr
    assert res.stdout == "" and not os.path.exists(tmp_path / "a")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("extra,side", [
    (["--num_processes", "2"], "ddp2 (2 processes)"),
    (["--a_processes", "2", "--b_param", "TrainerConfig.num_eval_episodes=3"],
     "a (2 processes)")])
def test_sizes_that_do_not_divide_are_refused_before_any_run(tmp_path, extra,
                                                             side):
    root = tmp_path / "r"
    # A minibatch that one process's 3 x 32 transitions hold: otherwise
    # the single side's algorithm refuses them first.
    res = _run_tool(root, SHORT + ["TrainerConfig.num_envs=3",
                                   "TrainerConfig.minibatch_size=96"],
                    extra=extra)
    assert res.returncode == 1, res.stdout + res.stderr
    assert res.stderr.count("\n") == 1 and res.stderr.startswith(
        f"alf.bin.compare: error: side {side}: TrainerConfig.num_envs=3 "
        "does not divide among 2 processes"), res.stderr
    assert not os.path.exists(root)  # nothing trained, nothing written


@pytest.mark.timeout(60)
@pytest.mark.parametrize("args, message", [
    (["--a_param", "X.y=1", "--a_name", "x", "--b_name", "x"],
     "--a_name and --b_name are both 'x'; "),
    (["--a_param", "X.y=1", "--b_name", "runs/b"], "--b_name 'runs/b' "),
    (["--a_param", "X.y=1", "--num_processes", "3"],
     "--num_processes sets side B "),
    (["--metric", "route_completion"], "--metric route_completion needs "
     "--tol_abs in its own units (e.g. 0.05 for a rate); the default 25 is "
     "for average_return"),
    (["--tol_abs=-1"], "--tol_abs=-1; it must be 0 or more\n"),
    (["--tol_rel=-0.1"], "--tol_rel=-0.1; it must be 0 or more\n"),
    # Each run's own seed, appended last, would override it unseen.
    (["--b_param", "TrainerConfig.seed=7"], "--b_param TrainerConfig.seed=7: "
     "compare sets each run's TrainerConfig.seed (0 to --seeds - 1); drop "
     "it\n"),
    (["--gin_param", " TrainerConfig.seed = 7"], "--gin_param  "
     "TrainerConfig.seed = 7: compare sets"),
])
def test_bad_sides_are_one_line_errors(tmp_path, args, message):
    res = _run_tool(tmp_path / "r", extra=args)
    assert res.returncode == 1
    assert res.stderr.count("\n") == 1 and res.stderr.startswith(
        "alf.bin.compare: error: " + message), res.stderr
    assert not os.path.exists(tmp_path / "r")  # refused before any run


@pytest.mark.parametrize("name", ["config.gin", "ckpt", "eval.csv"])
def test_a_training_runs_folder_is_refused(tmp_path, name):
    """Before, the comparison's a/, b/ and results were written among the
    training run's files (docs/tools.md used runs/md for both)."""
    root = tmp_path / "md"
    root.mkdir()
    if name == "ckpt":
        (root / name).mkdir()
    else:
        (root / name).write_text("")
    res = _run_tool(root)
    assert res.returncode == 1
    assert res.stderr == (
        f"alf.bin.compare: error: --root_dir {root} is a training run's "
        f"folder (it has {name}); a comparison writes its runs and results "
        "into its own: choose another folder\n"), res.stderr
    assert sorted(os.listdir(root)) == [name]


def test_the_missing_flag_is_named(tmp_path):
    res = subprocess.run([sys.executable, "-m", "alf.bin.compare",
                          "--gin_file", "ppo_cart_pole.gin"],
                         capture_output=True, text=True, timeout=60,
                         cwd=REPO)
    assert res.returncode == 1
    assert res.stderr.startswith("alf.bin.compare: error: --root_dir is "
                                 "required, e.g. "), res.stderr


# ---- reuse, checked: finished runs made by hand (nothing trains) ------------
def _finished_runs(root, seeds=2, last_row="1024,20.0,20.0\n"):
    """single/seed{s} and ddp2/seed{s}, each finished at 1024 env steps
    (SHORT's length) with an eval.csv ending in ``last_row``."""
    for side in ("single", "ddp2"):
        for seed in range(seeds):
            run = root / side / f"seed{seed}"
            (run / "ckpt").mkdir(parents=True)
            (run / "ckpt" / "ckpt-1024.pt").write_bytes(b"")
            (run / "eval.csv").write_text(
                "env_steps,average_return,average_episode_length\n"
                f"256,10.0,10.0\n512,{12 + seed}.0,12.0\n768,15.0,15.0\n"
                + last_row)


@pytest.mark.timeout(300)
def test_reuse_only_runs_of_the_same_experiment(tmp_path):
    _finished_runs(tmp_path)
    first = _run_tool(tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    assert first.stdout.count(": reused") == 2, first.stdout
    # What needs no training, or only more seeds: reused.
    for extra in (("--seeds", "2"), ("--metric", "average_episode_length",
                                     "--tol_abs", "5", "--tol_rel", "0")):
        res = _run_tool(tmp_path, extra=("--num_processes", "2", *extra))
        assert res.returncode == 0, res.stdout + res.stderr
        assert "trained" not in res.stdout, res.stdout
    assert res.stderr == ""
    # Another experiment in the same folders: refused, naming what differs.
    examples = os.path.join(REPO, "alf", "examples")
    for kwargs, differs in (
            ({"gin_file": "dqn_cart_pole.gin"},
             f"--gin_file: ['{examples}/ppo_cart_pole.gin'] then, "
             f"['{examples}/dqn_cart_pole.gin'] now"),
            ({"params": SHORT + ["PPOAlgorithm.learning_rate=0.5"]},
             f"--gin_param: {SHORT} then, "
             f"{SHORT + ['PPOAlgorithm.learning_rate=0.5']} now"),
            ({"params": ["TrainerConfig.num_env_steps=2048", *SHORT[1:]]},
             f"--gin_param: {SHORT} then, "
             f"{['TrainerConfig.num_env_steps=2048', *SHORT[1:]]} now")):
        res = _run_tool(tmp_path, **kwargs)
        assert res.returncode == 1, res.stdout + res.stderr
        assert res.stderr == (
            f"alf.bin.compare: error: {tmp_path / 'single'} holds runs of "
            f"other settings ({differs}); use a new --root_dir, or the "
            "settings those runs were trained with\n")
        assert "reused" not in res.stdout


def _runs_with_finals(root, finals):
    """Finished runs made by hand: side -> one final return per seed (the
    last 3 evaluations at that value)."""
    for side, values in finals.items():
        for seed, v in enumerate(values):
            run = root / side / f"seed{seed}"
            (run / "ckpt").mkdir(parents=True)
            (run / "ckpt" / "ckpt-1024.pt").write_bytes(b"")
            (run / "eval.csv").write_text(
                "env_steps,average_return,average_episode_length\n"
                + "".join(f"{s},{v},10.0\n" for s in (256, 512, 768, 1024)))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("finals, code, outcome", [
    # Within tolerance, though significant (p = 0.008): AGREE.
    ({"single": [500, 500, 500], "ddp2": [499.0, 499.2, 498.9]}, 0,
     "AGREE (both figures within tolerance)"),
    # 2 seeds, far apart but not significant: more seeds needed.
    ({"single": [480, 452], "ddp2": [220, -34.1]}, 4,
     "INCONCLUSIVE (more seeds needed for final return and normalized "
     "AUC)"),
    ({"single": [480, 452], "ddp2": [20, 34.1]}, 3,
     "DISAGREE (final return and normalized AUC beyond tolerance)"),
])
def test_exit_code_says_the_outcome(tmp_path, finals, code, outcome):
    _runs_with_finals(tmp_path, finals)
    res = _run_tool(tmp_path, extra=("--num_processes", "2", "--seeds",
                                     str(len(finals["single"]))))
    assert res.returncode == code, res.stdout + res.stderr
    assert res.stdout.endswith(f"\nverdict: single and ddp2 {outcome}\n"), \
        res.stdout
    assert "trained" not in res.stdout


@pytest.mark.timeout(120)
def test_a_value_that_is_not_a_number_is_named(tmp_path):
    _finished_runs(tmp_path, seeds=1, last_row="1024,nan,20.0\n")
    res = _run_tool(tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    assert res.stderr == (
        "alf.bin.compare: error: run single/seed0: average_return in "
        "eval.csv is not a number (nan at env step 1024); such a run cannot "
        "be compared (did its training diverge?)\n")
    assert "verdict" not in res.stdout


@pytest.mark.timeout(120)
def test_rows_a_crash_cut_short_are_skipped_and_named(tmp_path):
    _finished_runs(tmp_path, seeds=1, last_row="1024,20.0,20.0\n1280,12")
    res = _run_tool(tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    lines = res.stderr.splitlines()
    assert lines == [
        f"alf.bin.compare: warning: skipped 1 incomplete or non-numeric row "
        f"of {tmp_path / side / 'seed0' / 'eval.csv'} (env_steps 1280)"
        for side in ("single", "ddp2")], res.stderr
    assert "4 evaluation steps, 256 to 1024 env steps" in res.stdout


@pytest.mark.timeout(120)
@pytest.mark.parametrize("where, message", [
    ("afile", "is a file, not a folder"),
    ("afile/runs", "is not writable (Not a directory)"),
])
def test_root_dir_that_cannot_be_a_folder_is_one_line(tmp_path, where,
                                                      message):
    (tmp_path / "afile").write_text("mine")
    res = _run_tool(tmp_path / where)
    assert res.returncode == 1, res.stdout + res.stderr
    assert res.stderr == (f"alf.bin.compare: error: --root_dir "
                          f"{tmp_path / where} {message}; choose a folder "
                          "you can write to\n")
    assert (tmp_path / "afile").read_text() == "mine"


@pytest.mark.timeout(200)
def test_sigterm_stops_the_runs_and_says_so(tmp_path):
    """Before, a scheduler's SIGTERM ended compare silently (exit -15)."""
    import signal
    import time

    from cli_harness import Run, assert_no_process_left
    cmd = [sys.executable, "-m", "alf.bin.compare", "--gin_file",
           "ppo_cart_pole.gin", "--seeds", "1", "--root_dir",
           str(tmp_path), "--num_processes", "2", "--gin_param",
           "TrainerConfig.num_env_steps=10000000"]
    run = Run(cmd, marker="2 runs", cwd=REPO)
    run.wait_started()
    log = tmp_path / "single" / "seed0.log"
    deadline = time.time() + 120
    while time.time() < deadline and "iter " not in (
            log.read_text() if log.exists() else ""):
        time.sleep(0.2)
    run.proc.send_signal(signal.SIGTERM)
    assert run.finish(timeout=120) == 143, run.out[-3000:]
    assert "alf.bin.compare: interrupted; rerun to resume" in run.out
    assert "SIGINT: stopped at" in log.read_text()  # the run checkpointed
    assert_no_process_left(run.proc.pid)
