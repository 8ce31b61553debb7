"""Tests of ``alf.bin.curves``, by hand computation: the grid and its
interpolation, the normalised area and final value, Welch's test and the
verdict, compare.csv and the figure's legend."""
import csv
import sys
import types

import numpy as np
import pytest

from alf.bin import curves as cur
from alf.utils.errors import AlfError


def _curve(steps, returns):
    return {"env_steps": list(steps), "average_return": list(returns)}


def _stats(single, ddp):
    """mode -> seed -> {"final", "auc"} from per-seed (final, auc) pairs."""
    return {mode: {s: {"final": f, "auc": a} for s, (f, a) in enumerate(vals)}
            for mode, vals in (("single", single), ("ddp2", ddp))}


def test_align_same_steps_keeps_values():
    curves = {("single", 0): _curve([100, 200], [1.0, 2.0]),
              ("ddp2", 0): _curve([100, 200], [3.0, 5.0])}
    grid, values = cur.align(curves)
    assert grid.tolist() == [100, 200]
    assert values[("ddp2", 0)].tolist() == [3.0, 5.0]


def test_align_uses_union_of_single_steps_and_interpolates():
    curves = {("single", 0): _curve([0, 100, 200], [0.0, 10.0, 20.0]),
              ("single", 1): _curve([0, 150, 200], [0.0, 30.0, 40.0]),
              ("ddp2", 0): _curve([0, 200], [0.0, 100.0])}
    grid, values = cur.align(curves)
    assert grid.tolist() == [0, 100, 150, 200]
    np.testing.assert_allclose(values[("single", 0)], [0, 10, 15, 20])
    np.testing.assert_allclose(values[("single", 1)], [0, 20, 30, 40])
    np.testing.assert_allclose(values[("ddp2", 0)], [0, 50, 75, 100])


def test_align_keeps_only_steps_covered_by_all_runs():
    # The DDP run starts later and ends earlier: no extrapolation.
    curves = {("single", 0): _curve([0, 100, 200, 300], [0, 1, 2, 3]),
              ("ddp2", 0): _curve([50, 150, 250], [10, 20, 30])}
    grid, values = cur.align(curves)
    assert grid.tolist() == [100, 200]
    np.testing.assert_allclose(values[("ddp2", 0)], [15, 25])


def test_align_errors_name_the_problem():
    with pytest.raises(AlfError, match="no single evaluation step is covered"):
        cur.align({("single", 0): _curve([0, 100], [1, 2]),
                       ("ddp2", 0): _curve([200, 300], [1, 2])})
    with pytest.raises(AlfError, match="ddp2/seed1 has no row"):
        cur.align({("single", 0): _curve([0], [1]),
                       ("ddp2", 1): _curve([], [])})


def test_align_reads_the_chosen_metric_and_names_the_valid_ones():
    curves = {("a", 0): {"env_steps": [1, 2], "average_return": [5.0, 6.0],
                         "route_completion": [0.25, 0.5]},
              ("b", 0): {"env_steps": [1, 2], "average_return": [7.0, 8.0],
                         "route_completion": [0.5, 1.0]}}
    grid, values = cur.align(curves, metric="route_completion")
    assert grid.tolist() == [1, 2]
    assert values[("b", 0)].tolist() == [0.5, 1.0]
    with pytest.raises(AlfError, match=r"--metric 'success_rate' is not a "
                       r"column of a/seed0/eval_held_out.csv; valid: "
                       r"\['average_return', 'route_completion'\]"):
        cur.align(curves, metric="success_rate",
                      csv_name="eval_held_out.csv")


def test_file_names_are_the_trainers():
    from alf.trainers import calibration, evaluator
    assert (cur.EVAL_CSV, cur.HELD_OUT_CSV, cur.CALIBRATION_CSV) == (
        evaluator.EVAL_CSV, evaluator.HELD_OUT_CSV,
        calibration.CALIBRATION_CSV)


def test_verdict_names_the_metric():
    stats = {"a": {0: {"final": 0.812, "auc": 0.5}},
             "b": {0: {"final": 0.75, "auc": 0.5}}}
    agree, lines = cur.verdict(stats, 0.0, 0.05, pvalue=_no_ttest,
                                   label="route_completion")
    assert not agree
    assert lines[0].split() == ["mode", "seed", "final", "route_completion",
                                "norm.", "AUC"]
    assert lines[1].split() == ["a", "0", "0.812", "0.500"]
    assert lines[3].startswith("final route_completion: mean a 0.812, mean "
                               "b 0.750, difference -0.062 (tolerance 0.050: "
                               "EXCEEDED)"), lines[3]


def test_normalized_auc_by_hand():
    # Triangle 0..10 (area 50) then a 20-step plateau at 10 (area 200).
    assert cur.normalized_auc([0, 10, 30], [0, 10, 10]) == \
        pytest.approx(250 / 30)
    assert cur.normalized_auc([5, 7, 9], [4, 4, 4]) == pytest.approx(4)
    assert cur.normalized_auc([512], [20.0]) == 20.0


def test_final_value_averages_last_three():
    assert cur.final_value([1, 2, 3, 4, 5]) == pytest.approx(4)
    assert cur.final_value([7.0]) == 7.0


def _no_ttest(a, b):
    return None, "test says no"


def test_tolerance_agree_and_disagree():
    agree, lines = cur.verdict(_stats([(100, 80)], [(120, 70)]),
                                   tol_rel=0.1, tol_abs=25, pvalue=_no_ttest)
    assert agree
    assert "decided by the tolerance criterion" in lines[-1]
    assert "single" in lines[-1] and "ddp2" in lines[-1]
    agree, lines = cur.verdict(_stats([(100, 80)], [(130, 80)]),
                                   tol_rel=0.1, tol_abs=25, pvalue=_no_ttest)
    assert not agree and "DISAGREE" in lines[-1]
    assert any(x.startswith("final return") and "EXCEEDED" in x
               for x in lines)


def test_tolerance_is_relative_for_large_returns_and_checks_auc():
    # |mean single| = 400: bound max(25, 40) = 40.
    ok, _ = cur.verdict(_stats([(400, 300)], [(365, 300)]), 0.1, 25,
                            pvalue=_no_ttest)
    bad, _ = cur.verdict(_stats([(400, 300)], [(355, 300)]), 0.1, 25,
                             pvalue=_no_ttest)
    assert ok and not bad
    auc_off, lines = cur.verdict(_stats([(400, 300)], [(400, 200)]),
                                     0.1, 25, pvalue=_no_ttest)
    assert not auc_off
    assert any(x.startswith("normalized AUC") and "EXCEEDED" in x
               for x in lines)


def test_ttest_decides_when_available():
    three = _stats([(100, 80), (110, 85), (90, 75)],
                   [(200, 160), (210, 170), (190, 150)])
    # A large difference that the (injected) test calls insignificant.
    agree, lines = cur.verdict(three, 0.1, 25,
                                   pvalue=lambda a, b: (0.5, ""))
    assert agree and "decided by the Welch's t-test criterion" in lines[-1]
    # The tolerance is shown too, after the test and marked unused, so that
    # an exceeded tolerance does not read as the verdict.
    assert lines[-4] == (
        "final return: mean single 100.00, mean ddp2 200.00, difference "
        "+100.00 (Welch p = 0.500: not significant); tolerance 25.00: "
        "exceeded (not used: Welch decides)")
    assert not any("EXCEEDED" in x for x in lines)
    agree, lines = cur.verdict(_stats([(100, 80)] * 2, [(101, 80)] * 2),
                                   0.1, 25, pvalue=lambda a, b: (0.01, ""))
    assert not agree and "t-test" in lines[-1]
    assert "(Welch p = 0.010: SIGNIFICANT); tolerance 25.00: within (not " \
        "used: Welch decides)" in lines[-4]
    # If the test cannot be computed for one figure, the tolerance decides.
    agree, lines = cur.verdict(
        three, 0.1, 25,
        pvalue=lambda a, b: (0.5, "") if a[0] == 100 else (None, "nope"))
    assert not agree and "tolerance" in lines[-1]
    # The tolerance leads; the one p-value there is marked unused.
    assert lines[-4].endswith("difference +100.00 (tolerance 25.00: "
                              "EXCEEDED); Welch p = 0.500 (not used: the "
                              "tolerance decides)"), lines[-4]


def test_welch_pvalue_needs_two_seeds_per_side():
    assert cur.welch_pvalue([1.0], [2.0, 3.0]) == (
        None, "needs 2 seeds or more per mode")


def test_welch_pvalue_never_falls_back_when_scipy_is_missing(monkeypatch):
    # scipy is a dependency: a broken install fails loudly rather than
    # quietly switching the verdict to the tolerance rule.
    monkeypatch.setitem(sys.modules, "scipy", None)  # import fails
    with pytest.raises(ImportError):
        cur.welch_pvalue([1, 2], [3, 4])


def test_welch_pvalue_calls_welch_variant(monkeypatch):
    # A stand-in records the call.
    calls = []

    def ttest_ind(a, b, equal_var=True):
        calls.append((list(a), list(b), equal_var))
        return types.SimpleNamespace(pvalue=float("nan") if a == b else 0.2)

    fake = types.SimpleNamespace(stats=types.SimpleNamespace(
        ttest_ind=ttest_ind))
    monkeypatch.setitem(sys.modules, "scipy", fake)
    assert cur.welch_pvalue([1, 2], [3, 5]) == (0.2, "")
    assert calls == [([1, 2], [3, 5], False)]  # Welch: unequal variances
    assert cur.welch_pvalue([4, 4], [4, 4]) == (
        None, "no spread across seeds")


def test_welch_pvalue_with_scipy():
    p, _ = cur.welch_pvalue([100, 101, 102], [1, 2, 3.5])
    assert p < 0.001
    p, _ = cur.welch_pvalue([1, 2, 3], [1, 2, 3])
    assert p == pytest.approx(1.0)
    assert cur.welch_pvalue([5, 5], [5, 5])[0] is None


def test_compare_csv_is_long_format(tmp_path):
    path = str(tmp_path / "curves.csv")
    cur.write_compare_csv(path, np.array([512, 1024]), {
        ("single", 0): np.array([10.0, 20.5]),
        ("ddp2", 0): np.array([12.0, 30.0])})
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["env_steps", "mode", "seed", "average_return"]
    assert [(r["env_steps"], r["mode"], r["seed"], float(r["average_return"]))
            for r in rows] == [("512", "single", "0", 10.0),
                               ("1024", "single", "0", 20.5),
                               ("512", "ddp2", "0", 12.0),
                               ("1024", "ddp2", "0", 30.0)]


def test_analysis_uses_side_names(tmp_path, monkeypatch):
    curves = {("async", 0): _curve([100, 300], [1.0, 3.0]),
              ("sync", 0): _curve([100, 200, 300], [2.0, 4.0, 6.0])}
    grid, values = cur.align(curves)  # side A (the first) is the ref.
    assert grid.tolist() == [100, 300]
    grid, values = cur.align(curves, reference="sync")
    assert grid.tolist() == [100, 200, 300]
    path = str(tmp_path / "curves.csv")
    cur.write_compare_csv(path, grid, values)
    with open(path, newline="") as f:
        assert {r["mode"] for r in csv.DictReader(f)} == {"async", "sync"}
    # The legend, read off the figure as it is saved.
    import matplotlib.figure
    labels = []

    def savefig(fig, *args, **kwargs):
        legend = fig.axes[0].get_legend()
        labels.extend(t.get_text() for t in legend.get_texts())

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    cur.plot(str(tmp_path / "curves.png"), grid, values, "t")
    # One seed: its curve, no band of one.
    assert labels == ["async: 1 seed", "sync: 1 seed"]
    labels.clear()
    cur.plot(str(tmp_path / "curves.png"), grid, {
        **values, ("sync", 1): values[("sync", 0)] + 1}, "t")
    assert labels == ["async: 1 seed", "sync: mean, min-max of 2 seeds"]
    stats = {"minibatch_128": {0: {"final": 1.0, "auc": 1.0}},
             "b": {0: {"final": 1.0, "auc": 1.0}}}
    _, lines = cur.verdict(stats, 0.1, 25, pvalue=_no_ttest)
    assert lines[1].split()[:2] == ["minibatch_128", "0"]
    assert len(lines[0]) == len(lines[1])  # the column fits the long name
    assert lines[-1].startswith("verdict: minibatch_128 and b AGREE")



def test_read_curves_names_the_rows_it_skips(tmp_path, capsys):
    """A row cut short by a crash or not numeric is left out, and said so
    in one line on stderr."""
    (tmp_path / "eval.csv").write_text(
        "env_steps,average_return\n512,1.0\n1024,abc\n1536,2.0\n2048")
    curves = cur.read_curves(str(tmp_path), "eval.csv", "prog")
    assert curves == {"env_steps": [512.0, 1536.0],
                      "average_return": [1.0, 2.0]}
    assert capsys.readouterr().err == (
        f"prog: warning: skipped 2 incomplete or non-numeric rows of "
        f"{tmp_path / 'eval.csv'} (env_steps 1024, env_steps 2048)\n")
    (tmp_path / "eval.csv").write_text("env_steps,average_return\n" + "".join(
        f"{s},x\n" for s in range(7)))
    cur.read_curves(str(tmp_path), "eval.csv", "prog")
    assert capsys.readouterr().err.endswith(
        "(env_steps 0, env_steps 1, env_steps 2, env_steps 3, env_steps 4 "
        "and 2 more)\n")
    (tmp_path / "eval.csv").write_text("env_steps,average_return\n1,2\n")
    cur.read_curves(str(tmp_path), "eval.csv", "prog")
    assert capsys.readouterr().err == ""  # nothing skipped, nothing said
