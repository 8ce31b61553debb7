"""Learning curves read from runs' evaluation files and judged side by
side: put on one env-step grid, summarised (final value, normalised area
under the curve), judged against a tolerance (Welch's t-test saying
whether the seeds pin the difference down), written and plotted.
`alf.bin.compare` trains the runs; this module only reads them.

Imports no torch until a run's file is read, so that a CLI importing it
can define its flags first.
"""
import math
import os
import sys
import warnings
from typing import (Callable, Dict, List, Mapping, NamedTuple, Optional,
                    Sequence, Tuple, Union)

import numpy as np

from alf.utils.errors import AlfError

# The evaluation files' names, as alf.trainers.evaluator writes them
# (importing it would import torch).
EVAL_CSV, HELD_OUT_CSV = "eval.csv", "eval_held_out.csv"
# alf.trainers.calibration's: every candidate offset's scores.
CALIBRATION_CSV = "calibration.csv"
DEFAULT_METRIC = "average_return"
# How many skipped rows a warning names (a damaged file may have many).
_SHOWN = 5
Run = Tuple[str, int]  # (side name, seed)
# Env steps and returns: lists, or arrays as `align` makes them.
Ints = Union[Sequence[int], np.ndarray]
Floats = Union[Sequence[float], np.ndarray]


def align(curves: Dict[Run, Dict[str, list]], reference: Optional[str] = None,
          metric: str = DEFAULT_METRIC, csv_name: str = EVAL_CSV
          ) -> Tuple[np.ndarray, Dict[Run, np.ndarray]]:
    """Puts every run's ``metric`` on one env-step grid: the union of the
    ``reference`` runs' evaluation steps that all runs cover (no
    extrapolation), each run linearly interpolated onto it.

    Args:
        curves: (side, seed) -> eval.csv columns, as `read_eval_csv` returns.
        reference: the side whose evaluation steps make the grid; by
            default the first run's.
        metric: the column to align.
        csv_name: the file the curves came from, for the errors.

    Returns:
        The grid (int env steps) and (side, seed) -> values on the grid.

    Raises:
        AlfError: if a run has no evaluation, no ``metric`` column or a
            ``metric`` value that is not finite, or no step is covered by
            all.
    """
    if reference is None:
        reference = next(iter(curves))[0]
    for (name, seed), c in curves.items():
        if not c.get("env_steps"):
            raise AlfError(f"run {name}/seed{seed} has no row in {csv_name}")
        if metric not in c:
            valid = sorted(set(c) - {"env_steps"})
            raise AlfError(f"--metric {metric!r} is not a column of "
                           f"{name}/seed{seed}/{csv_name}; valid: {valid}")
        bad = [(s, v) for s, v in zip(c["env_steps"], c[metric])
               if not math.isfinite(v)]
        if bad:
            # Interpolated, it would turn the final value and the area into
            # NaN and the verdict into noise.
            at = ", ".join(f"{v} at env step {s:g}" for s, v in bad[:_SHOWN])
            more = f" and {len(bad) - _SHOWN} more" if len(bad) > _SHOWN else ""
            raise AlfError(f"run {name}/seed{seed}: {metric} in {csv_name} "
                           f"is not a number ({at}{more}); such a run "
                           "cannot be compared (did its training diverge?)")
    lo = max(c["env_steps"][0] for c in curves.values())
    hi = min(c["env_steps"][-1] for c in curves.values())
    grid = np.array(sorted({s for (m, _), c in curves.items()
                            if m == reference for s in c["env_steps"]
                            if lo <= s <= hi}), int)
    if not len(grid):
        raise AlfError(f"no {reference} evaluation step is covered by all "
                       f"runs (the latest first evaluation is at {lo:g} env "
                       f"steps, the earliest last one at {hi:g})")
    return grid, {run: np.interp(grid, c["env_steps"], c[metric])
                  for run, c in curves.items()}


def normalized_auc(steps: Floats, values: Floats) -> float:
    """Trapezoid area under ``values`` over ``steps``, divided by the step
    span: the curve's average height (the value itself for a single step)."""
    steps, values = np.asarray(steps, float), np.asarray(values, float)
    if len(steps) < 2:
        return float(values[0])
    # By hand: np.trapezoid is numpy >= 2 only, np.trapz was removed there.
    area = ((values[1:] + values[:-1]) / 2 * np.diff(steps)).sum()
    return float(area / (steps[-1] - steps[0]))


def final_value(values: Floats, last: int = 3) -> float:
    """Mean of the last ``last`` values (one evaluation is noisy)."""
    return float(np.mean(np.asarray(values, float)[-last:]))


def welch_pvalue(a: Sequence[float], b: Sequence[float]
                 ) -> Tuple[Optional[float], str]:
    """Two-sided p-value of Welch's t-test: ``(p, "")``, or ``(None, why)``
    when the samples cannot be tested (fewer than 2 seeds, no spread)."""
    if len(a) < 2 or len(b) < 2:
        return None, "needs 2 seeds or more per mode"
    if np.var(a) == 0 and np.var(b) == 0:
        # scipy gives p = 0 for two different constants (every CartPole
        # seed at 500, a success rate of 1): there is nothing to test.
        return None, "no spread across seeds"
    # A dependency of alf, never optional: the verdict must not depend on
    # what else is installed.
    from scipy import stats
    with warnings.catch_warnings():  # near-identical samples warn; p is NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        p = float(stats.ttest_ind(a, b, equal_var=False).pvalue)
    return (p, "") if math.isfinite(p) else (None, "no spread across seeds")


class Welch(NamedTuple):
    """Welch's t-test of ``mean(b) - mean(a)``."""
    p: float  # two-sided, for "the means differ"
    low: float  # the (1 - 2 alpha) confidence interval of the difference
    high: float


def welch_test(a: Sequence[float], b: Sequence[float], alpha: float = 0.05
               ) -> Tuple[Optional[Welch], str]:
    """Welch's t-test of ``mean(b) - mean(a)``: its two-sided p-value and
    its ``1 - 2 alpha`` confidence interval (the two one-sided tests of an
    equivalence test at level ``alpha`` pass when that interval lies within
    the bounds); ``(None, why)`` when the samples cannot be tested."""
    p, why = welch_pvalue(a, b)
    if p is None:
        return None, why
    from scipy import stats
    xa, xb = np.asarray(a, float), np.asarray(b, float)
    va, vb = xa.var(ddof=1) / len(xa), xb.var(ddof=1) / len(xb)
    se = math.sqrt(va + vb)
    # Welch-Satterthwaite; a side without spread adds nothing (0 / 0 kept
    # out: p is finite, so one side has spread).
    df = (va + vb) ** 2 / sum(v * v / (len(x) - 1)
                              for v, x in ((va, xa), (vb, xb)) if v > 0)
    half = float(stats.t.ppf(1 - alpha, df)) * se
    diff = float(xb.mean() - xa.mean())
    return Welch(p, diff - half, diff + half), ""


AGREE, DISAGREE, INCONCLUSIVE = "AGREE", "DISAGREE", "INCONCLUSIVE"


def _judge(diff: float, bound: float, test: Optional[Welch], why: str,
           alpha: float, d: int) -> Tuple[str, str]:
    """One figure's outcome (`AGREE`, `DISAGREE` or `INCONCLUSIVE`) and
    why, in words."""
    within = abs(diff) <= bound
    if test is None:  # one seed, or no spread: the difference is all there is
        how = f"no t-test ({why}): the difference decides"
        if within:
            return AGREE, f"within tolerance {bound:.{d}f}; {how}"
        return DISAGREE, f"EXCEEDS tolerance {bound:.{d}f}; {how}"
    level = round(100 * (1 - 2 * alpha))
    ci = (f"{level}% CI [{test.low:+.{d}f}, {test.high:+.{d}f}]")
    significant = test.p < alpha
    p = (f"Welch p = {test.p:.3f}: "
         f"{'significant' if significant else 'not significant'}")
    if -bound <= test.low and test.high <= bound:
        # A real but small difference is still agreement: the tolerance
        # says what difference matters.
        tail = ", but within tolerance" if significant else ""
        return AGREE, (f"{ci} within tolerance ±{bound:.{d}f} ({p}{tail})")
    if not within and significant:
        return DISAGREE, (f"EXCEEDS tolerance {bound:.{d}f} and the "
                          f"difference is real ({p}; {ci})")
    if within:
        return INCONCLUSIVE, (f"within tolerance {bound:.{d}f}, but its "
                              f"{ci} is not ({p}): more seeds needed")
    return INCONCLUSIVE, (f"exceeds tolerance {bound:.{d}f}, but {p} "
                          f"({ci}): more seeds needed")


def verdict(stats: Dict[str, Dict[int, Dict[str, float]]], tol_rel: float,
            tol_abs: float, alpha: float = 0.05,
            test: Callable = welch_test,
            label: str = "return") -> Tuple[str, List[str]]:
    """Decides whether two sides trained equally well, on the final value
    and on the normalized AUC, each against the tolerance
    ``max(tol_abs, tol_rel * |mean_ref|)``: the size of the difference
    decides, the t-test only says whether the seeds pin it down.

    Per figure, with a t-test (2 or more seeds per side, with spread):
    AGREE when the ``1 - 2 alpha`` confidence interval of the difference
    lies within ± the tolerance (an equivalence test; a significant
    difference within it still agrees), DISAGREE when the difference
    exceeds the tolerance and is significant (p < ``alpha``), otherwise
    INCONCLUSIVE (more seeds needed). Without one the difference itself
    decides: within the tolerance AGREE, else DISAGREE. The sides
    DISAGREE if a figure does, else are INCONCLUSIVE if a figure is, else
    AGREE.

    Args:
        stats: side -> seed -> {"final": ..., "auc": ...}; two sides, the
            reference (side A) first.
        tol_rel, tol_abs, alpha: the bounds and the tests' level.
        test: ``(a, b, alpha) -> (Welch or None, why not)``.
        label: what the values are, for the report ("final <label>").

    Returns:
        The outcome (`AGREE`, `DISAGREE` or `INCONCLUSIVE`) and the
        report's lines (the last one the verdict).

    Raises:
        AlfError: naming the side and seed of a value that is not finite.
    """
    (ref, a), (other, b) = stats.items()
    final = f"final {label}"
    for key, name in (("final", final), ("auc", "normalized AUC")):
        for side, per_seed in stats.items():
            for seed, v in per_seed.items():
                if not math.isfinite(v[key]):
                    raise AlfError(f"{name} of run {side}/seed{seed} is "
                                   f"{v[key]}: nothing can be compared on "
                                   "it")
    w = max(8, 2 + max(len(name) for name in stats))  # the table's 1st column
    fw = max(14, len(final) + 2)
    # Returns read well with 2 decimals; rates and fractions need 3.
    d = 2 if label == "return" else 3
    lines = [f"{'mode':<{w}}{'seed':>5}{final:>{fw}}{'norm. AUC':>11}"]
    lines += [f"{m:<{w}}{s:>5}{v['final']:>{fw}.{d}f}{v['auc']:>11.{d}f}"
              for m, per_seed in stats.items() for s, v in per_seed.items()]
    outcomes = {}
    for key, name in (("final", final), ("auc", "normalized AUC")):
        xa, xb = [v[key] for v in a.values()], [v[key] for v in b.values()]
        ma, mb = float(np.mean(xa)), float(np.mean(xb))
        bound = max(tol_abs, tol_rel * abs(ma))
        tested, why_not = test(xa, xb, alpha)
        outcome, why = _judge(mb - ma, bound, tested, why_not, alpha, d)
        outcomes[name] = outcome
        lines.append(f"{name}: mean {ref} {ma:.{d}f}, mean {other} "
                     f"{mb:.{d}f}, difference {mb - ma:+.{d}f}: {why} -> "
                     f"{outcome}")
    level = round(100 * (1 - 2 * alpha))
    lines.append(
        f"rule, per figure: tolerance max({tol_abs:g}, {tol_rel:g} x "
        f"|mean {ref}|); AGREE when the difference's {level}% CI is within "
        f"it, DISAGREE when the difference exceeds it with Welch p < "
        f"{alpha:g}, else INCONCLUSIVE (with 1 seed or no spread: the "
        "difference alone decides)")
    for outcome in (DISAGREE, INCONCLUSIVE, AGREE):
        which = [name for name, o in outcomes.items() if o == outcome]
        if which:
            break
    reasons = {AGREE: "both figures within tolerance",
               DISAGREE: f"{' and '.join(which)} beyond tolerance",
               INCONCLUSIVE: f"more seeds needed for {' and '.join(which)}"}
    lines.append(f"verdict: {ref} and {other} {outcome} "
                 f"({reasons[outcome]})")
    return outcome, lines


def write_compare_csv(path: str, grid: Ints,
                      values: Mapping[Run, Floats],
                      metric: str = DEFAULT_METRIC) -> None:
    """Writes ``env_steps,mode,seed,<metric>``: one row per run per grid
    step (long format; ``mode`` is the side's name), runs in the order of
    ``values``."""
    with open(path, "w") as f:
        f.write(f"env_steps,mode,seed,{metric}\n")
        for (name, seed), vals in values.items():
            f.writelines(f"{int(s)},{name},{seed},{float(v):.6g}\n"
                         for s, v in zip(grid, vals))


def plot(path: str, grid: Ints, values: Dict[Run, np.ndarray],
         title: str, metric: str = DEFAULT_METRIC) -> None:
    """Saves each side's mean curve and min-max band over seeds (a side
    with one seed: its curve), labelled with the side's name."""
    import matplotlib
    matplotlib.use("Agg")  # no display on servers and in tests
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name in dict.fromkeys(m for m, _ in values):
        ys = np.stack([v for (m, _), v in values.items() if m == name])
        if len(ys) == 1:  # no spread to show
            ax.plot(grid, ys[0], label=f"{name}: 1 seed")
            continue
        ax.plot(grid, ys.mean(0),
                label=f"{name}: mean, min-max of {len(ys)} seeds")
        ax.fill_between(grid, ys.min(0), ys.max(0), alpha=0.25)
    ax.set(xlabel="env steps", ylabel=metric.replace("_", " "), title=title)
    ax.legend()
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)


def read_curves(run_dir: str, csv_name: str, prog: str = "alf"
                ) -> Dict[str, list]:
    """A run's evaluation columns from ``run_dir/csv_name``; rows that
    cannot be read (a crash cut one short) are left out and named in one
    line on stderr, ``<prog>: warning: skipped ...``.

    Raises:
        AlfError: if the run wrote no such file (a held-out comparison of
            runs that had no held-out environments).
    """
    from alf.trainers.evaluator import read_eval_csv  # imports torch
    path = os.path.join(run_dir, csv_name)
    if os.path.isdir(path):
        raise AlfError(f"{path} is a folder, not the run's {csv_name}")
    if not os.path.isfile(path):
        hint = (" (the run had no TrainerConfig.held_out_env_load_fn)"
                if csv_name == HELD_OUT_CSV else "")
        raise AlfError(f"{path} does not exist{hint}")
    skipped: List[str] = []
    curves = read_eval_csv(path, skipped)
    warn_skipped(prog, path, skipped)
    return curves


def warn_skipped(prog: str, path: str, skipped: Sequence[str]) -> None:
    """Names, in one line on stderr, the rows of ``path`` that a reader
    left out (see `alf.trainers.evaluator.read_csv_rows`)."""
    if skipped:
        n, shown = len(skipped), ", ".join(skipped[:_SHOWN])
        more = f" and {n - _SHOWN} more" if n > _SHOWN else ""
        print(f"{prog}: warning: skipped {n} incomplete or non-numeric "
              f"row{'s' if n > 1 else ''} of {path} ({shown}{more})",
              file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit("alf.bin.curves is the library behind alf.bin.compare and "
             "alf.bin.report, not a command: run one of those (--help "
             "lists their flags)")
