"""alf.bin.report: a run's evaluations and rollout summaries as one table."""
import math
import os
import subprocess
import sys

import pytest

from alf.bin import report
from alf.utils.errors import AlfError

STEPS = [1000, 3000, 5000]


def _write_csv(path, rows):
    with open(path, "w") as f:
        f.write("env_steps,average_return,route_completion\n")
        f.writelines(f"{s},{r},{c}\n" for s, r, c in rows)


def _write_events(run_dir, scalars):
    """One event file under run_dir/train with ``scalars``: tag ->
    [(step, value)]."""
    from torch.utils.tensorboard import SummaryWriter
    writer = SummaryWriter(os.path.join(run_dir, "train"))
    for tag, points in scalars.items():
        for step, value in points:
            writer.add_scalar(tag, value, step)
    writer.close()


def _run(tmp_path, deterministic="True", held_out=True):
    run = tmp_path / "run"
    run.mkdir(parents=True)
    _write_csv(run / "eval.csv", [(1000, 1.0, 0.1), (3000, 2.0, 0.3),
                                  (5000, 3.0, 0.5)])
    if held_out:  # its 3000-step evaluation is missing
        _write_csv(run / "eval_held_out.csv", [(1000, 0.5, 0.2),
                                               (5000, 1.5, 0.6)])
    (run / "config.gin").write_text(
        f"TrainerConfig.eval_deterministic = {deterministic}\n")
    return str(run)


def test_rows_put_splits_side_by_side_on_the_training_steps(tmp_path):
    run = _run(tmp_path)
    steps, rows = report.report_rows(run, ["route_completion"])
    assert steps == STEPS
    (split_a, metric, train, _), (split_b, _, held, _) = rows
    assert (split_a, split_b) == ("training (deterministic)",
                                  "held out (deterministic)")
    assert metric == "route_completion"
    assert train == pytest.approx([0.1, 0.3, 0.5])
    assert held[0] == pytest.approx(0.2) and math.isnan(held[1])
    assert held[2] == pytest.approx(0.6)
    # A metric given twice is one row per split, not two.
    assert len(report.report_rows(run, ["route_completion",
                                        "route_completion"])[1]) == 2


def test_default_metrics_are_every_column_and_policy_is_named(tmp_path):
    steps, rows = report.report_rows(_run(tmp_path, "False", held_out=False))
    assert [(r.split, r.metric) for r in rows] == [
        ("training (sampling)", "average_return"),
        ("training (sampling)", "route_completion")]


def test_a_calibrating_run_is_named_so(tmp_path):
    run = _run(tmp_path)
    with open(os.path.join(run, "config.gin"), "a") as f:
        f.write("TrainerConfig.calibrate_offsets = {1: (-0.2, -0.1)}\n")
    _, rows = report.report_rows(run, ["route_completion"])
    assert rows[0].split == "training (deterministic, calibrated)"


def _write_calibration(run, rows):
    with open(os.path.join(run, "calibration.csv"), "w") as f:
        f.write("env_steps,average_return,chosen,offset_1,route_completion\n")
        f.writelines(f"{s},{r},{c},{o},{rc}\n" for s, r, c, o, rc in rows)


def test_calibration_rows_are_each_candidates_scores(tmp_path):
    run = _run(tmp_path)
    _write_calibration(run, [
        (1000, 1.0, 1, 0.0, 0.4), (1000, 0.5, 0, -0.2, 0.3),
        # -0.2 was not played at 3000; 5000 was calibrated twice (resumed).
        (3000, 2.0, 1, 0.0, 0.6),
        (5000, 0.1, 0, 0.0, 0.1), (5000, 0.2, 1, -0.2, 0.2),
        (5000, 3.0, 0, 0.0, 0.7), (5000, 4.0, 1, -0.2, 0.8)])
    with open(os.path.join(run, "eval.csv"), "w") as f:
        f.write("env_steps,route_completion,offset_1\n"
                "1000,0.1,0.0\n3000,0.3,0.0\n5000,0.5,-0.2\n")
    _, rows = report.report_rows(run, ["route_completion", "offset_1"],
                                 calibration=True)
    # No calibration rows for the chosen offset's column.
    assert [r.split for r in rows[4:]] == ["training (deterministic)",
                                           "held out (deterministic)"]
    assert [r.split for r in rows[:4]] == [
        "training (deterministic)", "held out (deterministic)",
        "calibration, offset 1=-0.2", "calibration, offset 1=+0"]
    low, zero = rows[2].values, rows[3].values
    assert low[0] == pytest.approx(0.3) and math.isnan(low[1])
    assert low[2] == pytest.approx(0.8)
    assert zero == pytest.approx([0.4, 0.6, 0.7])


def test_calibration_rows_a_crash_cut_or_garbage_are_skipped(tmp_path,
                                                             capsys):
    """A row cut short became a candidate of its own (offset -129, say),
    and a line of garbage was a traceback."""
    run = _run(tmp_path)
    _write_calibration(run, [(1000, 1.0, 1, 0.0, 0.4),
                             (1000, 0.5, 0, -0.2, 0.3)])
    with open(os.path.join(run, "calibration.csv"), "a") as f:
        f.write("3000,-129\ngarbage\n")
    with open(os.path.join(run, "eval.csv"), "w") as f:
        f.write("env_steps,route_completion\n1000,0.1\n")
    _, rows = report.report_rows(run, ["route_completion"], calibration=True)
    assert [r.split for r in rows[2:]] == ["calibration, offset 1=-0.2",
                                           "calibration, offset 1=+0"]
    path = os.path.join(run, "calibration.csv")
    assert capsys.readouterr().err == (
        f"alf.bin.report: warning: skipped 2 incomplete or non-numeric rows "
        f"of {path} (env_steps 3000, line 5)\n")


def test_calibration_rows_from_before_a_widening_resume_read(tmp_path):
    # A resume that calibrates a second dimension widens calibration.csv;
    # the earlier rows have empty fields there.
    run = _run(tmp_path)
    with open(os.path.join(run, "calibration.csv"), "w") as f:
        f.write("env_steps,average_return,chosen,offset_1,"
                "route_completion,offset_0\n"
                "1000,1.0,1,0.0,0.4,\n3000,2.0,1,0.0,0.6,0.1\n")
    with open(os.path.join(run, "eval.csv"), "w") as f:
        f.write("env_steps,route_completion\n1000,0.1\n3000,0.3\n")
    _, rows = report.report_rows(run, ["route_completion"], calibration=True)
    scored = {r.split: r.values for r in rows}
    assert scored["calibration, offset 0=+0.1 1=+0"][1] == pytest.approx(0.6)
    assert scored["calibration, offset 0=none 1=+0"][0] == pytest.approx(0.4)


def test_calibration_errors_name_the_file_or_column(tmp_path):
    run = _run(tmp_path)
    with pytest.raises(AlfError, match="calibration.csv does not exist "
                       r"\(the run did not set TrainerConfig"):
        report.report_rows(run, calibration=True)
    with open(os.path.join(run, "calibration.csv"), "w") as f:
        f.write("env_steps,chosen,offset_1\n1000,1,0.0\n")
    with pytest.raises(AlfError, match="has no 'route_completion' column"):
        report.report_rows(run, ["route_completion"], calibration=True)


def test_rollouts_are_episode_weighted_means_within_the_window(tmp_path):
    run = _run(tmp_path)
    _write_events(run, {
        # 1000: (0.0 x 1 + 0.4 x 3) / 4; 3000: nothing within 500;
        # 5000: the value at 5400 alone (6000 is outside the window).
        "rollout/route_completion": [(800, 0.0), (1200, 0.4), (5400, 0.9),
                                     (6000, 0.1)],
        "rollout/episodes": [(800, 1), (1200, 3), (5400, 2), (6000, 5)],
        "train/loss": [(1000, 7.0)]})
    _, rows = report.report_rows(run, ["route_completion"], rollouts=True,
                                 window=500)
    label, _, values, _ = rows[2]
    assert label == "rollouts (sampling, ±500)"
    assert values[0] == pytest.approx(0.3)
    assert math.isnan(values[1])
    assert values[2] == pytest.approx(0.9)


def test_a_resumed_runs_later_event_file_wins(tmp_path):
    run = _run(tmp_path)
    _write_events(run, {"rollout/route_completion": [(1000, 0.1)]})
    first = os.listdir(os.path.join(run, "train"))[0]
    os.utime(os.path.join(run, "train", first), (1, 1))  # the older file
    _write_events(run, {"rollout/route_completion": [(1000, 0.7)]})
    series = report.read_rollouts(run)
    assert series["route_completion"] == [(1000, pytest.approx(0.7))]


def test_default_window_is_half_the_evaluation_spacing():
    assert report.default_window([0, 1000, 3000, 4000]) == 500
    assert report.default_window([7]) == 0


def test_markdown_table_and_last_mean():
    text = report.format_markdown(
        STEPS, [report.Row("training", "m", [0.1, math.nan, 12.345]),
                report.Row("held out", "m", [1.0, 2.0, 3.0])], last=2)
    head, rule, row, full, blank, note = text.split("\n")
    assert head == "| env steps | 1k | 3k | 5k | last 2 |"
    assert rule == "| --- | --- | --- | --- | --- |"
    # NaN is an empty cell, and the mean skips it, (0.1 + 12.345) / 2:
    # not the last 2 evaluations, so marked, and the note says which.
    assert row == "| training: m | 0.10 |  | 12.3 | 6.22 † |"
    assert full == "| held out: m | 1.00 | 2.00 | 3.00 | 2.50 |"
    assert (blank, note) == ("", "† training: m: the mean of 2 values (at "
                             "1k, 5k): empty cells are left out")
    # Fewer values than --last: said too.
    text = report.format_markdown(
        STEPS, [report.Row("training", "m", [math.nan, math.nan, 4.0])])
    assert text.split("\n")[2:] == [
        "| training: m |  |  | 4.00 | 4.00 † |", "",
        "† training: m: the mean of 1 value (at 5k): empty cells are left "
        "out"]
    # Nothing skipped: no note.
    assert "†" not in report.format_markdown(
        STEPS, [report.Row("training", "m", [1.0, 2.0, 3.0])], last=2)


def test_a_value_that_is_not_a_number_is_named_and_noted(tmp_path):
    run = _run(tmp_path, held_out=False)
    _write_csv(os.path.join(run, "eval.csv"), [
        (1000, 1.0, 0.1), (2000, "inf", 0.2), (3000, "nan", 0.3),
        (4000, "-inf", 0.4), (5000, 3.0, 0.5)])
    out = _cli("--root_dir", run, "--metrics", "average_return")
    assert out.returncode == 0, out.stderr
    # inf (a diverged run writes it too) was shown and averaged.
    assert out.stderr == (
        f"alf.bin.report: warning: {run}/eval.csv has 3 values that are not "
        "a finite number (average_return at 2000, average_return at 3000, "
        "average_return at 4000): empty cells, left out of the means\n")
    assert out.stdout.splitlines()[2:] == [
        "| training (deterministic): average_return | 1.00 |  |  |  | 3.00 "
        "| 2.00 † |", "",
        "† training (deterministic): average_return: the mean of 2 values "
        "(at 1k, 5k): empty cells are left out"]


def test_cells_alf_left_empty_are_not_warned_about(tmp_path):
    """A resumed run that added a column (a calibration's offset_0) leaves
    it empty in the earlier rows: missing, not a value that is not a
    number. Before, report warned about each of them."""
    run = _run(tmp_path, held_out=False)
    _write_csv(os.path.join(run, "eval.csv"), [
        (1000, 1.0, ""), (3000, "nan", ""), (5000, 3.0, 0.5)])
    out = _cli("--root_dir", run, "--metrics",
               "average_return,route_completion")
    assert out.returncode == 0, out.stderr
    assert out.stderr == (
        f"alf.bin.report: warning: {run}/eval.csv has 1 value that is not "
        "a finite number (average_return at 3000): empty cells, left out of "
        "the means\n")


def _resumed(run, steps, text):
    with open(os.path.join(run, f"config-resumed-{steps}.gin"), "w") as f:
        f.write(text)


def test_a_run_resumed_with_another_evaluation_policy_says_so(tmp_path):
    run = _run(tmp_path)
    # Resumed at 3000 sampling: the evaluations after 3000 sampled.
    _resumed(run, 3000, "TrainerConfig.eval_deterministic = False\n")
    _, rows = report.report_rows(run, ["route_completion"])
    assert [r.split for r in rows] == [
        "training (deterministic until 3000; sampling after)",
        "held out (deterministic until 3000; sampling after)"]
    # Then calibrated from 4000 on; a record moved aside is not read.
    _resumed(run, 4000, "TrainerConfig.eval_deterministic = True\n"
             "TrainerConfig.calibrate_offsets = {1: (-0.2, 0.0)}\n")
    with open(os.path.join(run, "config-resumed-1000-superseded.gin"),
              "w") as f:
        f.write("TrainerConfig.eval_deterministic = False\n")
    assert report.evaluation_policy(run, [1000, 3000, 3500, 5000]) == (
        "deterministic until 3000; sampling until 4000; deterministic, "
        "calibrated after")
    # Without an evaluation between 3000 and 4000, the sampling ones are
    # not in the table.
    assert report.evaluation_policy(run, STEPS) == (
        "deterministic until 4000; deterministic, calibrated after")
    # A resume past the last evaluation, or with the same policy, changes
    # no label.
    assert report.evaluation_policy(run, [1000, 3000]) == "deterministic"
    os.remove(os.path.join(run, "config-resumed-4000.gin"))
    _resumed(run, 3000, "TrainerConfig.eval_deterministic = True\n")
    assert report.evaluation_policy(run, STEPS) == "deterministic"
    # The rollouts' label follows their config the same way.
    _resumed(run, 3000, "TrainerConfig.eval_deterministic = True\n"
             "PPOAlgorithm.explore_fraction = 0.5\n")
    assert report.behaviour_policy(run, STEPS) == (
        "sampling until 3000; sampling 50% of steps after")


def test_step_labels_stay_distinct():
    assert report.step_labels([512, 1000, 82000]) == ["512", "1k", "82k"]
    # 1536 and 2048 both round to 2k: one decimal for the whole row.
    assert report.step_labels([512, 1024, 1536, 2048]) == [
        "512", "1.0k", "1.5k", "2.0k"]
    assert report.step_labels([100000, 100020]) == ["100000", "100020"]
    text = report.format_markdown([1536, 2048], [])
    assert text.split("\n")[0] == "| env steps | 1.5k | 2.0k | last 3 |"


def test_baselines_are_constant_rows_after_the_runs_own(tmp_path):
    base = tmp_path / "random"
    base.mkdir()
    _write_csv(base / "eval.csv", [(0, -1.0, 0.04)])
    _write_csv(base / "eval_held_out.csv", [(0, -2.0, 0.03)])
    steps, rows = report.report_rows(_run(tmp_path), ["route_completion"],
                                     baselines=[str(base)])
    assert [(r.split, r.values, r.baseline) for r in rows[2:]] == [
        ("random, training", [0.04] * 3, True),
        ("random, held out", [0.03] * 3, True)]
    (base / "eval.csv").write_text("env_steps,average_return\n0,1.0\n")
    with pytest.raises(AlfError, match="has no 'route_completion' value"):
        report.report_rows(_run(tmp_path / "b"), ["route_completion"],
                           baselines=[str(base)])


@pytest.mark.parametrize("case, message", [
    ("missing", "no such folder"),
    ("metric", "'nope' is not a column"),
    ("rollouts", "no TensorBoard event file"),
    ("empty", "has no evaluation yet"),
    ("baseline", "--baseline=.*: no such folder"),
])
def test_errors_name_the_problem(tmp_path, case, message):
    run = _run(tmp_path)
    kwargs = {}
    if case == "missing":
        run = str(tmp_path / "absent")
    elif case == "metric":
        kwargs["metrics"] = ["nope"]
    elif case == "rollouts":
        kwargs["rollouts"] = True
    elif case == "baseline":
        kwargs["baselines"] = [str(tmp_path / "absent")]
    else:
        with open(os.path.join(run, "eval.csv"), "w") as f:
            f.write("env_steps,average_return\n")
    with pytest.raises(AlfError, match=message):
        report.report_rows(run, **kwargs)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "alf.bin.report", *args],
                          capture_output=True, text=True, timeout=120)


def test_cli_prints_the_table_and_writes_the_plot(tmp_path):
    run = _run(tmp_path)
    _write_events(run, {"rollout/route_completion": [(1000, 0.2)]})
    png = tmp_path / "curves.png"
    out = _cli("--root_dir", run, "--metrics", "route_completion",
               "--rollouts", "--plot", str(png))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[2].startswith("| training (deterministic): route_completion"
                               " | 0.10 | 0.30 | 0.50 | 0.30 |")
    assert lines[4].startswith("| rollouts (sampling, ±1000)")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_piped_into_a_reader_that_stops_early_is_quiet(tmp_path):
    """`report ... | head -1`: it said 'error: [Errno 32] Broken pipe' and
    exited 1."""
    png = tmp_path / "curves.png"
    env = {k: v for k, v in os.environ.items()
           if k != "PYTHONUNBUFFERED"}  # a pipe's stdout: block-buffered
    proc = subprocess.Popen(
        [sys.executable, "-m", "alf.bin.report", "--root_dir",
         _run(tmp_path), "--plot", str(png)], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, env=env)
    proc.stdout.close()  # before the table is written
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and err == b"", err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # written all the same


def test_cli_skips_rows_a_crash_cut_short_and_says_so(tmp_path):
    run = _run(tmp_path)
    with open(os.path.join(run, "eval.csv"), "a") as f:
        f.write("6144,abc,def\n7168,12")  # not numeric; cut short
    out = _cli("--root_dir", run, "--metrics", "route_completion")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == "| env steps | 1k | 3k | 5k | last 3 |"
    assert out.stderr == (
        "alf.bin.report: warning: skipped 2 incomplete or non-numeric rows "
        f"of {run}/eval.csv (env_steps 6144, env_steps 7168)\n")


@pytest.mark.parametrize("args, message", [
    (["--root_dir", "absent"], "--root_dir="),
    (["--root_dir", "afile"], "--root_dir={tmp}/afile: a file, not a run's "
     "folder\n"),
    (["--last", "0"], "--last=0; it must be at least 1"),
    (["--window=-5"], "--window=-5; it must be 0 or more env steps"),
    (["--plot", "x.txt"], "--plot=x.txt: matplotlib cannot write .txt; use "
     "one of "),
    (["--plot", "curves"], "--plot=curves: matplotlib cannot write a file "
     "without extension; use one of "),
    (["--plot", "/nonexistent/x.png"], "--plot=/nonexistent/x.png: "
     "directory /nonexistent does not exist\n"),
    (["--plot", "afile/x.png"], "--plot=afile/x.png: directory "
     "{tmp}/afile is not a folder\n"),
])
def test_cli_error_is_one_line_and_exit_code_1(tmp_path, args, message):
    args = [str(tmp_path / a) if a in ("absent", "afile") else a
            for a in args]
    if "--root_dir" not in args:
        args += ["--root_dir", _run(tmp_path)]
    (tmp_path / "afile").write_text("")
    out = subprocess.run([sys.executable, "-m", "alf.bin.report", *args],
                         capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    assert out.returncode == 1
    assert out.stderr.strip().count("\n") == 0
    assert out.stderr.startswith("alf.bin.report: error: " + message.format(
        tmp=tmp_path)), out.stderr
    assert out.stdout == ""  # refused before the table
    if "matplotlib cannot write" in message:
        assert ".pdf, " in out.stderr and ".png, " in out.stderr


def test_rollouts_of_a_run_that_sampled_a_fraction_of_steps_say_so(
        tmp_path):
    run = _run(tmp_path)
    with open(os.path.join(run, "config.gin"), "a") as f:
        f.write("PPOAlgorithm.explore_fraction = 0.25\n")
    _write_events(run, {"rollout/route_completion": [(1000, 0.5)],
                        "rollout/episodes": [(1000, 1)]})
    _, rows = report.report_rows(run, ["route_completion"], rollouts=True,
                                 window=500)
    assert rows[2].split == "rollouts (sampling 25% of steps, ±500)"
    assert report.behaviour_policy(str(tmp_path)) == "sampling"  # no file
    with open(os.path.join(run, "config.gin"), "a") as f:
        f.write("PPOAlgorithm.explore_fraction_schedule = (0.5, 0.75, 0.2)"
                "\n")
    assert report.behaviour_policy(run) == (
        "sampling 25% to 20% of steps over 50%-75% of training")


def test_bindings_through_gin_macros_read_as_their_values(tmp_path):
    """gin's operative config keeps `x = %FRAC` with `FRAC = 0.5` among
    its macros: report took '%FRAC' for the value (a traceback; a
    deterministic run labelled sampling)."""
    run = _run(tmp_path)
    (tmp_path / "run" / "config.gin").write_text(
        "# Macros:\n"
        "DET = %YES\nFRAC = 0.5\nSCHEDULE = (0.5, 0.75, 0.2)\nYES = True\n"
        "TrainerConfig.eval_deterministic = %DET\n"
        "PPOAlgorithm.explore_fraction = %FRAC\n")
    assert report.evaluation_policy(run) == "deterministic"
    assert report.behaviour_policy(run) == "sampling 50% of steps"
    with open(os.path.join(run, "config.gin"), "a") as f:
        f.write("PPOAlgorithm.explore_fraction_schedule = %SCHEDULE\n")
    assert report.behaviour_policy(run) == (
        "sampling 50% to 20% of steps over 50%-75% of training")
