r"""Evaluation curves and wall clock of whole runs, synchronous against
asynchronous collection, one run after the other on the same machine.

    python benchmarks/mode_curves.py --gin_file ppg_metadrive.gin \
        --root /tmp/modes --processes 2 [--gin_param ...]

Each mode trains the config from scratch with ``alf.bin.train`` (same
seed, same bindings, only ``TrainerConfig.unroll_mode`` differs; the runs
never overlap, so each has the machine to itself) and is timed from
command start to exit, evaluations included: the wall clock a user waits.
The script prints each evaluation's ``--column`` on the training and, where
the config has them, the held-out environments side by side, then each
run's wall clock and their ratio. The runs stay in ``ROOT/MODE`` (logs in
``ROOT/MODE.log``); a root that already holds a run is refused.
"""
import argparse
import os
import sys
import time

from runs import run_in_own_group, terminate_on_sigterm, train_command

from alf.trainers.evaluator import EVAL_CSV, HELD_OUT_CSV, read_eval_csv


def main():
    terminate_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gin_file", required=True)
    parser.add_argument("--root", required=True)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--modes", default="sync,async")
    parser.add_argument("--column", default="route_completion",
                        help="eval.csv column to print (e.g. average_return)")
    parser.add_argument("--gin_param", action="append", default=[])
    args = parser.parse_args()
    modes = args.modes.split(",")
    for mode in modes:
        if os.path.exists(os.path.join(args.root, mode)):
            sys.exit(f"mode_curves: {os.path.join(args.root, mode)} already "
                     "holds a run; give a new --root")
    os.makedirs(args.root, exist_ok=True)
    walls = {}
    for mode in modes:
        cmd = train_command(
            os.path.join(args.root, mode), [args.gin_file],
            [f'TrainerConfig.unroll_mode="{mode}"', *args.gin_param],
            args.processes)
        start = time.perf_counter()
        out = run_in_own_group(cmd)
        walls[mode] = time.perf_counter() - start
        with open(os.path.join(args.root, mode + ".log"), "w") as f:
            f.write(" ".join(cmd) + "\n" + out.stdout)
        if out.returncode != 0:
            sys.exit(f"mode_curves: the {mode} run failed (exit "
                     f"{out.returncode}); see {args.root}/{mode}.log")
        print(f"{mode}: {walls[mode]:.0f} s", flush=True)
    report(args.root, modes, args.column, walls)


def report(root: str, modes, column: str, walls) -> None:
    """Prints the runs' evaluations side by side and their wall clocks."""
    curves = {}
    for mode in modes:
        for name in (EVAL_CSV, HELD_OUT_CSV):
            path = os.path.join(root, mode, name)
            if os.path.exists(path):
                curves[mode, name] = read_eval_csv(path)
    names = [n for n in (EVAL_CSV, HELD_OUT_CSV)
             if all((m, n) in curves for m in modes)]
    for name in names:
        missing = [m for m in modes if column not in curves[m, name]]
        if missing:
            print(f"{name}: no column {column!r} in {', '.join(missing)}")
            continue
        print(f"\n{name}, {column}:")
        print(f"{'env steps':>10} " + " ".join(f"{m:>8}" for m in modes))
        rows = {}
        for m in modes:
            c = curves[m, name]
            for steps, v in zip(c["env_steps"], c[column]):
                rows.setdefault(int(steps), {})[m] = v
        for steps in sorted(rows):
            print(f"{steps:10d} " + " ".join(
                f"{rows[steps][m]:8.2f}" if m in rows[steps] else f"{'-':>8}"
                for m in modes))
    print("\nwall clock: " + ", ".join(
        f"{m} {int(walls[m] // 60)} min {walls[m] % 60:.0f} s" for m in modes))
    if len(modes) == 2:
        a, b = modes
        print(f"{b} took {walls[b] / walls[a]:.2f}x the time of {a}")


if __name__ == "__main__":
    main()
