r"""A calibrating run's evaluations, replayed with other calibrations.

    python benchmarks/calibration_replay.py --root_dir RUN \
        [--checkpoints evaluated|N,N,...] [--last 3] \
        [--offsets 1=-0.5,-0.4,-0.3,-0.2,-0.1] [--episodes 10,20] \
        [--metric route_completion] [--report success_rate] [--held_out] \
        [--gin_param BINDING ...] [--parallel 2]

A calibration (``TrainerConfig.calibrate_offsets``) changes what a run's
evaluations act with and nothing it trains on: the offset moves the
deterministic action (`PPOAlgorithm.predict_step`), never a rollout's.
So a run's checkpoints are those any other calibration would have
trained, and replaying them (`alf.bin.play`, whose episodes are the
evaluations' episode by episode) with another grid or another number of
calibration episodes gives what that run would have recorded: a paired
comparison of calibrations, free of training noise, at the cost of the
evaluations alone.

Per checkpoint it plays every candidate on ``max(--episodes)`` episodes
of the run's calibration environments (``--split calibration``) and on
the run's evaluation episodes (training environments; ``--held_out``
adds the held-out ones). Then for each count ``n`` of ``--episodes`` it
takes the candidate the run's rule keeps on the first ``n`` calibration
episodes (`alf.trainers.calibration.choose`) and prints what the
evaluation scores with it, beside what the run recorded (``eval.csv``)
and the best candidate on the evaluation's own episodes (in-sample: a
ceiling no calibration on other environments can claim). A replayed
choice with the run's own grid and count that differs from its
``eval.csv`` is reported (the replay would not be the evaluation).

``--offsets``, ``--episodes`` and ``--metric`` default to the run's
``calibrate_offsets``, ``num_calibration_episodes`` and ``best_metric``.
``--gin_param`` (repeatable) binds over the run's config in every play,
e.g. other calibration environments
(``validation/suite_metadrive.load.traffic_density=0.2``): what the run
would have recorded calibrating on them, since its checkpoints are the
same. The replay is then not the run's own evaluations, and eval.csv is
not compared.
"""
import argparse
import concurrent.futures
import math
import multiprocessing
import os
import sys
import time
from typing import Dict, List, Sequence, Tuple

from alf.bin.calibrate import binding, parse_offsets
from alf.bin.play import mean_row, run_config
from alf.trainers.calibration import Offsets, candidates, choose, label
from alf.trainers.checkpointer import Checkpointer
from alf.trainers.evaluator import EVAL_CSV, read_eval_csv
from alf.utils.errors import AlfError, ConfigError, one_line

Rows = List[Dict[str, float]]


def _play(job) -> Rows:
    """One `alf.bin.play` (in a worker: play parses gin globally)."""
    import torch
    from alf.bin.play import play
    torch.set_num_threads(1)
    root_dir, checkpoint, episodes, split, offsets, gin_params = job
    return play(root_dir, checkpoint, episodes,
                gin_params=[*gin_params, binding(offsets)], split=split)


def mean(rows: Rows, metric: str, n: int = 0) -> float:
    """``metric``'s mean over the first ``n`` rows (all for 0), as
    ``alf.bin.play``'s table averages it."""
    return mean_row(rows[:n] if n else rows)[metric]


def run_settings(root_dir: str, gin_params: Sequence[str] = ()):
    """The run's `TrainerConfig` (its config.gin and ``gin_params`` parsed
    here)."""
    from alf.trainers.config_parser import parse_run_config
    from alf.trainers.trainer_config import TrainerConfig
    if not os.path.isfile(os.path.join(root_dir, "config.gin")):
        raise ConfigError(f"--root_dir={root_dir!r}: no config.gin there "
                          "(a run's folder is needed)")
    parse_run_config(run_config(root_dir, 0), gin_params)
    return TrainerConfig()


def pick_checkpoints(root_dir: str, which: str, last: int) -> List[int]:
    """``which``: ``evaluated`` (every saved checkpoint at an env step
    eval.csv has a row for) or a comma-separated list; the last ``last``
    of them (all for 0)."""
    saved = Checkpointer(os.path.join(root_dir, "ckpt")).saved()
    if which == "evaluated":
        path = os.path.join(root_dir, EVAL_CSV)
        evaluated = (set(int(s) for s in read_eval_csv(path)["env_steps"])
                     if os.path.isfile(path) else set())
        steps = sorted(evaluated & set(saved))
    else:
        try:
            steps = [int(s) for s in which.split(",")]
        except ValueError:
            raise ConfigError(f"--checkpoints={which!r}; valid: evaluated "
                              "or env steps N,N,...") from None
        missing = [s for s in steps if s not in saved]
        if missing:
            raise ConfigError(f"--checkpoints: no ckpt-{missing[0]}.pt in "
                              f"{root_dir}/ckpt (saved: {saved})")
    if not steps:
        raise ConfigError(f"{root_dir}: no saved checkpoint at an "
                          "evaluation's env step (--checkpoints N,...)")
    return steps[-last:] if last else steps


def replay(root_dir: str, steps: Sequence[int], grid: List[Offsets],
           episodes: int, eval_episodes: Dict[str, int], parallel: int,
           gin_params: Sequence[str] = ()) -> Dict[Tuple, Rows]:
    """``{(step, split, label): rows}`` for every candidate of ``grid``:
    ``episodes`` calibration episodes, ``eval_episodes[split]`` of each
    evaluation split, every play with ``gin_params`` bound."""
    params = tuple(gin_params)
    jobs = {}
    for step in steps:
        for offsets in grid:
            jobs[(step, "calibration", label(offsets))] = (
                root_dir, str(step), episodes, "calibration", offsets, params)
            for split, n in eval_episodes.items():
                jobs[(step, split, label(offsets))] = (
                    root_dir, str(step), n, split, offsets, params)
    ctx = multiprocessing.get_context("spawn")
    start = time.monotonic()
    with concurrent.futures.ProcessPoolExecutor(parallel,
                                                mp_context=ctx) as pool:
        futures = {pool.submit(_play, job): key for key, job in jobs.items()}
        played = {}
        try:
            for i, f in enumerate(concurrent.futures.as_completed(futures)):
                played[futures[f]] = f.result()  # the first failure raises
                # A MetaDrive run's replay takes tens of minutes.
                step, split, name = futures[f]
                print(f"played {i + 1}/{len(jobs)}: {step} {split} {name} "
                      f"({time.monotonic() - start:.0f} s)", file=sys.stderr,
                      flush=True)
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        return played


def main(argv: Sequence[str] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root_dir", required=True)
    p.add_argument("--checkpoints", default="evaluated")
    p.add_argument("--last", type=int, default=3,
                   help="replay the last N of --checkpoints (0: all)")
    p.add_argument("--offsets", action="append",
                   help="D=X,Y,... (default: the run's calibrate_offsets)")
    p.add_argument("--episodes", default=None,
                   help="calibration episode counts to compare, e.g. 10,20")
    p.add_argument("--metric", default=None)
    p.add_argument("--report", action="append", default=[],
                   help="another episode metric to print")
    p.add_argument("--held_out", action="store_true")
    p.add_argument("--gin_param", action="append", default=[],
                   help="a binding over the run's config in every play")
    p.add_argument("--parallel", type=int, default=os.cpu_count() or 1)
    args = p.parse_args(argv)
    try:
        cfg = run_settings(args.root_dir, args.gin_param)
        grid = (parse_offsets(args.offsets) if args.offsets
                else candidates(cfg.calibrate_offsets or {}))
        own = cfg.num_calibration_episodes or cfg.num_eval_episodes
        try:
            counts = ([int(n) for n in args.episodes.split(",")]
                      if args.episodes else [own])
        except ValueError:
            counts = [0]
        if min(counts) < 1:
            raise ConfigError(f"--episodes={args.episodes!r}; valid: "
                              "positive counts, e.g. 10,20")
        metric = args.metric or cfg.best_metric or "return"
        # eval.csv's average_return is an episode row's return.
        metric = "return" if metric == "average_return" else metric
        steps = pick_checkpoints(args.root_dir, args.checkpoints, args.last)
        splits = {"training": cfg.num_eval_episodes}
        if args.held_out:
            if cfg.held_out_env_load_fn is None:
                raise ConfigError("--held_out: the run has no held-out "
                                  "environments")
            splits["held_out"] = (cfg.num_held_out_eval_episodes
                                  or cfg.num_eval_episodes)
        played = replay(args.root_dir, steps, grid, max(counts), splits,
                        args.parallel, args.gin_param)
        reported = next(iter(played.values()))[0]
        for m in [metric] + args.report:
            if m not in reported:
                raise ConfigError(f"--metric/--report {m!r}: the episodes "
                                  f"report {', '.join(reported)}")
    except AlfError as e:
        sys.exit(f"calibration_replay.py: {one_line(e)}")
    recorded = read_eval_csv(os.path.join(args.root_dir, EVAL_CSV))
    report(args, cfg, steps, grid, counts, own, metric, splits, played,
           recorded)


def report(args, cfg, steps, grid, counts, own, metric, splits, played,
           recorded) -> None:
    """Prints the per-checkpoint tables and the summary."""
    metrics = [metric] + [m for m in args.report if m != metric]
    names = [label(o) for o in grid]
    choices: Dict[str, List[Tuple[int, str]]] = {}
    for step in steps:
        print(f"\ncheckpoint {step}: {metric}")
        cols = ([f"calibration ({n})" for n in counts]
                + [s.replace("_", " ") for s in splits])
        print("| offsets | " + " | ".join(cols) + " |")
        print("| --- " * (len(cols) + 1) + "|")
        for name in names:
            cal = played[(step, "calibration", name)]
            vals = ([mean(cal, metric, n) for n in counts]
                    + [mean(played[(step, s, name)], metric)
                       for s in splits])
            print(f"| {name} | " + " | ".join(f"{v:.3f}" for v in vals)
                  + " |")
        for n in counts:
            scored = [(o, {metric: mean(played[(step, "calibration",
                                                label(o))], metric, n)})
                      for o in grid]
            choices.setdefault(f"calibrated on {n}", []).append(
                (step, label(choose(scored, metric)[0])))
        best = choose([(o, {metric: mean(played[(step, "training",
                                                 label(o))], metric)})
                       for o in grid], metric)[0]
        choices.setdefault("best on training (in-sample)", []).append(
            (step, label(best)))
    print(f"\nthe evaluations ({', '.join(splits)}) with each choice; "
          "mean over the checkpoints")
    head = [str(s) for s in steps]
    print("| choice | split | " + " | ".join(head)
          + " | " + " | ".join(f"mean {m}" for m in metrics) + " |")
    print("| --- " * (len(head) + len(metrics) + 2) + "|")
    for rule, picked in choices.items():
        for split in splits:
            cells = [f"{name}: {mean(played[(s, split, name)], metric):.3f}"
                     for s, name in picked]
            means = [sum(mean(played[(s, split, name)], m)
                         for s, name in picked) / len(picked)
                     for m in metrics]
            print(f"| {rule} | {split} | " + " | ".join(cells) + " | "
                  + " | ".join(f"{v:.3f}" for v in means) + " |")
    _check_against_run(args, cfg, grid, own, counts, choices, recorded,
                       metric, played)


def _check_against_run(args, cfg, grid, own, counts, choices, recorded,
                       metric, played) -> None:
    """Says where the replay of the run's own calibration chose otherwise
    than the run recorded."""
    if (own not in counts or cfg.calibrate_offsets is None
            or grid != candidates(cfg.calibrate_offsets)):
        return
    if args.gin_param:
        print("(with --gin_param the replay is not the run's own "
              "evaluations: eval.csv is not compared)")
        return
    where = {int(s): i for i, s in enumerate(recorded.get("env_steps", []))}
    dims = sorted(grid[0])
    column = "average_return" if metric == "return" else metric
    for step, name in choices[f"calibrated on {own}"]:
        i = where.get(step)
        if i is None or any(f"offset_{d}" not in recorded for d in dims):
            continue
        ran = label({d: recorded[f"offset_{d}"][i] for d in dims})
        if ran != name:
            print(f"note: at {step} the run chose {ran}, the replay {name}: "
                  f"the replay is not this run's evaluation")
        elif column in recorded and not math.isclose(  # eval.csv: float32
                recorded[column][i], mean(played[(step, "training", name)],
                                          metric), rel_tol=1e-5,
                abs_tol=1e-6):
            print(f"note: at {step} the run's evaluation scored "
                  f"{recorded[column][i]:.4f}, the replay "
                  f"{mean(played[(step, 'training', name)], metric):.4f}")


if __name__ == "__main__":
    main()
