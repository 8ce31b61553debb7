r"""Compare two settings of a config, each trained over seeds (a regression
check).

By default side A trains in one process and side B with N DDP processes:

    python -m alf.bin.compare --gin_file ppo_cart_pole.gin --num_processes 2 \
        --seeds 3 --root_dir DIR [--gin_param ...] [--parallel]

Any two settings: gin bindings and a process count for each side, e.g.

    python -m alf.bin.compare --gin_file ppo_cart_pole.gin --seeds 3 \
        --root_dir DIR --a_param 'TrainerConfig.unroll_mode="sync"' \
        --b_param 'TrainerConfig.unroll_mode="async"' \
        [--a_name sync --b_name async] [--a_processes N] [--b_processes N]

Trains (or reuses, when finished) DIR/<A>/seed{s} and DIR/<B>/seed{s} with
alf.bin.train, where <A> and <B> are the sides' names (by default single and
ddp{N}, or a and b when --a_param or --b_param is given), then writes
DIR/compare.csv and DIR/compare.png and prints a verdict with side A as the
reference. Exit codes: 0 the sides agree, 3 they do not, 1 an error (a failed
run is named with its log, DIR/<side>/seed{s}.log), 130 interrupted.

The sides are compared on ``average_return`` in each run's eval.csv unless
``--metric`` names another of its columns (MetaDrive's ``route_completion``,
``success_rate``...; then ``--tol_abs`` in that metric's units is
required); ``--held_out`` compares the held-out evaluations
(eval_held_out.csv) instead. Those results go to
DIR/compare[-<metric>][-held_out].csv and .png.
"""
import dataclasses
import json
import math
import warnings
import os
import re
import signal
import subprocess
import sys
import time
from typing import (Callable, Dict, List, Mapping, Optional, Sequence, Tuple,
                    Union)

import numpy as np
from absl import app, flags

from alf.utils.errors import AlfError, one_line

# The evaluation files' names, as alf.trainers.evaluator writes them
# (importing it would import torch before the flags are read).
EVAL_CSV, HELD_OUT_CSV = "eval.csv", "eval_held_out.csv"


def define_flags() -> None:
    """The CLI's flags: defined when run as a program, not on import, so
    that scripts (benchmarks/runs.py) can import this module beside
    another alf CLI (each defines ``--root_dir``)."""
    flags.DEFINE_string("root_dir", None, "Folder for the runs and the results.")
    flags.DEFINE_multi_string("gin_file", None, "Gin file(s), as for train.py.")
    flags.DEFINE_multi_string("gin_param", None, "Gin binding(s) for every run.")
    flags.DEFINE_multi_string("a_param", None, "Gin binding(s) for side A's runs "
                              "only, applied after --gin_param.")
    flags.DEFINE_multi_string("b_param", None, "Gin binding(s) for side B's runs "
                              "only, applied after --gin_param.")
    flags.DEFINE_string("a_name", None, "Side A's name: its folder under "
                        "--root_dir and its label. Default: 'a' with --a_param or "
                        "--b_param, else 'single' (ddp{N} for N processes).")
    flags.DEFINE_string("b_name", None, "Side B's name: its folder under "
                        "--root_dir and its label. Default: 'b' with --a_param or "
                        "--b_param, else ddp{N} ('single' for 1 process).")
    flags.DEFINE_integer("a_processes", None, "Processes per run of side A (N > 1:"
                         " --distributed multi-process --num_processes N). "
                         "Default 1.", lower_bound=1)
    flags.DEFINE_integer("b_processes", None, "Processes per run of side B. "
                         "Default: --num_processes, or 1 with --a_param or "
                         "--b_param.", lower_bound=1)
    flags.DEFINE_integer("num_processes", 2, "Side B's DDP world size in the "
                         "default 1-vs-N form (not with --a_param, --b_param or "
                         "--b_processes).", lower_bound=2)
    flags.DEFINE_integer("seeds", 3, "Seeds 0..seeds-1 per side.", lower_bound=1)
    flags.DEFINE_bool("parallel", False, "Run 2 trainings at a time.")
    flags.DEFINE_float("tol_rel", 0.1, "Tolerance, relative to side A's mean.")
    flags.DEFINE_float("tol_abs", None, "Tolerance, absolute, in the "
                       "metric's units. Default: 25 for average_return; "
                       "required for any other --metric.")
    flags.DEFINE_string("metric", DEFAULT_METRIC, "The eval.csv column the "
                        "sides are compared on, e.g. route_completion.")
    flags.DEFINE_bool("held_out", False, "Compare the held-out evaluations "
                      "(eval_held_out.csv, TrainerConfig.held_out_env_load_fn)"
                      " instead of eval.csv.")


FLAGS = flags.FLAGS

EXIT_AGREE, EXIT_ERROR, EXIT_DISAGREE, EXIT_INTERRUPTED = 0, 1, 3, 130
DEFAULT_METRIC, DEFAULT_TOL_ABS = "average_return", 25.0
Run = Tuple[str, int]  # (side name, seed)
# Env steps and returns: lists, or arrays as `align` makes them.
_Ints = Union[Sequence[int], np.ndarray]
_Floats = Union[Sequence[float], np.ndarray]
# A side's name is a folder under --root_dir and a field of compare.csv.
_NAME = re.compile(r"[A-Za-z0-9_+=-][A-Za-z0-9_.+=-]*")


@dataclasses.dataclass(frozen=True)
class Side:
    """One of the two settings compared.

    Attributes:
        name: the folder under the root (``<name>/seed<s>``) and the label.
        processes: 1: each run trains in one process; N > 1: with
            ``--distributed multi-process --num_processes N``.
        params: gin bindings for this side only.
    """
    name: str
    processes: int = 1
    params: Tuple[str, ...] = ()

    def distributed_args(self) -> List[str]:
        """``alf.bin.train``'s flags for ``processes``."""
        if self.processes == 1:
            return []  # train.py's default, --distributed none
        return ["--distributed", "multi-process", "--num_processes",
                str(self.processes)]

    def describe(self) -> str:
        """One line: the process count and the bindings."""
        n = self.processes
        return "; ".join([f"{n} process{'es' if n > 1 else ''}",
                          *self.params])


def make_sides(a_params: Sequence[str] = (), b_params: Sequence[str] = (),
               a_name: Optional[str] = None, b_name: Optional[str] = None,
               a_processes: Optional[int] = None,
               b_processes: Optional[int] = None,
               num_processes: Optional[int] = None) -> Tuple[Side, Side]:
    """Sides A and B from the flags' values (None: the flag was not given).

    Without ``a_params`` and ``b_params`` it is the 1-vs-N check: A has 1
    process, B ``num_processes`` (2 if None), named 'single' and 'ddp{N}'.
    With them, both sides default to 1 process and the names 'a' and 'b'.

    Raises:
        AlfError: for a name that cannot be a folder, equal names, or
            ``num_processes`` given with the two-settings form.
    """
    two_settings = bool(a_params or b_params)
    if num_processes is not None and (two_settings or b_processes is not None):
        # Which side would it set, and is the other one 1? Refuse to guess.
        raise AlfError("--num_processes sets side B of the default 1-vs-N "
                       "form; with --a_param, --b_param or --b_processes, use "
                       "--a_processes and --b_processes instead")
    if a_processes is None:
        a_processes = 1
    if b_processes is None:
        b_processes = 1 if two_settings else (num_processes or 2)

    def default_name(letter: str, processes: int) -> str:
        if two_settings:
            return letter
        return "single" if processes == 1 else f"ddp{processes}"

    a = Side(default_name("a", a_processes) if a_name is None else a_name,
             a_processes, tuple(a_params))
    b = Side(default_name("b", b_processes) if b_name is None else b_name,
             b_processes, tuple(b_params))
    for flag, side in (("--a_name", a), ("--b_name", b)):
        if not _NAME.fullmatch(side.name):
            raise AlfError(f"{flag} {side.name!r} cannot name a folder and a "
                           "compare.csv field: use letters, digits and "
                           "_ + = - . (no '/', not starting with '.')")
    if a.name == b.name:
        raise AlfError(f"--a_name and --b_name are both {a.name!r}; the sides "
                       "need different names (each is a folder under "
                       "--root_dir)")
    return a, b


def check_sides(gin_files: Sequence[str], gin_params: Sequence[str],
                sides: Sequence[Side]) -> Dict[str, int]:
    """Parses each side's config and checks that its sizes divide among its
    processes, before anything runs: otherwise a side that cannot start
    fails only after every run before it has trained.

    Returns:
        Side name -> the env steps its runs train for.

    Raises:
        AlfError: naming the side and the problem.
    """
    from alf.trainers import TrainerConfig, parse_config
    steps = {}
    for side in sides:
        try:
            parse_config(gin_files, [*gin_params, *side.params])
            config = TrainerConfig()
            config.per_rank(side.processes)
        except AlfError as e:
            raise AlfError(f"side {side.name} ({side.describe()}): "
                           f"{one_line(e)}") from e
        steps[side.name] = config.num_env_steps
    return steps


def finished(run_dir: str, num_env_steps: int) -> bool:
    """Whether the run in ``run_dir`` has a checkpoint at or past
    ``num_env_steps``: what alf.bin.train would resume only to say that the
    run already finished (its evaluations are all in eval.csv by then)."""
    from alf.trainers.checkpointer import Checkpointer  # imports torch
    saved = Checkpointer(os.path.join(run_dir, "ckpt")).saved()
    return bool(saved) and max(saved) >= num_env_steps


def claim_folder(root: str, side: Side) -> None:
    """Records ``side``'s settings in ``root/<name>/side.json`` or, if a
    record is there, checks them against it.

    train.py resumes whatever run it finds in a folder, so without this a
    rerun that gives a name other settings (the default names 'a' and 'b'
    with new --a_param values, say) would compare the old runs. Folders from
    before the record existed are adopted.

    Raises:
        AlfError: naming the folder whose runs have other settings.
    """
    path = os.path.join(root, side.name, "side.json")
    want = {"processes": side.processes, "params": list(side.params)}
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(json.dumps(want) + "\n")
        return
    with open(path) as f:
        text = f.read()
    try:
        same = json.loads(text) == want
    except ValueError:  # damaged: nothing vouches for the runs
        same = False
    if not same:
        raise AlfError(f"{os.path.dirname(path)} holds runs of other settings "
                       f"({' '.join(text.split())}, now {json.dumps(want)}); "
                       "use a new --root_dir or another side name")


def _start(cmd: List[str], log_path: str) -> subprocess.Popen:
    from alf.utils.process import die_with_parent  # no run outlives this tool
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


def run_all(jobs: Dict[Run, List[str]], root: str, parallel: int,
            on_start: Callable[[Run], None] = lambda run: None,
            done: Callable[[Run], bool] = lambda run: False) -> None:
    """Runs the commands, ``parallel`` at a time, logging to
    ``root/<side>/seed<s>.log``; ``on_start(run)`` is called before a run
    starts. Runs for which ``done(run)`` holds are reused, not started.

    Raises:
        AlfError: naming the first run that failed and its log (runs still
            going get SIGINT: train.py saves a checkpoint and stops).
    """
    pending = []
    for name, seed in jobs:
        if done((name, seed)):
            print(f"{name}/seed{seed}: reused", flush=True)
        else:
            pending.append((name, seed))
    # Popen -> (run, log, offset, start)
    running: Dict[subprocess.Popen, Tuple[Run, str, int, float]] = {}
    try:
        while pending or running:
            while pending and len(running) < parallel:
                name, seed = run = pending.pop(0)
                on_start(run)
                log = os.path.join(root, name, f"seed{seed}.log")
                offset = os.path.getsize(log) if os.path.exists(log) else 0
                running[_start(jobs[run], log)] = run, log, offset, time.time()
            time.sleep(0.2)
            for proc in [p for p in running if p.poll() is not None]:
                (name, seed), log, offset, start = running.pop(proc)
                if proc.returncode != 0:
                    with open(log, errors="replace") as f:
                        f.seek(offset)  # this run's output only
                        out = f.read().splitlines()
                    # Quote train.py's one-line error, not trailing noise.
                    said = [x for x in out if x.startswith("alf.bin.train:")]
                    why = f": {said[-1]}" if said else ""
                    raise AlfError(f"run {name}/seed{seed} failed (exit code "
                                   f"{proc.returncode}){why}; log: {log}")
                print(f"{name}/seed{seed}: trained in "
                      f"{time.time() - start:.0f} s", flush=True)
    finally:  # after a failure or Ctrl-C; train.py's launcher escalates
        for proc in running:
            proc.send_signal(signal.SIGINT)
        for proc in running:
            proc.wait()


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


def normalized_auc(steps: _Floats, values: _Floats) -> float:
    """Trapezoid area under ``values`` over ``steps``, divided by the step
    span: the curve's average height (the value itself for a single step)."""
    steps, values = np.asarray(steps, float), np.asarray(values, float)
    if len(steps) < 2:
        return float(values[0])
    # By hand: np.trapezoid is numpy >= 2 only, np.trapz was removed there.
    area = ((values[1:] + values[:-1]) / 2 * np.diff(steps)).sum()
    return float(area / (steps[-1] - steps[0]))


def final_value(values: _Floats, last: int = 3) -> float:
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
    """Decides whether two sides trained equally well (both criteria shown).

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
    tol_ok, t_ok, why_not = True, True, set()
    for key, name in (("final", final), ("auc", "normalized AUC")):
        xa, xb = [v[key] for v in a.values()], [v[key] for v in b.values()]
        ma, mb = float(np.mean(xa)), float(np.mean(xb))
        bound = max(tol_abs, tol_rel * abs(ma))
        within = abs(mb - ma) <= bound
        p, why = pvalue(xa, xb)
        tol_ok, t_ok = tol_ok and within, t_ok and (p is None or p >= alpha)
        why_not |= {why} - {""}
        test = f"Welch p = {p:.3f}" if p is not None else f"no t-test ({why})"
        lines.append(f"{name}: mean {ref} {ma:.{d}f}, mean {other} "
                     f"{mb:.{d}f}, difference {mb - ma:+.{d}f} (tolerance "
                     f"{bound:.{d}f}: "
                     f"{'within' if within else 'EXCEEDED'}); {test}")
    criterion = "tolerance" if why_not else "Welch's t-test"
    agree = tol_ok if why_not else t_ok
    rule = (f"agree when |difference| <= max({tol_abs:g}, {tol_rel:g} x "
            f"|mean {ref}|) for both metrics (t-test not used: "
            f"{'; '.join(sorted(why_not))})" if why_not else
            f"agree unless p < {alpha:g} for {final} or normalized AUC")
    lines += [f"criterion: {criterion}: {rule}",
              f"verdict: {ref} and {other} {'AGREE' if agree else 'DISAGREE'}"
              f" (decided by the {criterion} criterion)"]
    return agree, lines


def write_compare_csv(path: str, grid: _Ints,
                      values: Mapping[Run, _Floats],
                      metric: str = DEFAULT_METRIC) -> None:
    """Writes ``env_steps,mode,seed,<metric>``: one row per run per grid
    step (long format; ``mode`` is the side's name), runs in the order of
    ``values``."""
    with open(path, "w") as f:
        f.write(f"env_steps,mode,seed,{metric}\n")
        for (name, seed), vals in values.items():
            f.writelines(f"{int(s)},{name},{seed},{float(v):.6g}\n"
                         for s, v in zip(grid, vals))


def plot(path: str, grid: _Ints, values: Dict[Run, np.ndarray],
         title: str, metric: str = DEFAULT_METRIC) -> None:
    """Saves each side's mean curve and min-max band over seeds, labelled
    with the side's name."""
    import matplotlib
    matplotlib.use("Agg")  # no display on servers and in tests
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name in dict.fromkeys(m for m, _ in values):
        ys = np.stack([v for (m, _), v in values.items() if m == name])
        ax.plot(grid, ys.mean(0), label=f"{name}: mean, min-max of {len(ys)}")
        ax.fill_between(grid, ys.min(0), ys.max(0), alpha=0.25)
    ax.set(xlabel="env steps", ylabel=metric.replace("_", " "), title=title)
    ax.legend()
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)


def tolerance(metric: str, tol_abs: Optional[float]) -> float:
    """``--tol_abs``, or its default for the return; one in the units of
    any other metric must be given (25 return units would pass anything
    on a rate)."""
    if tol_abs is not None:
        return tol_abs
    if metric == DEFAULT_METRIC:
        return DEFAULT_TOL_ABS
    raise AlfError(f"--metric {metric} needs --tol_abs in its own units "
                   f"(e.g. 0.05 for a rate); the default "
                   f"{DEFAULT_TOL_ABS:g} is for {DEFAULT_METRIC}")


def output_name(metric: str, held_out: bool) -> str:
    """The results' file name without extension: ``compare`` for the
    return on eval.csv, else with the metric and ``held_out`` appended, so
    that judging the same runs another way keeps the earlier results."""
    parts = ["compare"]
    if metric != DEFAULT_METRIC:
        parts.append(metric)
    if held_out:
        parts.append("held_out")
    return "-".join(parts)


def read_curves(run_dir: str, csv_name: str) -> Dict[str, list]:
    """A run's evaluation columns from ``run_dir/csv_name``.

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
    return read_eval_csv(path)


def _gin_params(params: Sequence[str]) -> List[str]:
    return [a for p in params for a in ("--gin_param", p)]


def train_commands(root: str, gin_files: Sequence[str],
                   gin_params: Sequence[str],
                   sides: Union[int, Sequence[Side]],
                   seeds: int) -> Dict[Run, List[str]]:
    """(side name, seed) -> its ``alf.bin.train`` command, seed by seed.

    Args:
        root: the runs go to ``root/<side name>/seed<s>``.
        gin_files, gin_params: for every run.
        sides: side A and side B, whose bindings follow ``gin_params`` (so
            that they win); an int N stands for the default pair, 1 process
            vs N.
        seeds: seeds 0..seeds-1 per side.
    """
    if isinstance(sides, int):
        sides = make_sides(num_processes=sides)
    args = [a for g in gin_files for a in ("--gin_file", g)]
    args += _gin_params(gin_params)
    return {(side.name, seed): [
        sys.executable, "-m", "alf.bin.train", "--root_dir",
        os.path.join(root, side.name, f"seed{seed}"),
        *side.distributed_args(), *args, *_gin_params(side.params),
        "--gin_param", f"TrainerConfig.seed={seed}"]  # last: none overrides
        for seed in range(seeds) for side in sides}


def main(argv: List[str]) -> int:
    """The absl entry point; returns the process exit code."""
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    try:
        if not FLAGS.root_dir or not FLAGS.gin_file:
            raise AlfError("--root_dir and --gin_file are required")
        metric = FLAGS.metric
        tol_abs = tolerance(metric, FLAGS.tol_abs)
        csv_name = HELD_OUT_CSV if FLAGS.held_out else EVAL_CSV
        a, b = sides = make_sides(
            FLAGS.a_param or (), FLAGS.b_param or (), FLAGS.a_name,
            FLAGS.b_name, FLAGS.a_processes, FLAGS.b_processes,
            FLAGS.num_processes if FLAGS["num_processes"].present else None)
        steps = check_sides(FLAGS.gin_file, FLAGS.gin_param or [], sides)
        root = os.path.abspath(os.path.expanduser(FLAGS.root_dir))
        jobs = train_commands(root, FLAGS.gin_file, FLAGS.gin_param or [],
                              sides, FLAGS.seeds)
        parallel = 2 if FLAGS.parallel else 1
        print(f"side A, {a.name}: {a.describe()}",
              f"side B, {b.name}: {b.describe()}",
              f"{len(jobs)} runs, {parallel} at a time; logs in "
              f"{root}/<side>/seed<s>.log", sep="\n", flush=True)
        named = {side.name: side for side in sides}
        for side in sides:  # other settings there: fail before any training
            if os.path.isdir(os.path.join(root, side.name)):
                claim_folder(root, side)
        # A side's folder appears with its first run (none after a failure).
        run_all(jobs, root, parallel,
                on_start=lambda run: claim_folder(root, named[run[0]]),
                done=lambda run: finished(
                    os.path.join(root, run[0], f"seed{run[1]}"),
                    steps[run[0]]))
        # Side A first: its runs make the grid and lead the table.
        runs = sorted(jobs, key=lambda r: (r[0] != a.name, r[1]))
        grid, values = align(
            {(m, s): read_curves(os.path.join(root, m, f"seed{s}"), csv_name)
             for m, s in runs}, reference=a.name, metric=metric,
            csv_name=csv_name)
        config = "+".join(os.path.basename(g) for g in FLAGS.gin_file)
        title = f"{config}, {a.name} vs {b.name}, {FLAGS.seeds} seed(s)"
        if FLAGS.held_out:
            title += ", held out"
        out = output_name(metric, FLAGS.held_out)
        write_compare_csv(os.path.join(root, out + ".csv"), grid, values,
                          metric)
        plot(os.path.join(root, out + ".png"), grid, values, title, metric)
    except KeyboardInterrupt:
        print("alf.bin.compare: interrupted; rerun to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (AlfError, OSError) as e:
        print(f"alf.bin.compare: error: {one_line(e)}", file=sys.stderr)
        return EXIT_ERROR
    stats: Dict[str, Dict[int, Dict[str, float]]] = {}
    for (name, seed), v in values.items():
        stats.setdefault(name, {})[seed] = {"final": final_value(v),
                                            "auc": normalized_auc(grid, v)}
    label = "return" if metric == DEFAULT_METRIC else metric
    agree, lines = verdict(stats, FLAGS.tol_rel, tol_abs, label=label)
    print(f"{title}: {len(grid)} evaluation steps, {grid[0]} to {grid[-1]} "
          f"env steps; wrote {root}/{out}.csv and {out}.png", *lines,
          sep="\n", flush=True)
    return EXIT_AGREE if agree else EXIT_DISAGREE


if __name__ == "__main__":
    define_flags()
    app.run(lambda argv: sys.exit(main(argv)))
