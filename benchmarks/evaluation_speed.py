r"""Evaluation's wall time, three ways, side by side on a trained run's
checkpoint (its training scenarios and, if the run has them, its held-out
ones):

* batched: one batched environment per set, in which every environment
  steps (and resets) until the longest episode ends; the sets one after
  the other (alf before one environment per episode);
* one each: one environment per episode, so an ended episode stops
  stepping (`make_evaluator`); the sets one after the other;
* together: the same environments, both sets played at once
  (`evaluate_together`, what training does).

The three alternate, so they see the same machine; each prints its wall
time, the episode steps it played (the sum of the episode lengths) and
those steps per second, and the run ends with the ratios.

    python benchmarks/evaluation_speed.py --root_dir RUN [--checkpoint latest]
        [--rounds 2] [--gin_param ...]

The run's own evaluation settings apply (``num_eval_episodes``,
``eval_deterministic``, its evaluation seed).
"""
import argparse
import os
import time

import torch

from alf.bin.play import checkpoint_path
from alf.trainers.checkpointer import Checkpointer
from alf.trainers.config_parser import parse_run_config
from alf.trainers.evaluator import (Evaluator, evaluate_together,
                                    make_evaluator)
from alf.trainers.run_state import CHECKPOINT_LAYOUT
from alf.trainers.seeds import eval_seed
from alf.trainers.trainer_config import TrainerConfig


def _batched(cfg, load_fn) -> Evaluator:
    env = load_fn(cfg.env_name, num_envs=cfg.num_eval_episodes, seed=None,
                  asynchronous=cfg.async_env)
    return Evaluator(env, seed=eval_seed(cfg.seed),
                     deterministic=cfg.eval_deterministic)


def _one_after_the_other(evaluators, algorithm):
    return [e.evaluate(algorithm) for e in evaluators]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root_dir", required=True)
    parser.add_argument("--checkpoint", default="latest")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--gin_param", action="append", default=[])
    args = parser.parse_args()
    parse_run_config(os.path.join(args.root_dir, "config.gin"), args.gin_param)
    cfg = TrainerConfig()
    torch.set_num_threads(cfg.torch_num_threads)
    load_fns = [cfg.env_load_fn] + ([cfg.held_out_env_load_fn]
                                    if cfg.held_out_env_load_fn else [])
    batched = [_batched(cfg, fn) for fn in load_fns]
    one_each = [make_evaluator(cfg, fn) for fn in load_fns]
    ways = {"batched": (batched, _one_after_the_other),
            "one each": (one_each, _one_after_the_other),
            "together": (one_each, evaluate_together)}
    algorithm = cfg.algorithm_ctor(
        observation_space=one_each[0].observation_space,
        action_space=one_each[0].action_space, config=cfg)
    path = checkpoint_path(args.root_dir, args.checkpoint)
    algorithm.load_state_dict(Checkpointer.load(path, CHECKPOINT_LAYOUT)[
        "algorithm"])
    algorithm.eval()
    print(f"{path}: {len(load_fns)} set(s) of {cfg.num_eval_episodes} "
          f"episodes, "
          f"{'deterministic' if cfg.eval_deterministic else 'sampling'}")
    wall = {name: 0.0 for name in ways}
    steps = {name: 0.0 for name in ways}
    try:
        for r in range(args.rounds):
            for name, (evaluators, play) in ways.items():
                start = time.perf_counter()
                results = play(evaluators, algorithm)
                t = time.perf_counter() - start
                n = sum(m["average_episode_length"] * e.num_episodes
                        for m, e in zip(results, evaluators))
                wall[name] += t
                steps[name] += n
                print(f"round {r} {name:9s}: {t:6.1f} s, {n:6.0f} episode "
                      f"steps, {n / t:6.1f} steps/s | route completion " +
                      " / ".join(f"{m.get('route_completion', float('nan')):.2f}"
                                 for m in results))
    finally:
        for evaluator in batched + one_each:
            evaluator.close()
    rate = {name: steps[name] / wall[name] for name in ways}
    for name in ways:
        print(f"{name:9s}: {wall[name]:7.1f} s in all, "
              f"{rate[name]:6.1f} episode steps/s, "
              f"{rate[name] / rate['batched']:.2f}x batched")


if __name__ == "__main__":
    main()
