r"""Cost of one gradient update, alf vs Stable-Baselines3, on filled replay
buffers: DQN (CartPole shapes, batch 64) and SAC (Pendulum shapes, batch
256), the hyperparameters of off_policy_vs_sb3.py, one torch thread.

It times bursts of updates only (alf's `train_iter`, SB3's `train`), with
the libraries alternating, and prints the median time per update. Where
off_policy_vs_sb3.py measures whole training runs, this isolates the update.

    python benchmarks/off_policy_update_cost.py [--algo dqn|sac] [--repeats 7]
"""
import argparse
import statistics
import time

import gymnasium as gym
import numpy as np
import torch

from alf.data_structures import Experience

from off_policy_vs_sb3 import SETUPS as RUN_SETUPS
from off_policy_vs_sb3 import _sb3_model
from runs import require_sb3

# Updates per timed burst and minibatch size; the models themselves are
# off_policy_vs_sb3.py's (gin file for alf, _sb3_model for SB3).
SETUPS = {"dqn": dict(updates=128, batch=64),
          "sac": dict(updates=32, batch=256)}
FILL = 5000  # transitions per library


def _random_action(space, n, rng):
    if isinstance(space, gym.spaces.Discrete):
        return rng.integers(space.n, size=n)
    return rng.uniform(space.low, space.high, (n, ) + space.shape).astype(
        np.float32)


def alf_update(algo: str, params):
    """A burst of alf updates on a filled buffer: returns a callable."""
    import alf.trainers
    from alf.algorithms.dqn_algorithm import DQNAlgorithm
    from alf.algorithms.sac_algorithm import SACAlgorithm
    from alf.trainers.trainer_config import TrainerConfig
    alf.trainers.parse_config([RUN_SETUPS[algo]["gin"]], params)
    env = gym.make(RUN_SETUPS[algo]["env"])
    torch.manual_seed(0)
    ctor = DQNAlgorithm if algo == "dqn" else SACAlgorithm
    alg = ctor(env.observation_space, env.action_space,
               TrainerConfig(
                   num_updates_per_iter=SETUPS[algo]["updates"]))
    rng = np.random.default_rng(0)
    shape = env.observation_space.shape
    for _ in range(FILL // 2):
        obs = torch.randn((2, ) + shape)
        alg.store(Experience(
            observation=obs,
            action=torch.as_tensor(_random_action(env.action_space, 2, rng)),
            reward=torch.randn(2), terminated=torch.rand(2) < 0.02,
            truncated=torch.zeros(2, dtype=torch.bool),
            next_observation=torch.randn((2, ) + shape)))
    return lambda: alg.train_iter(0.5)


def sb3_update(algo: str):
    """A burst of SB3 updates on a filled buffer: returns a callable."""
    from stable_baselines3.common.logger import configure
    setup = SETUPS[algo]
    model = _sb3_model(algo, 0, RUN_SETUPS[algo]["steps"])
    model.set_logger(configure(None, []))
    rng = np.random.default_rng(0)
    space = model.observation_space
    for _ in range(FILL // 2):
        obs = rng.standard_normal((2, ) + space.shape).astype(np.float32)
        nxt = rng.standard_normal((2, ) + space.shape).astype(np.float32)
        model.replay_buffer.add(
            obs, nxt, _random_action(model.action_space, 2, rng),
            rng.standard_normal(2).astype(np.float32),
            rng.random(2) < 0.02, [{}, {}])
    model._current_progress_remaining = 0.5
    return lambda: model.train(gradient_steps=setup["updates"],
                               batch_size=setup["batch"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", choices=sorted(SETUPS), default="dqn")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--double_dqn", action="store_true",
                        help="alf's double-DQN target (SB3 has none)")
    args = parser.parse_args()
    require_sb3()
    torch.set_num_threads(1)
    params = ([] if args.algo != "dqn" or args.double_dqn
              else ["DQNAlgorithm.double_dqn=False"])
    bursts = {"alf": alf_update(args.algo, params),
              "sb3": sb3_update(args.algo)}
    times = {name: [] for name in bursts}
    for i in range(args.repeats + 1):
        for name, burst in bursts.items():
            start = time.perf_counter()
            burst()
            if i:  # the first burst warms up
                times[name].append(time.perf_counter() - start)
    per_update = {name: statistics.median(t) / SETUPS[args.algo]["updates"]
                  * 1e3 for name, t in times.items()}
    print(f"{args.algo} ({params or 'alf defaults'}), median ms per update: "
          f"alf {per_update['alf']:.3f}, sb3 {per_update['sb3']:.3f}; "
          f"sb3 / alf = {per_update['sb3'] / per_update['alf']:.2f}x")


if __name__ == "__main__":
    main()
