r"""Evaluation's wall time, three ways, side by side on a trained run's
checkpoint (its training scenarios and, if the run has them, its held-out
ones):

* batched: one batched environment per set, in which every environment
  steps (and resets) until the longest episode ends; the sets one after
  the other (alf before one environment per episode);
* one each: one environment per episode, so an ended episode stops
  stepping (`make_evaluator`); the sets one after the other;
* together: the same environments, both sets played at once
  (`evaluate_together`, what training does);
* one batch: the same, with the policy acting for all the episodes still
  playing in one batch, as evaluations did before 2026-11-27 (now it acts
  for each episode alone, `evaluator.act_per_episode`: what that costs,
  and how far the batch's rounding moves the scores).

The three alternate, so they see the same machine; each prints its wall
time, the episode steps it played (the sum of the episode lengths) and
those steps per second, and the run ends with the ratios.

    python benchmarks/evaluation_speed.py --root_dir RUN [--checkpoint latest]
        [--rounds 2] [--ways batched,one each,together] [--gin_param ...]

The run's own evaluation settings apply (``num_eval_episodes``,
``num_held_out_eval_episodes``, ``eval_deterministic``, its evaluation
seed); ``--gin_param TrainerConfig.num_held_out_eval_episodes=40`` times
held-out evaluations played in rounds. ``--ways`` leaves some out (each
way holds its own simulator processes).
"""
import argparse
import os
import time

import torch

from alf.bin.play import checkpoint_path, load_algorithm
from alf.trainers import evaluator as evaluator_module
from alf.trainers.config_parser import parse_run_config
from alf.trainers.evaluator import (Evaluator, evaluate_together,
                                    make_evaluator)
from alf.trainers.seeds import eval_seed
from alf.trainers.trainer_config import TrainerConfig


def _batched(cfg, load_fn, num_episodes) -> Evaluator:
    env = load_fn(cfg.env_name, num_envs=cfg.num_eval_episodes, seed=None,
                  asynchronous=cfg.async_env)
    return Evaluator(env, seed=eval_seed(cfg.seed),
                     deterministic=cfg.eval_deterministic,
                     num_episodes=num_episodes or cfg.num_eval_episodes)


def _one_after_the_other(evaluators, algorithm):
    return [e.evaluate(algorithm) for e in evaluators]


def _one_batch(evaluators, algorithm):
    def batched(algorithm, obs, streams, episodes, variants=None):
        # Variants (calibration candidates) are not what this way measures.
        return (algorithm.predict_step(obs) if streams is None else
                algorithm.rollout_step(obs)).output

    own = evaluator_module.act_per_episode
    evaluator_module.act_per_episode = batched
    try:
        return evaluate_together(evaluators, algorithm)
    finally:
        evaluator_module.act_per_episode = own


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root_dir", required=True)
    parser.add_argument("--checkpoint", default="latest")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--ways", default="batched,one each,together",
                        help="comma-separated: batched, one each, "
                        "together, one batch")
    parser.add_argument("--gin_param", action="append", default=[])
    args = parser.parse_args()
    parse_run_config(os.path.join(args.root_dir, "config.gin"), args.gin_param)
    cfg = TrainerConfig()
    torch.set_num_threads(cfg.torch_num_threads)
    # (load function, episodes per evaluation) per set.
    sets = [(cfg.env_load_fn, None)] + (
        [(cfg.held_out_env_load_fn, cfg.num_held_out_eval_episodes)]
        if cfg.held_out_env_load_fn else [])
    chosen = [w.strip() for w in args.ways.split(",")]
    unknown = set(chosen) - {"batched", "one each", "together", "one batch"}
    if unknown or not chosen:
        raise SystemExit(f"--ways {args.ways!r}: valid are batched, "
                         f"one each, together, one batch")
    batched = ([_batched(cfg, fn, n) for fn, n in sets]
               if "batched" in chosen else [])
    one_each = ([make_evaluator(cfg, fn, n) for fn, n in sets]
                if {"one each", "together", "one batch"} & set(chosen)
                else [])
    ways = {name: way for name, way in (
        ("batched", (batched, _one_after_the_other)),
        ("one each", (one_each, _one_after_the_other)),
        ("together", (one_each, evaluate_together)),
        ("one batch", (one_each, _one_batch))) if name in chosen}
    first = (batched or one_each)[0]
    path = checkpoint_path(args.root_dir, args.checkpoint)
    algorithm = load_algorithm(cfg, path, first.observation_space,
                               first.action_space)
    print(f"{path}: {len(sets)} set(s) of "
          f"{' and '.join(str(e.num_episodes) for e in ways[chosen[0]][0])} "
          f"episodes in {cfg.num_eval_episodes} environments each, "
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
                      f"steps, {n / t:6.1f} steps/s | route completion "
                      "(success) " + " / ".join(
                          f"{m.get('route_completion', float('nan')):.3f} "
                          f"({m.get('success_rate', float('nan')):.2f})"
                          for m in results))
    finally:
        for evaluator in batched + one_each:
            evaluator.close()
    rate = {name: steps[name] / wall[name] for name in ways}
    base = next(iter(ways))
    for name in ways:
        print(f"{name:9s}: {wall[name]:7.1f} s in all, "
              f"{rate[name]:6.1f} episode steps/s, "
              f"{rate[name] / rate[base]:.2f}x {base}")


if __name__ == "__main__":
    main()
