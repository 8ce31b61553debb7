"""Learning curves read from runs' evaluation files and judged side by
side: put on one env-step grid, summarised (final value, normalised area
under the curve), tested (Welch's t-test or a tolerance), written and
plotted. `alf.bin.compare` trains the runs; this module only reads them.

Imports no torch until a run's file is read, so that a CLI importing it
can define its flags first.
"""
import math
import os
import sys
import warnings
from typing import (Callable, Dict, List, Mapping, Optional, Sequence, Tuple,
                    Union)

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
        AlfError: if a run has no evaluation or no ``metric`` column, or
            no step is covered by all.
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
    # A dependency of alf, never optional: the verdict must not depend on
    # what else is installed.
    from scipy import stats
    with warnings.catch_warnings():  # near-identical samples warn; p is NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        p = float(stats.ttest_ind(a, b, equal_var=False).pvalue)
    return (p, "") if math.isfinite(p) else (None, "no spread across seeds")


def verdict(stats: Dict[str, Dict[int, Dict[str, float]]], tol_rel: float,
            tol_abs: float, alpha: float = 0.05,
            pvalue: Callable = welch_pvalue,
            label: str = "return") -> Tuple[bool, List[str]]:
    """Decides whether two sides trained equally well (both criteria shown,
    the deciding one first).

    Welch's t-test on the per-seed values decides when it can be computed
    for both metrics: the sides agree unless one differs with p < ``alpha``
    (with few seeds it finds only large differences). Otherwise the tolerance
    criterion decides: they agree when ``|mean_other - mean_ref| <=
    max(tol_abs, tol_rel * |mean_ref|)`` for both metrics.

    Args:
        stats: side -> seed -> {"final": ..., "auc": ...}; two sides, the
            reference (side A) first.
        tol_rel, tol_abs, alpha: the bounds and the test's level.
        pvalue: the test, ``(a, b) -> (p or None, why not)``.
        label: what the values are, for the report ("final <label>").

    Returns:
        Whether they agree, and the report's lines (the last one names the
        criterion that decided).
    """
    (ref, a), (other, b) = stats.items()
    w = max(8, 2 + max(len(name) for name in stats))  # the table's 1st column
    final = f"final {label}"
    fw = max(14, len(final) + 2)
    # Returns read well with 2 decimals; rates and fractions need 3.
    d = 2 if label == "return" else 3
    lines = [f"{'mode':<{w}}{'seed':>5}{final:>{fw}}{'norm. AUC':>11}"]
    lines += [f"{m:<{w}}{s:>5}{v['final']:>{fw}.{d}f}{v['auc']:>11.{d}f}"
              for m, per_seed in stats.items() for s, v in per_seed.items()]
    figures = []  # per metric: its name, means, bound and p (or why not)
    for key, name in (("final", final), ("auc", "normalized AUC")):
        xa, xb = [v[key] for v in a.values()], [v[key] for v in b.values()]
        ma, mb = float(np.mean(xa)), float(np.mean(xb))
        figures.append((name, ma, mb, max(tol_abs, tol_rel * abs(ma)),
                        *pvalue(xa, xb)))
    why_not = {why for *_, why in figures if why}
    criterion = "tolerance" if why_not else "Welch's t-test"
    agree = True
    # Each line leads with the deciding criterion; the other one follows,
    # marked unused and in lowercase, so that it does not read as the
    # verdict (an EXCEEDED tolerance beside a Welch AGREE, say).
    for name, ma, mb, bound, p, why in figures:
        within = abs(mb - ma) <= bound
        tol = f"tolerance {bound:.{d}f}: {'within' if within else 'EXCEEDED'}"
        if why_not:
            agree = agree and within
            test = (f"Welch p = {p:.3f} (not used: the tolerance decides)"
                    if p is not None else f"no t-test ({why})")
            judged = f"({tol}); {test}"
        else:
            agree = agree and p >= alpha
            judged = (f"(Welch p = {p:.3f}: "
                      f"{'SIGNIFICANT' if p < alpha else 'not significant'}"
                      f"); {tol.lower()} (not used: Welch decides)")
        lines.append(f"{name}: mean {ref} {ma:.{d}f}, mean {other} "
                     f"{mb:.{d}f}, difference {mb - ma:+.{d}f} {judged}")
    rule = (f"agree when |difference| <= max({tol_abs:g}, {tol_rel:g} x "
            f"|mean {ref}|) for both metrics (t-test not used: "
            f"{'; '.join(sorted(why_not))})" if why_not else
            f"agree unless p < {alpha:g} for {final} or normalized AUC")
    lines += [f"criterion: {criterion}: {rule}",
              f"verdict: {ref} and {other} {'AGREE' if agree else 'DISAGREE'}"
              f" (decided by the {criterion} criterion)"]
    return agree, lines


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
    if not os.path.isfile(path):
        hint = (" (the run had no TrainerConfig.held_out_env_load_fn)"
                if csv_name == HELD_OUT_CSV else "")
        raise AlfError(f"{path} does not exist{hint}")
    skipped: List[str] = []
    curves = read_eval_csv(path, skipped)
    if skipped:
        n, shown = len(skipped), ", ".join(skipped[:_SHOWN])
        more = f" and {n - _SHOWN} more" if n > _SHOWN else ""
        print(f"{prog}: warning: skipped {n} incomplete or non-numeric "
              f"row{'s' if n > 1 else ''} of {path} ({shown}{more})",
              file=sys.stderr, flush=True)
    return curves
