r"""alf SAC/DQN vs Stable-Baselines3 SAC/DQN, side by side in one run.

Same hyperparameters on both sides (alf's examples, which take RL-zoo's):

* ``--algo sac``: Pendulum-v1, 2 envs, one update per env step (2 per
  2-env step), batch 256, lr 1e-3, tau 0.005, gamma 0.99, 100 random steps
  first, automatic entropy tuning, 256x256 ReLU networks;
* ``--algo dqn``: CartPole-v1, 2 envs, 128 updates every 256 env steps,
  batch 64, lr 2.3e-3, 1,000 random steps first, epsilon 1 -> 0.04 over 8,000
  steps, target network = the online one at the start of each burst,
  256x256 ReLU, Huber loss, grad-norm clip 10. SB3's DQN has no double-DQN
  target, so alf runs plain DQN too (``DQNAlgorithm.double_dqn=False``);
  ``--double_dqn`` times alf's default instead (one more forward of the
  online network per update).

``--alf_param`` adds gin bindings to alf's runs only.

One torch thread; runs alternate between the libraries so machine noise hits
both. Throughput counts training only. The return is the trained policy's
deterministic mean over the same 10 episodes for both libraries (resets
seeded alike): Pendulum's return depends strongly on the start angle, so
evaluations on different episodes are not comparable.

    pip install -e '.[bench]' -c constraints.txt
    python benchmarks/off_policy_vs_sb3.py --algo sac --seeds 3
    python benchmarks/off_policy_vs_sb3.py --algo dqn --seeds 3
"""
import argparse
import os
import tempfile
import time

import torch

from runs import (parse_config_or_exit, print_library_comparison,
                  require_sb3, throughput_params)

SETUPS = {
    "sac": dict(gin="sac_pendulum.gin", env="Pendulum-v1", steps=20_000),
    "dqn": dict(gin="dqn_cart_pole.gin", env="CartPole-v1", steps=50_000),
}


def common_return(act, algo: str, seed: int, episodes: int = 10) -> float:
    """Mean return of ``act(observation) -> action`` (numpy) over
    ``episodes`` episodes with the same seeded resets for every library."""
    import gymnasium as gym
    env = gym.make(SETUPS[algo]["env"])
    total = 0.0
    for k in range(episodes):
        obs, _ = env.reset(seed=10_000 + 100 * seed + k)
        done = False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(act(obs))
            total += float(reward)
            done = terminated or truncated
    env.close()
    return total / episodes


def _alf_actor(algorithm):
    def act(obs):
        with torch.inference_mode():
            x = algorithm.observe(torch.as_tensor(obs)[None], update=False)
            action = algorithm.predict_step(x).output[0].cpu().numpy()
        return action if action.ndim else int(action)
    return act


def run_alf(algo: str, seed: int, num_env_steps: int, extra=()):
    from alf.trainers import Trainer
    params = throughput_params(num_env_steps) + [f"TrainerConfig.seed={seed}",
                                                 *extra]
    if algo == "dqn":  # RL-zoo explores over 8k steps whatever the budget
        params.append(f"DQNAlgorithm.exploration_fraction="
                      f"{min(1.0, 8000 / num_env_steps)}")
    parse_config_or_exit("off_policy_vs_sb3", [SETUPS[algo]["gin"]], params)
    with tempfile.TemporaryDirectory() as root:
        trainer = Trainer(root)
        trainer.train()
    return trainer.steps_per_second, common_return(
        _alf_actor(trainer.algorithm), algo, seed)


def _sb3_model(algo: str, seed: int, num_env_steps: int):
    from stable_baselines3 import DQN, SAC
    from stable_baselines3.common.env_util import make_vec_env

    env = make_vec_env(SETUPS[algo]["env"], n_envs=2, seed=seed)
    common = dict(seed=seed, device="cpu", verbose=0,
                  policy_kwargs=dict(net_arch=[256, 256]))
    if algo == "sac":
        return SAC("MlpPolicy", env, learning_rate=1e-3, buffer_size=1_000_000,
                   learning_starts=100, batch_size=256, tau=0.005, gamma=0.99,
                   train_freq=1, gradient_steps=2, ent_coef="auto", **common)
    return DQN("MlpPolicy", env, learning_rate=2.3e-3, buffer_size=100_000,
               learning_starts=1000, batch_size=64, gamma=0.99,
               target_update_interval=10, train_freq=128, gradient_steps=128,
               exploration_fraction=min(1.0, 8000 / num_env_steps),
               exploration_final_eps=0.04, max_grad_norm=10, **common)


def run_sb3(algo: str, seed: int, num_env_steps: int, extra=()):
    model = _sb3_model(algo, seed, num_env_steps)
    start = time.perf_counter()
    model.learn(total_timesteps=num_env_steps)
    rate = model.num_timesteps / (time.perf_counter() - start)
    return rate, common_return(
        lambda obs: model.predict(obs, deterministic=True)[0], algo, seed)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", choices=sorted(SETUPS), default="sac")
    parser.add_argument("--num_env_steps", type=int, default=None,
                        help="default: 20,000 (sac), 50,000 (dqn)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--double_dqn", action="store_true",
                        help="alf's DQN with its default double-DQN target")
    parser.add_argument("--alf_param", action="append", default=[],
                        help="a gin binding for alf's runs (repeatable)")
    args = parser.parse_args()
    require_sb3()
    steps = args.num_env_steps or SETUPS[args.algo]["steps"]
    alf_params = list(args.alf_param)
    if args.algo == "dqn" and not args.double_dqn:
        alf_params.append("DQNAlgorithm.double_dqn=False")
    torch.set_num_threads(1)
    print(f"{args.algo}, {steps} env steps, alf params {alf_params}; load "
          f"before: {os.getloadavg()[0]:.2f}")
    rows = {"alf": [], "sb3": []}
    for seed in range(args.seeds):
        order = (("alf", run_alf), ("sb3", run_sb3))
        for name, fn in (order if seed % 2 == 0 else order[::-1]):
            rate, ret = fn(args.algo, seed, steps,
                           alf_params if name == "alf" else ())
            rows[name].append((rate, ret))
            print(f"{name:4s} seed {seed}: {rate:8.0f} env steps/s, "
                  f"eval return {ret:8.1f}", flush=True)
    print_library_comparison(
        rows, f"{args.algo}, {steps} env steps, {args.seeds} seeds")


if __name__ == "__main__":
    main()
