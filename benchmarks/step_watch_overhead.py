r"""What watching the environment workers costs a lock-step step.

Lock-step collection (and evaluation) with environments in worker
processes steps them through `GymEnvironment`'s watched path (a poll per
worker pipe, so that a worker that hangs is named and a stop is not held
up: `alf.trainers.stall_watch.WorkerWatch`), where gymnasium's own step
waits in a pipe's ``recv``. This steps one vector environment both ways,
alternating blocks of ``--steps`` steps, and prints the microseconds per
vector step of each and their ratio (median over rounds): CartPole in 8
workers (the cheapest step, where the poll's cost shows most) and, with
``--metadrive``, MetaDrive in 2 (``ppg_metadrive.gin``'s environment).

    python benchmarks/step_watch_overhead.py [--rounds 7] [--steps 2000]
        [--metadrive]
"""
import argparse
import os
import statistics
import time

import numpy as np
import torch

from alf.environments import suite_gym
from alf.environments.batched import BatchedEnvironment, StepWatch


def _block(env: BatchedEnvironment, watched: bool, steps: int) -> float:
    """Microseconds per vector step over ``steps`` steps of random
    actions."""
    env.watch(StepWatch() if watched else None)
    space = env.action_space
    actions = [torch.as_tensor(np.array([space.sample()
                                         for _ in range(env.num_envs)]))
               for _ in range(16)]
    start = time.perf_counter()
    for i in range(steps):
        env.step(actions[i % len(actions)])
    return (time.perf_counter() - start) / steps * 1e6


def measure(env: BatchedEnvironment, name: str, rounds: int,
            steps: int) -> None:
    """Prints plain and watched microseconds per step, and the ratio."""
    env.reset(seed=0)
    _block(env, False, steps // 4)  # warm-up
    plain, watched, ratios = [], [], []
    for r in range(rounds):
        order = (False, True) if r % 2 == 0 else (True, False)
        got = {w: _block(env, w, steps) for w in order}
        plain.append(got[False])
        watched.append(got[True])
        ratios.append(got[True] / got[False])
    print(f"{name}: plain {statistics.median(plain):.1f} us/step, watched "
          f"{statistics.median(watched):.1f} us/step, watched / plain "
          f"{statistics.median(ratios):.3f} (per round: "
          f"{', '.join(f'{x:.3f}' for x in ratios)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--metadrive", action="store_true",
                        help="also MetaDrive in 2 workers (its steps are "
                        "~100x CartPole's: use --steps 300 or so)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    env = suite_gym.load("CartPole-v1", num_envs=8, seed=0,
                         asynchronous=True)
    try:
        measure(env, "CartPole-v1 x8 workers", args.rounds, args.steps)
    finally:
        env.close()
    if args.metadrive:
        from alf.environments import suite_metadrive
        env = suite_metadrive.load(num_envs=2, seed=0, asynchronous=True,
                                   num_scenarios=10, traffic_density=0.1,
                                   horizon=1000)
        try:
            measure(env, "MetaDrive x2 workers", args.rounds,
                    max(args.steps // 10, 50))
        finally:
            env.close()
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
