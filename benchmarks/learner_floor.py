r"""The learner's CPU per env step against its matmul floor.

    python benchmarks/learner_floor.py [--gin_file ppg_metadrive.gin] \
        [--iterations 8] [--gin_param ...]

Builds the config's algorithm for its environment's spaces (the environment
is built once to read them, then closed) and trains it, in this process on
one thread, as the trainer does in one process: ``--iterations`` unrolls of
the config's size (``unroll_length`` x ``num_envs`` steps), each stored step
by step and trained on by ``train_iter`` (PPG's auxiliary phase included
every ``aux_interval`` unrolls). The steps are synthetic: observations
sampled from the observation space, the actions the policy samples for them
with their log-probabilities, random rewards, an episode end every 200
steps; an update costs the same whatever the data (unless ``target_kl``
stops an epoch early, as it does on these random data: the number of
gradient updates is printed; ``--gin_param PPOAlgorithm.target_kl=None``
keeps every epoch).

The floor is the time of the matrix products that training needs, run back
to back: every ``F.linear`` call of as many more iterations is recorded (its
rows, inputs and outputs; with gradients, its weight gradient's product and,
where its input needs one, the input gradient's), and each distinct product
shape is timed here with ``torch.mm`` on one thread. Printed: the learner's
CPU ms per env step, the floor's, and their ratio, and each iteration's CPU
seconds (PPG's auxiliary phase makes one in ``aux_interval`` longer).
Convolutions are not counted (their count is printed): for a CNN the floor
is an underestimate.
"""
import argparse
import collections
import time
from typing import Dict, Tuple

import torch
import torch.nn.functional as F
from runs import environment_spaces, parse_config_or_exit
from torch import nn
from torch.overrides import TorchFunctionMode

from alf import nest
from alf.data_structures import Experience
from alf.trainers.trainer_config import TrainerConfig

_EPISODE = 200
Shape = Tuple[int, int, int]  # (m, k, n) of an [m, k] x [k, n] product


def _synthetic_unroll(alg, obs_space, steps: int, envs: int) -> Experience:
    raw = torch.stack([torch.as_tensor(obs_space.sample())
                       for _ in range(steps * envs)])
    with torch.no_grad():
        obs = alg.observe(raw)
        step = alg.rollout_step(obs)
    lead = lambda x: x.reshape((steps, envs) + x.shape[1:])  # noqa: E731
    obs = lead(obs)
    ends = (torch.arange(steps) % _EPISODE == _EPISODE - 1)[:, None]
    return Experience(
        observation=obs, action=lead(step.output),
        reward=torch.randn(steps, envs),
        terminated=ends.expand(steps, envs).clone(),
        truncated=torch.zeros(steps, envs, dtype=torch.bool),
        next_observation=torch.cat([obs[1:], obs[-1:]]),
        rollout_info=nest.map_structure(lead, step.info),
        policy_version=torch.zeros(steps, envs, dtype=torch.int64))


class _CountProducts(TorchFunctionMode):
    """Counts the matrix products of every ``F.linear`` call (nn.Linear's
    and functional ones) by shape, forward and backward."""

    def __init__(self):
        super().__init__()
        self.counts: Dict[Shape, int] = collections.Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is F.linear:
            x, w = args[0], args[1]
            rows, (n, k) = x.numel() // x.shape[-1], w.shape
            self.counts[(rows, k, n)] += 1
            if torch.is_grad_enabled() and w.requires_grad:
                self.counts[(n, rows, k)] += 1  # weight gradient: dY^T X
            if torch.is_grad_enabled() and x.requires_grad:
                self.counts[(rows, n, k)] += 1  # input gradient: dY W
        return func(*args, **(kwargs or {}))


def _product_seconds(shape: Shape) -> float:
    m, k, n = shape
    a, b = torch.randn(m, k), torch.randn(k, n)
    reps = max(3, min(200, int(2e8 / max(1, m * k * n))))
    torch.mm(a, b)
    start = time.thread_time()
    for _ in range(reps):
        torch.mm(a, b)
    return (time.thread_time() - start) / reps


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gin_file", default="ppg_metadrive.gin")
    parser.add_argument("--gin_param", action="append", default=[])
    parser.add_argument("--iterations", type=int, default=8)
    args = parser.parse_args()
    torch.set_num_threads(1)
    parse_config_or_exit("learner_floor", [args.gin_file], args.gin_param)
    cfg = TrainerConfig()
    obs_space, act_space, _ = environment_spaces(cfg)
    alg = cfg.algorithm_ctor(observation_space=obs_space,
                             action_space=act_space, config=cfg)
    steps, envs = cfg.unroll_length, cfg.num_envs
    unroll = _synthetic_unroll(alg, obs_space, steps, envs)
    updates = [0]
    update = alg.update_with_gradient

    def counted_update(*a, **kw):
        updates[0] += 1
        return update(*a, **kw)
    alg.update_with_gradient = counted_update

    per_iteration: list = []

    def train(iterations: int) -> float:
        start = time.thread_time()
        per_iteration.clear()
        for i in range(iterations):
            began = time.thread_time()
            for t in range(steps):
                alg.store(nest.map_structure(lambda x: x[t], unroll))
            alg.train_iter(progress=i / max(1, args.iterations))
            per_iteration.append(time.thread_time() - began)
        return time.thread_time() - start

    train(1)  # warm-up: allocations, first calls
    updates[0] = 0
    seconds = train(args.iterations)
    iteration_seconds = list(per_iteration)
    timed_updates = updates[0]
    # Counted on as many more iterations (the mode costs time per call),
    # which hold as many auxiliary phases when ``iterations`` is a multiple
    # of PPG's aux_interval.
    with _CountProducts() as counting:
        train(args.iterations)
    counts = counting.counts
    env_steps = args.iterations * steps * envs
    floor = sum(c * _product_seconds(s) for s, c in counts.items())
    convs = sum(isinstance(m, nn.Conv2d) for m in alg.modules())
    ms = 1e3 / env_steps
    print(f"{args.gin_file}: {type(alg).__name__}, {args.iterations} "
          f"iterations of {steps} x {envs} env steps, one thread; "
          f"{timed_updates} gradient updates timed ({updates[0] - timed_updates}"
          f" in the counted iterations); {len(counts)} product shapes, "
          f"{sum(counts.values())} products")
    print(f"  learner  {seconds * ms:8.4f} ms CPU per env step")
    # Uneven iterations (PPG's auxiliary phase) stall asynchronous
    # collection at its lag bound even when the mean keeps up.
    mean = sum(iteration_seconds) / len(iteration_seconds)
    print("  per iteration (s CPU): " +
          " ".join(f"{x:.2f}" for x in iteration_seconds) +
          f"; the longest {max(iteration_seconds) / mean:.2f}x the mean")
    print(f"  floor    {floor * ms:8.4f} ms (its nn.Linear products alone"
          f"{f'; {convs} convolutions not counted' if convs else ''})")
    print(f"  ratio    {seconds / floor:8.2f}x the floor")
    if timed_updates != updates[0] - timed_updates:
        print("  (unlike work: target_kl stopped epochs at different points "
              "in the timed and the counted iterations; rerun with "
              "--gin_param PPOAlgorithm.target_kl=None for a ratio)")


if __name__ == "__main__":
    main()
