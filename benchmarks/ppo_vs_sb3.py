r"""alf PPO vs Stable-Baselines3 PPO on CartPole-v1, side by side in one run.

Both use RL-zoo's tuned CartPole hyperparameters (8 envs, 32 steps per env
per update, minibatch 256, 20 epochs, gamma 0.98, GAE lambda 0.8, linearly
decayed lr 1e-3 and clip 0.2, 64x64 tanh actor and critic) and one torch
thread. Runs alternate between the two libraries so machine noise hits both.
Throughput counts training only (no evaluation); the return is a
deterministic 10-episode evaluation after training.

    pip install -e '.[bench]' -c constraints.txt
    python benchmarks/ppo_vs_sb3.py --num_env_steps 100000 --seeds 3
"""
import argparse
import os
import tempfile
import time

import torch

from runs import (print_library_comparison, require_sb3,
                  throughput_params)


def run_alf(seed: int, num_env_steps: int):
    import alf.trainers
    from alf.trainers import Trainer
    alf.trainers.parse_config(["ppo_cart_pole.gin"],
                            throughput_params(num_env_steps) +
                            [f"TrainerConfig.seed={seed}"])
    with tempfile.TemporaryDirectory() as root:
        trainer = Trainer(root)
        metrics = trainer.train()
    return trainer.steps_per_second, metrics["average_return"]


def run_sb3(seed: int, num_env_steps: int):
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    linear = lambda v: (lambda remaining: remaining * v)  # noqa: E731
    env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    model = PPO("MlpPolicy", env, n_steps=32, batch_size=256, n_epochs=20,
                gamma=0.98, gae_lambda=0.8, ent_coef=0.0,
                learning_rate=linear(1e-3), clip_range=linear(0.2),
                seed=seed, device="cpu", verbose=0)
    start = time.perf_counter()
    model.learn(total_timesteps=num_env_steps)
    rate = model.num_timesteps / (time.perf_counter() - start)
    mean_return, _ = evaluate_policy(model, make_vec_env("CartPole-v1",
                                                         n_envs=1,
                                                         seed=seed + 1000),
                                     n_eval_episodes=10, deterministic=True)
    return rate, mean_return


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num_env_steps", type=int, default=100_000)
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    require_sb3()
    torch.set_num_threads(1)
    print(f"load before: {os.getloadavg()[0]:.2f}")
    rows = {"alf": [], "sb3": []}
    for seed in range(args.seeds):
        for name, fn in (("alf", run_alf), ("sb3", run_sb3)):
            rate, ret = fn(seed, args.num_env_steps)
            rows[name].append((rate, ret))
            print(f"{name:4s} seed {seed}: {rate:8.0f} env steps/s, "
                  f"eval return {ret:6.1f}", flush=True)
    print_library_comparison(
        rows, f"{args.num_env_steps} env steps, {args.seeds} seeds")


if __name__ == "__main__":
    main()
