r"""Evaluation's wall time, two ways, side by side on a trained run's
checkpoint: one batched environment of N, in which every environment steps
(and resets) until the longest episode ends, against N environments of one
each (`make_evaluator`), in which an ended episode stops stepping. The two
alternate, so both see the same machine; each prints its wall time, the
episode steps it played (the sum of the episode lengths) and those steps
per second, and the run ends with the ratio.

    python benchmarks/evaluation_speed.py --root_dir RUN [--checkpoint latest]
        [--rounds 2] [--held_out] [--gin_param ...]

The run's own evaluation settings apply (``num_eval_episodes``,
``eval_deterministic``, its evaluation seed); ``--held_out`` evaluates on
``TrainerConfig.held_out_env_load_fn``'s environments instead.
"""
import argparse
import os
import time

import torch

from alf.bin.play import checkpoint_path
from alf.trainers.checkpointer import Checkpointer
from alf.trainers.config_parser import parse_config
from alf.trainers.evaluator import Evaluator, make_evaluator
from alf.trainers.run_state import CHECKPOINT_LAYOUT
from alf.trainers.seeds import eval_seed
from alf.trainers.trainer_config import TrainerConfig


def _batched(cfg, load_fn) -> Evaluator:
    env = load_fn(cfg.env_name, num_envs=cfg.num_eval_episodes, seed=None,
                  asynchronous=cfg.async_env)
    return Evaluator(env, seed=eval_seed(cfg.seed),
                     deterministic=cfg.eval_deterministic)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root_dir", required=True)
    parser.add_argument("--checkpoint", default="latest")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--held_out", action="store_true")
    parser.add_argument("--gin_param", action="append", default=[])
    args = parser.parse_args()
    parse_config([os.path.join(args.root_dir, "config.gin")], args.gin_param)
    cfg = TrainerConfig()
    torch.set_num_threads(cfg.torch_num_threads)
    load_fn = cfg.held_out_env_load_fn if args.held_out else cfg.env_load_fn
    ways = {"batched": _batched(cfg, load_fn),
            "one each": make_evaluator(cfg, load_fn)}
    first = ways["batched"]
    algorithm = cfg.algorithm_ctor(
        observation_space=first.observation_space,
        action_space=first.action_space, config=cfg)
    path = checkpoint_path(args.root_dir, args.checkpoint)
    algorithm.load_state_dict(Checkpointer.load(path, CHECKPOINT_LAYOUT)[
        "algorithm"])
    algorithm.eval()
    print(f"{path}: {cfg.num_eval_episodes} episodes, "
          f"{'deterministic' if cfg.eval_deterministic else 'sampling'}"
          f"{', held out' if args.held_out else ''}")
    wall = {name: 0.0 for name in ways}
    steps = {name: 0.0 for name in ways}
    try:
        for r in range(args.rounds):
            for name, evaluator in ways.items():
                start = time.perf_counter()
                m = evaluator.evaluate(algorithm)
                t = time.perf_counter() - start
                n = m["average_episode_length"] * evaluator.num_episodes
                wall[name] += t
                steps[name] += n
                print(f"round {r} {name:9s}: {t:6.1f} s, {n:6.0f} episode "
                      f"steps, {n / t:6.1f} steps/s | " + ", ".join(
                          f"{k} {v:.3f}" for k, v in sorted(m.items())))
    finally:
        for evaluator in ways.values():
            evaluator.close()
    rate = {name: steps[name] / wall[name] for name in ways}
    for name in ways:
        print(f"{name:9s}: {wall[name]:7.1f} s in all, "
              f"{rate[name]:6.1f} episode steps/s")
    print(f"one each / batched: {rate['one each'] / rate['batched']:.2f}x "
          "episode steps/s")


if __name__ == "__main__":
    main()
