r"""Compare a config trained single-process and with DDP (a regression check).

    python -m alf.bin.compare --gin_file ppo_cart_pole.gin --num_processes 2 \
        --seeds 3 --root_dir DIR [--gin_param ...] [--parallel]

Trains (or reuses) DIR/single/seed{s} and DIR/ddp{N}/seed{s} with
alf.bin.train, then writes DIR/compare.csv and DIR/compare.png and prints a
verdict. Exit codes: 0 the modes agree, 3 they do not, 1 an error (a failed
run is named with its log, DIR/<mode>/seed{s}.log), 130 interrupted.
"""
import math
import warnings
import os
import signal
import subprocess
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
from absl import app, flags

from alf.utils.errors import AlfError, one_line

flags.DEFINE_string("root_dir", None, "Folder for the runs and the results.")
flags.DEFINE_multi_string("gin_file", None, "Gin file(s), as for train.py.")
flags.DEFINE_multi_string("gin_param", None, "Gin binding(s) for every run.")
flags.DEFINE_integer("num_processes", 2, "DDP world size.", lower_bound=2)
flags.DEFINE_integer("seeds", 3, "Seeds 0..seeds-1 per mode.", lower_bound=1)
flags.DEFINE_bool("parallel", False, "Run 2 trainings at a time.")
flags.DEFINE_float("tol_rel", 0.1, "Tolerance, relative to the single mean.")
flags.DEFINE_float("tol_abs", 25.0, "Tolerance, absolute (in return units).")
FLAGS = flags.FLAGS

EXIT_AGREE, EXIT_ERROR, EXIT_DISAGREE, EXIT_INTERRUPTED = 0, 1, 3, 130
Run = Tuple[str, int]  # (mode, seed)


def _start(cmd: List[str], log_path: str) -> subprocess.Popen:
    from alf.bin.launch import die_with_parent  # no run outlives this tool
    env = {k: v for k, v in os.environ.items()  # else train.py joins torchrun
           if k not in ("RANK", "WORLD_SIZE")}
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    with open(log_path, "a") as log:  # append: a rerun keeps the first log
        print("===", *cmd, file=log, flush=True)
        # Own session: a terminal Ctrl-C reaches only this tool, which passes
        # one SIGINT on (a second one would skip train.py's clean stop).
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True,
                                preexec_fn=die_with_parent)


def run_all(jobs: Dict[Run, List[str]], root: str, parallel: int) -> None:
    """Runs the commands, ``parallel`` at a time, logging to
    ``root/<mode>/seed<s>.log``.

    Raises:
        AlfError: naming the first run that failed and its log (runs still
            going get SIGINT: train.py saves a checkpoint and stops).
    """
    pending, running = list(jobs), {}  # Popen -> (run, log, offset, start)
    try:
        while pending or running:
            while pending and len(running) < parallel:
                mode, seed = run = pending.pop(0)
                log = os.path.join(root, mode, f"seed{seed}.log")
                offset = os.path.getsize(log) if os.path.exists(log) else 0
                running[_start(jobs[run], log)] = run, log, offset, time.time()
            time.sleep(0.2)
            for proc in [p for p in running if p.poll() is not None]:
                (mode, seed), log, offset, start = running.pop(proc)
                with open(log, errors="replace") as f:
                    f.seek(offset)  # this run's output only
                    out = f.read().splitlines()
                if proc.returncode != 0:
                    # Quote train.py's one-line error, not trailing noise.
                    said = [x for x in out if x.startswith("alf.bin.train:")]
                    why = f": {said[-1]}" if said else ""
                    raise AlfError(f"run {mode}/seed{seed} failed (exit code "
                                   f"{proc.returncode}){why}; log: {log}")
                what = ("reused" if any("already finished" in x for x in out)
                        else f"trained in {time.time() - start:.0f} s")
                print(f"{mode}/seed{seed}: {what}", flush=True)
    finally:  # after a failure or Ctrl-C; train.py's launcher escalates
        for proc in running:
            proc.send_signal(signal.SIGINT)
        for proc in running:
            proc.wait()


def align(curves: Dict[Run, Dict[str, list]], reference: str = "single"
          ) -> Tuple[np.ndarray, Dict[Run, np.ndarray]]:
    """Puts every run's ``average_return`` on one env-step grid: the union
    of the ``reference`` runs' evaluation steps that all runs cover (no
    extrapolation), each run linearly interpolated onto it.

    Args:
        curves: (mode, seed) -> eval.csv columns, as `read_eval_csv` returns.
        reference: the mode whose evaluation steps make the grid.

    Returns:
        The grid (int env steps) and (mode, seed) -> returns on the grid.

    Raises:
        AlfError: if a run has no evaluation or no step is covered by all.
    """
    for (mode, seed), c in curves.items():
        if not c.get("env_steps"):
            raise AlfError(f"run {mode}/seed{seed} has no row in eval.csv")
    lo = max(c["env_steps"][0] for c in curves.values())
    hi = min(c["env_steps"][-1] for c in curves.values())
    grid = np.array(sorted({s for (m, _), c in curves.items()
                            if m == reference for s in c["env_steps"]
                            if lo <= s <= hi}), int)
    if not len(grid):
        raise AlfError(f"no {reference} evaluation step is covered by all "
                       f"runs (the latest first evaluation is at {lo:g} env "
                       f"steps, the earliest last one at {hi:g})")
    return grid, {run: np.interp(grid, c["env_steps"], c["average_return"])
                  for run, c in curves.items()}


def normalized_auc(steps: Sequence[float], values: Sequence[float]) -> float:
    """Trapezoid area under ``values`` over ``steps``, divided by the step
    span: the curve's average height (the value itself for a single step)."""
    steps, values = np.asarray(steps, float), np.asarray(values, float)
    if len(steps) < 2:
        return float(values[0])
    # By hand: np.trapezoid is numpy >= 2 only, np.trapz was removed there.
    area = ((values[1:] + values[:-1]) / 2 * np.diff(steps)).sum()
    return float(area / (steps[-1] - steps[0]))


def final_return(values: Sequence[float], last: int = 3) -> float:
    """Mean of the last ``last`` values (one evaluation is noisy)."""
    return float(np.mean(np.asarray(values, float)[-last:]))


def welch_pvalue(a: Sequence[float], b: Sequence[float]
                 ) -> Tuple[Optional[float], str]:
    """Two-sided p-value of Welch's t-test: ``(p, "")``, or ``(None, why)``
    when scipy (optional) is missing or the samples cannot be tested."""
    if len(a) < 2 or len(b) < 2:
        return None, "needs 2 seeds or more per mode"
    try:
        from scipy import stats
    except ImportError:
        return None, "scipy is not installed"
    with warnings.catch_warnings():  # near-identical samples warn; p is NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        p = float(stats.ttest_ind(a, b, equal_var=False).pvalue)
    return (p, "") if math.isfinite(p) else (None, "no spread across seeds")


def verdict(stats: Dict[str, Dict[int, Dict[str, float]]], tol_rel: float,
            tol_abs: float, alpha: float = 0.05,
            pvalue: Callable = welch_pvalue) -> Tuple[bool, List[str]]:
    """Decides whether two modes trained equally well (both criteria shown).

    Welch's t-test on the per-seed values decides when it can be computed
    for both metrics: the modes agree unless one differs with p < ``alpha``
    (with few seeds it finds only large differences). Otherwise the tolerance
    criterion decides: they agree when ``|mean_other - mean_ref| <=
    max(tol_abs, tol_rel * |mean_ref|)`` for both metrics.

    Args:
        stats: mode -> seed -> {"final": ..., "auc": ...}; two modes, the
            reference (single process) first.
        tol_rel, tol_abs, alpha: the bounds and the test's level.
        pvalue: the test, ``(a, b) -> (p or None, why not)``.

    Returns:
        Whether they agree, and the report's lines (the last one names the
        criterion that decided).
    """
    (ref, a), (other, b) = stats.items()
    lines = [f"{'mode':<8}{'seed':>5}{'final return':>14}{'norm. AUC':>11}"]
    lines += [f"{m:<8}{s:>5}{v['final']:>14.2f}{v['auc']:>11.2f}"
              for m, per_seed in stats.items() for s, v in per_seed.items()]
    tol_ok, t_ok, why_not = True, True, set()
    for key, name in (("final", "final return"), ("auc", "normalized AUC")):
        xa, xb = [v[key] for v in a.values()], [v[key] for v in b.values()]
        ma, mb = float(np.mean(xa)), float(np.mean(xb))
        bound = max(tol_abs, tol_rel * abs(ma))
        within = abs(mb - ma) <= bound
        p, why = pvalue(xa, xb)
        tol_ok, t_ok = tol_ok and within, t_ok and (p is None or p >= alpha)
        why_not |= {why} - {""}
        test = f"Welch p = {p:.3f}" if p is not None else f"no t-test ({why})"
        lines.append(f"{name}: mean {ref} {ma:.2f}, mean {other} {mb:.2f}, "
                     f"difference {mb - ma:+.2f} (tolerance {bound:.2f}: "
                     f"{'within' if within else 'EXCEEDED'}); {test}")
    criterion = "tolerance" if why_not else "Welch's t-test"
    agree = tol_ok if why_not else t_ok
    rule = (f"agree when |difference| <= max({tol_abs:g}, {tol_rel:g} x "
            f"|mean {ref}|) for both metrics (t-test not used: "
            f"{'; '.join(sorted(why_not))})" if why_not else
            f"agree unless p < {alpha:g} for final return or normalized AUC")
    lines += [f"criterion: {criterion}: {rule}",
              f"verdict: {ref} and {other} {'AGREE' if agree else 'DISAGREE'}"
              f" (decided by the {criterion} criterion)"]
    return agree, lines


def write_compare_csv(path: str, grid: Sequence[int],
                      values: Dict[Run, Sequence[float]]) -> None:
    """Writes ``env_steps,mode,seed,average_return``: one row per run per
    grid step (long format), runs in the order of ``values``."""
    with open(path, "w") as f:
        f.write("env_steps,mode,seed,average_return\n")
        for (mode, seed), vals in values.items():
            f.writelines(f"{int(s)},{mode},{seed},{float(v):.6g}\n"
                         for s, v in zip(grid, vals))


def plot(path: str, grid: Sequence[int], values: Dict[Run, np.ndarray],
         title: str) -> None:
    """Saves each mode's mean curve and min-max band over seeds."""
    import matplotlib
    matplotlib.use("Agg")  # no display on servers and in tests
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for mode in dict.fromkeys(m for m, _ in values):
        ys = np.stack([v for (m, _), v in values.items() if m == mode])
        ax.plot(grid, ys.mean(0), label=f"{mode}: mean, min-max of {len(ys)}")
        ax.fill_between(grid, ys.min(0), ys.max(0), alpha=0.25)
    ax.set(xlabel="env steps", ylabel="average return", title=title)
    ax.legend()
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)


def train_commands(root: str, gin_files: Sequence[str],
                   gin_params: Sequence[str], num_processes: int,
                   seeds: int) -> Dict[Run, List[str]]:
    """(mode, seed) -> its ``alf.bin.train`` command, seed by seed."""
    modes = {"single": [], f"ddp{num_processes}": [
        "--distributed", "multi-process", "--num_processes",
        str(num_processes)]}
    args = [a for g in gin_files for a in ("--gin_file", g)]
    args += [a for p in gin_params for a in ("--gin_param", p)]
    return {(mode, seed): [
        sys.executable, "-m", "alf.bin.train", "--root_dir",
        os.path.join(root, mode, f"seed{seed}"), *dist, *args, "--gin_param",
        f"TrainerConfig.seed={seed}"]  # last, so the user's cannot win
        for seed in range(seeds) for mode, dist in modes.items()}


def main(argv: List[str]) -> int:
    """The absl entry point; returns the process exit code."""
    from alf.trainers.evaluator import read_eval_csv
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    try:
        if not FLAGS.root_dir or not FLAGS.gin_file:
            raise AlfError("--root_dir and --gin_file are required")
        root = os.path.abspath(os.path.expanduser(FLAGS.root_dir))
        jobs = train_commands(root, FLAGS.gin_file, FLAGS.gin_param or [],
                              FLAGS.num_processes, FLAGS.seeds)
        parallel = 2 if FLAGS.parallel else 1
        print(f"{len(jobs)} runs, {parallel} at a time; logs in "
              f"{root}/<mode>/seed<s>.log", flush=True)
        run_all(jobs, root, parallel)
        # The reference mode first: its runs make the grid and lead the table.
        runs = sorted(jobs, key=lambda r: (r[0] != "single", r[1]))
        grid, values = align({(m, s): read_eval_csv(os.path.join(
            root, m, f"seed{s}", "eval.csv")) for m, s in runs})
        config = "+".join(os.path.basename(g) for g in FLAGS.gin_file)
        title = (f"{config}, single vs DDP N={FLAGS.num_processes}, "
                 f"{FLAGS.seeds} seed(s)")
        write_compare_csv(os.path.join(root, "compare.csv"), grid, values)
        plot(os.path.join(root, "compare.png"), grid, values, title)
    except KeyboardInterrupt:
        print("alf.bin.compare: interrupted; rerun to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (AlfError, OSError) as e:
        print(f"alf.bin.compare: error: {one_line(e)}", file=sys.stderr)
        return EXIT_ERROR
    stats = {}
    for (mode, seed), v in values.items():
        stats.setdefault(mode, {})[seed] = {"final": final_return(v),
                                            "auc": normalized_auc(grid, v)}
    agree, lines = verdict(stats, FLAGS.tol_rel, FLAGS.tol_abs)
    print(f"{title}: {len(grid)} evaluation steps, {grid[0]} to {grid[-1]} "
          f"env steps; wrote {root}/compare.csv and compare.png", *lines,
          sep="\n", flush=True)
    return EXIT_AGREE if agree else EXIT_DISAGREE


if __name__ == "__main__":
    app.run(lambda argv: sys.exit(main(argv)))
