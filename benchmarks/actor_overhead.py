r"""What an asynchronous-collection actor adds to every environment step.

    python benchmarks/actor_overhead.py [--gin_file ppg_metadrive.gin] \
        [--unrolls 4] [--env_touch_mb 0] [--gin_param ...]

An actor (`alf.trainers.actor`) steps one simulator (MetaDrive: one engine
per process) and, between its steps, acts with its policy copy at batch
size one, normalises and stores the step. On a machine with many cores that
CPU is paid on every step beside the simulator's own, so it bounds how
close training can come to bare simulation (docs/benchmarks.md, "GPU
checks").

This builds the config's environment once to read its spaces, then runs
the actor's real loop (`_Actor._loop`: polling, acting, stepping, storing,
sending each unroll) on a free environment with those spaces (a fixed
observation, episodes of 500 steps), in this process on one thread, and
prints per env step:

* the loop's CPU, less the free environment's own step (measured apart):
  the actor's overhead;
* its parts, each measured apart in a tight loop (``observe``: the
  observation normaliser; ``rollout_step``: forward, sample, log-prob;
  ``transition``; the storage write);
* the floor: the policy network's forward pass alone, and the overhead's
  ratio to it.

A free environment leaves the policy's weights in the caches from one
step to the next, which a simulator's step does not: ``--env_touch_mb M``
has each free step read and write M MB (beyond a core's L2 cache, or
the shared L3), so the overhead is measured with the caches swept as
they are in training.
"""
import argparse
import time

import gymnasium as gym
import numpy as np
import torch
from runs import environment_spaces, parse_config_or_exit

from alf.trainers.actor import _Actor, transition
from alf.trainers.config_parser import parse_config
from alf.trainers.trainer_config import TrainerConfig

_EPISODE = 500


class _FreeEnv(gym.Env):
    """An environment that costs next to nothing: ``observation`` always;
    with ``touch_mb``, each step also reads and writes that many MB, as a
    simulator's step sweeps the caches between two of the policy's."""

    def __init__(self, observation_space, action_space, observation,
                 touch_mb: float = 0.0):
        self.observation_space, self.action_space = (observation_space,
                                                     action_space)
        self._obs, self._t = observation, 0
        self._touched = np.zeros(int(touch_mb * 2**20) // 8)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return self._obs, {}

    def step(self, action):
        self._t += 1
        if self._touched.size:
            self._touched += 1.0
        return self._obs, 0.1, False, self._t % _EPISODE == 0, {}


class _Stop(Exception):
    pass


class _Conn:
    """The learner's end, never answering: stops the loop after n sends."""

    def __init__(self):
        self.left = 0

    def poll(self):
        return False

    def send_bytes(self, data):
        self.left -= 1
        if self.left <= 0:
            raise _Stop


def _cpu_per_call(fn, n: int) -> float:
    fn()
    start = time.thread_time()
    for _ in range(n):
        fn()
    return (time.thread_time() - start) / n


def _policy_network(alg) -> torch.nn.Module:
    """The network a step's action comes from: the actor of PPO, PPG and
    SAC, DQN's Q network."""
    for name in ("actor", "q_net"):
        if isinstance(getattr(alg, name, None), torch.nn.Module):
            return getattr(alg, name)
    raise SystemExit(f"actor_overhead: {type(alg).__name__} has no actor "
                     "or q_net to time as the floor")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gin_file", default="ppg_metadrive.gin")
    parser.add_argument("--gin_param", action="append", default=[])
    parser.add_argument("--unrolls", type=int, default=4)
    parser.add_argument("--env_touch_mb", type=float, default=0.0,
                        help="MB the free environment reads and writes "
                        "each step (caches swept as a simulator would)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    parse_config_or_exit("actor_overhead", [args.gin_file], args.gin_param)
    cfg = TrainerConfig()
    obs_space, act_space, first = environment_spaces(cfg)
    observation = np.asarray(first[0])
    gym.register("AlfBenchFree-v0", entry_point=lambda: _FreeEnv(
        obs_space, act_space, observation, args.env_touch_mb))
    parse_config([args.gin_file], [
        *args.gin_param, "TrainerConfig.env_load_fn=@suite_gym.load",
        'TrainerConfig.env_name="AlfBenchFree-v0"'])
    cfg = TrainerConfig()
    env = cfg.env_load_fn(cfg.env_name, num_envs=1, seed=0,
                          asynchronous=False)
    alg = cfg.algorithm_ctor(observation_space=env.observation_space,
                             action_space=env.action_space, config=cfg)
    steps = cfg.unroll_length
    conn = _Conn()
    actor = _Actor(conn, env, alg, steps, max_policy_lag=1)
    actor._version = 1 << 40  # never waits for a version

    def run(unrolls: int) -> float:
        conn.left = unrolls
        start = time.thread_time()
        try:
            with torch.inference_mode():
                actor._loop(0, 0)
        except _Stop:
            pass
        return (time.thread_time() - start) / (unrolls * steps)

    run(1)  # warm-up: storage, first calls
    loop = run(args.unrolls)
    n = min(steps * args.unrolls, 4000)
    with torch.inference_mode():
        raw = env.reset(seed=0).observation
        obs = alg.observe(raw)
        step = alg.rollout_step(obs)
        env_step = _cpu_per_call(lambda: env.step(step.output), n)
        ts = env.step(step.output)
        versions = torch.zeros(1, dtype=torch.int64)
        parts = {
            "observe": _cpu_per_call(lambda: alg.observe(raw), n),
            "rollout_step": _cpu_per_call(lambda: alg.rollout_step(obs), n),
            "transition": _cpu_per_call(
                lambda: transition(alg, obs, step, ts, versions), n),
            "storage write": _cpu_per_call(lambda: actor._write(
                0, (transition(alg, obs, step, ts, versions)[0], {})), n),
        }
        parts["storage write"] -= parts["transition"]
        policy_net = _policy_network(alg)
        floor = _cpu_per_call(lambda: policy_net(obs), n)
    env.close()
    overhead = loop - env_step
    ms = 1e3
    print(f"{args.gin_file}: observation {obs_space.shape}, action "
          f"{act_space}; {args.unrolls} unrolls of {steps} steps, one "
          f"environment touching {args.env_touch_mb:g} MB a step, CPU ms "
          f"per env step")
    print(f"  actor loop, free environment {loop * ms:8.4f}")
    print(f"  free environment's own step  {env_step * ms:8.4f}")
    print(f"  actor overhead               {overhead * ms:8.4f}")
    for name, value in parts.items():
        print(f"    {name:26s} {value * ms:8.4f}  (apart)")
    print(f"  floor: policy forward alone  {floor * ms:8.4f}; overhead is "
          f"{overhead / floor:.1f}x the floor")


if __name__ == "__main__":
    main()
