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
    outcome, lines = cur.verdict(stats, 0.0, 0.05, test=_no_ttest,
                                 label="route_completion")
    assert outcome == cur.DISAGREE
    assert lines[0].split() == ["mode", "seed", "final", "route_completion",
                                "norm.", "AUC"]
    assert lines[1].split() == ["a", "0", "0.812", "0.500"]
    assert lines[3] == (
        "final route_completion: mean a 0.812, mean b 0.750, difference "
        "-0.062: EXCEEDS tolerance 0.050; no t-test (test says no): the "
        "difference decides -> DISAGREE"), lines[3]


def test_normalized_auc_by_hand():
    # Triangle 0..10 (area 50) then a 20-step plateau at 10 (area 200).
    assert cur.normalized_auc([0, 10, 30], [0, 10, 10]) == \
        pytest.approx(250 / 30)
    assert cur.normalized_auc([5, 7, 9], [4, 4, 4]) == pytest.approx(4)
    assert cur.normalized_auc([512], [20.0]) == 20.0


def test_final_value_averages_last_three():
    assert cur.final_value([1, 2, 3, 4, 5]) == pytest.approx(4)
    assert cur.final_value([7.0]) == 7.0


def _no_ttest(a, b, alpha):
    return None, "test says no"


def _welch(p, low, high):
    """An injected test: the same p and interval for every figure."""
    return lambda a, b, alpha: (cur.Welch(p, low, high), "")


def test_tolerance_agree_and_disagree():
    outcome, lines = cur.verdict(_stats([(100, 80)], [(120, 70)]),
                                 tol_rel=0.1, tol_abs=25, test=_no_ttest)
    assert outcome == cur.AGREE
    assert lines[-1] == ("verdict: single and ddp2 AGREE (both figures "
                         "within tolerance)")
    outcome, lines = cur.verdict(_stats([(100, 80)], [(130, 80)]),
                                 tol_rel=0.1, tol_abs=25, test=_no_ttest)
    assert outcome == cur.DISAGREE
    assert lines[-1] == ("verdict: single and ddp2 DISAGREE (final return "
                         "beyond tolerance)")
    assert any(x.startswith("final return") and "EXCEEDS" in x
               for x in lines)


def test_tolerance_is_relative_for_large_returns_and_checks_auc():
    # |mean single| = 400: bound max(25, 40) = 40.
    ok, _ = cur.verdict(_stats([(400, 300)], [(365, 300)]), 0.1, 25,
                        test=_no_ttest)
    bad, _ = cur.verdict(_stats([(400, 300)], [(355, 300)]), 0.1, 25,
                         test=_no_ttest)
    assert (ok, bad) == (cur.AGREE, cur.DISAGREE)
    auc_off, lines = cur.verdict(_stats([(400, 300)], [(400, 200)]),
                                 0.1, 25, test=_no_ttest)
    assert auc_off == cur.DISAGREE
    assert any(x.startswith("normalized AUC") and "EXCEEDS" in x
               for x in lines)


def test_effect_size_decides_not_significance():
    """The size of the difference against the tolerance decides; the test
    says only whether the seeds pin it down."""
    three = _stats([(100, 80), (110, 85), (90, 75)],
                   [(200, 160), (210, 170), (190, 150)])
    # A large difference that the test calls insignificant: not AGREE (the
    # old rule agreed here), but more seeds needed.
    outcome, lines = cur.verdict(three, 0.1, 25,
                                 test=_welch(0.5, -150.0, 350.0))
    assert outcome == cur.INCONCLUSIVE
    assert lines[-3] == (
        "normalized AUC: mean single 80.00, mean ddp2 160.00, difference "
        "+80.00: exceeds tolerance 25.00, but Welch p = 0.500: not "
        "significant (90% CI [-150.00, +350.00]): more seeds needed -> "
        "INCONCLUSIVE")
    assert lines[-1] == ("verdict: single and ddp2 INCONCLUSIVE (more seeds "
                         "needed for final return and normalized AUC)")
    # Beyond the tolerance and significant: DISAGREE.
    outcome, lines = cur.verdict(three, 0.1, 25, test=_welch(0.01, 60, 140))
    assert outcome == cur.DISAGREE
    assert "EXCEEDS tolerance 25.00 and the difference is real (Welch p = " \
        "0.010: significant; 90% CI [+60.00, +140.00]) -> DISAGREE" in \
        lines[-4]
    # Significant but small: AGREE, and the line says both.
    near = _stats([(100, 80)] * 2, [(101, 80)] * 2)
    outcome, lines = cur.verdict(near, 0.1, 25, test=_welch(0.01, 0.5, 1.5))
    assert outcome == cur.AGREE
    assert lines[-4].endswith(
        "difference +1.00: 90% CI [+0.50, +1.50] within tolerance ±25.00 "
        "(Welch p = 0.010: significant, but within tolerance) -> AGREE")
    # A small difference the seeds do not pin down: INCONCLUSIVE.
    outcome, lines = cur.verdict(near, 0.1, 25, test=_welch(0.6, -30, 32))
    assert outcome == cur.INCONCLUSIVE
    assert "within tolerance 25.00, but its 90% CI [-30.00, +32.00] is " \
        "not (Welch p = 0.600: not significant): more seeds needed" in \
        lines[-4]
    # One figure disagreeing outweighs one undecided.
    outcome, lines = cur.verdict(
        three, 0.1, 25, test=lambda a, b, alpha: (
            (cur.Welch(0.01, 60, 140), "") if a[0] == 100
            else (cur.Welch(0.5, -150, 350), "")))
    assert outcome == cur.DISAGREE
    assert lines[-1] == ("verdict: single and ddp2 DISAGREE (final return "
                         "beyond tolerance)")


def test_qa_cases_with_scipy():
    """The two cases QA found, on real Welch tests. Learning rate 1e-12
    against the default, 2 seeds: 373 below with p ~ 0.2 was AGREE; it
    is INCONCLUSIVE (exit 4), not evidence of agreement."""
    stats = {"a": {0: {"final": 480.0, "auc": 300.0},
                   1: {"final": 452.0, "auc": 310.0}},
             "lr0": {0: {"final": 220.0, "auc": 100.0},
                     1: {"final": -34.1, "auc": 20.0}}}
    outcome, lines = cur.verdict(stats, 0.1, 50)
    assert outcome == cur.INCONCLUSIVE
    assert "difference -373.05: exceeds tolerance 50.00, but Welch p = " \
        "0.205: not significant" in lines[-4], lines[-4]
    # 500, 500, 500 against 499.0, 499.2, 498.9: a significant 1-point
    # difference (p = 0.008) was DISAGREE; well within tolerance, AGREE.
    stats = {"a": {s: {"final": 500.0, "auc": 400.0} for s in range(3)},
             "b": {s: {"final": f, "auc": 400.0}
                   for s, f in enumerate((499.0, 499.2, 498.9))}}
    outcome, lines = cur.verdict(stats, 0.1, 25)
    assert outcome == cur.AGREE
    assert "(Welch p = 0.008: significant, but within tolerance) -> AGREE" \
        in lines[-4], lines[-4]
    # The AUC has no spread on either side: the difference decides.
    assert "no t-test (no spread across seeds): the difference decides " \
        "-> AGREE" in lines[-3]
    # Clearly apart on both seeds: DISAGREE.
    stats["b"] = {s: {"final": f, "auc": 100.0 + s}
                  for s, f in enumerate((20.0, 22.0, 21.0))}
    assert cur.verdict(stats, 0.1, 25)[0] == cur.DISAGREE


def test_welch_test_interval_by_hand():
    welch, why = cur.welch_test([1.0, 3.0], [4.0, 8.0], alpha=0.05)
    # Variances of the means 1 and 4, se = sqrt(5); df = 25 / (1 + 16) =
    # 25 / 17; the interval 4 -+ t(0.95, df) se.
    from scipy import stats
    half = stats.t.ppf(0.95, 25 / 17) * 5 ** 0.5
    assert why == "" and welch.p == pytest.approx(cur.welch_pvalue(
        [1.0, 3.0], [4.0, 8.0])[0])
    assert (welch.low, welch.high) == (pytest.approx(4 - half),
                                       pytest.approx(4 + half))
    assert cur.welch_test([1.0], [2.0, 3.0]) == (
        None, "needs 2 seeds or more per mode")


def test_verdict_refuses_values_that_are_not_numbers():
    stats = _stats([(100, 80), (float("nan"), 80)], [(100, 80)] * 2)
    with pytest.raises(AlfError, match=r"^final return of run single/seed1 "
                       r"is nan: nothing can be compared on it$"):
        cur.verdict(stats, 0.1, 25)


def test_align_names_the_run_and_step_of_a_value_that_is_not_a_number():
    curves = {("a", 0): _curve([100, 200], [1.0, 2.0]),
              ("b", 1): _curve([100, 200, 300], [1.0, float("nan"), 3.0])}
    with pytest.raises(AlfError) as e:
        cur.align(curves)
    assert str(e.value) == (
        "run b/seed1: average_return in eval.csv is not a number (nan at "
        "env step 200); such a run cannot be compared (did its training "
        "diverge?)")


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
    _, lines = cur.verdict(stats, 0.1, 25, test=_no_ttest)
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


def test_two_sides_without_spread_are_judged_by_their_difference():
    # scipy's p for two different constants is 0 and its interval NaN.
    assert cur.welch_pvalue([500.0] * 3, [490.0] * 3) == (
        None, "no spread across seeds")
    outcome, lines = cur.verdict(_stats([(500, 400)] * 3, [(490, 400)] * 3),
                                 0.1, 25)
    assert outcome == "AGREE", lines
    assert "nan" not in " ".join(lines)
