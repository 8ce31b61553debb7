r"""A calibrating evaluation's wall time, its candidates queued together
against one after the other, side by side on a trained run's checkpoint.

    python benchmarks/calibration_speed.py --root_dir RUN \
        [--checkpoint latest] [--rounds 2] [--gin_param ...]

The run's calibration settings apply (``calibrate_offsets``,
``calibration_env_load_fn``, ``num_calibration_episodes``, its evaluation
seed). Two ways play every candidate's episodes in the same environments:

* one after the other: each candidate's episodes played apart
  (`Evaluator.evaluate`, what calibrations did before 2026-11-29), so
  every candidate waits out its longest episode while the environments
  that have finished idle;
* queued: every candidate's episodes in one queue
  (`alf.trainers.calibration.Calibrator`, what training does): an
  environment whose episode ends starts the next, whichever candidate it
  plays.

The ways alternate, so they see the same machine; each round prints the
wall time, the episode steps played, those steps per second and the share
of the machine's CPU time that was busy (``/proc/stat``, every process:
run it on an idle machine), and checks that both ways scored every
candidate alike (each episode is a function of the policy, its offset
and its start; a difference is reported). The run ends with the ratios.
"""
import argparse
import os
import time

import torch

from alf.bin.play import checkpoint_path, load_algorithm
from alf.trainers.calibration import label, make_calibrator
from alf.trainers.config_parser import parse_run_config
from alf.trainers.trainer_config import TrainerConfig


def busy_and_total() -> tuple:
    """The machine's busy and total CPU time so far (``/proc/stat``
    ticks; idle and iowait are not busy)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return sum(ticks) - ticks[3] - ticks[4], sum(ticks)


def _one_after_the_other(calibrator, algorithm):
    played = []
    for offsets in calibrator._candidates:
        algorithm.set_calibrated_offset(offsets)
        played.append((offsets, calibrator._evaluator.evaluate(algorithm)))
    return played


def _queued(calibrator, algorithm):
    return calibrator.calibrate(algorithm).played


WAYS = {"one after the other": _one_after_the_other, "queued": _queued}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root_dir", required=True)
    parser.add_argument("--checkpoint", default="latest")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--gin_param", action="append", default=[])
    args = parser.parse_args()
    parse_run_config(os.path.join(args.root_dir, "config.gin"), args.gin_param)
    cfg = TrainerConfig()
    if cfg.calibrate_offsets is None:
        raise SystemExit(f"calibration_speed: {args.root_dir} does not "
                         f"calibrate (TrainerConfig.calibrate_offsets=None)")
    torch.set_num_threads(cfg.torch_num_threads)
    calibrator = make_calibrator(cfg)
    evaluator = calibrator._evaluator
    try:
        path = checkpoint_path(args.root_dir, args.checkpoint)
        algorithm = load_algorithm(cfg, path, evaluator.observation_space,
                                   evaluator.action_space)
        print(f"{path}: {len(calibrator._candidates)} candidates x "
              f"{evaluator.num_episodes} episodes in "
              f"{len(evaluator._envs)} environments")
        wall = {name: 0.0 for name in WAYS}
        steps = {name: 0.0 for name in WAYS}
        scores = {}
        for r in range(args.rounds):
            # Alternate which way goes first.
            for name in (list(WAYS) if r % 2 == 0 else list(WAYS)[::-1]):
                before = busy_and_total()
                start = time.perf_counter()
                played = WAYS[name](calibrator, algorithm)
                t = time.perf_counter() - start
                after = busy_and_total()
                busy = (after[0] - before[0]) / max(after[1] - before[1], 1)
                n = sum(m["average_episode_length"] * evaluator.num_episodes
                        for _, m in played)
                wall[name] += t
                steps[name] += n
                scores[name] = {label(o): m for o, m in played}
                print(f"round {r} {name:19s}: {t:6.1f} s, {n:6.0f} episode "
                      f"steps, {n / t:6.1f} steps/s, CPU busy {busy:.2f}",
                      flush=True)
            same = scores["queued"] == scores["one after the other"]
            print(f"round {r}: every candidate scored alike both ways: "
                  f"{'yes' if same else 'NO'}")
            if not same:
                for cand, m in scores["queued"].items():
                    print(f"  {cand}: queued {m} | one after the other "
                          f"{scores['one after the other'][cand]}")
    finally:
        calibrator.close()
    base = "one after the other"
    for name in WAYS:
        rate = steps[name] / wall[name]
        print(f"{name:19s}: {wall[name]:7.1f} s in all, {rate:6.1f} episode "
              f"steps/s, {rate / (steps[base] / wall[base]):.2f}x {base}")


if __name__ == "__main__":
    main()
