r"""What global prioritized replay costs: sampling time on 2 gloo ranks, and
the load imbalance of its per-rank split at larger scales.

1. Measured, 2 real gloo processes on this machine (one torch thread each):
   the median time of one minibatch draw (`Replay.sample`, as off-policy
   training draws it) for ``UniformReplay`` (per rank),
   ``PrioritizedReplay`` (per rank) and ``PrioritizedGlobalReplay`` (union
   of the ranks' buffers: one all-reduce of 3 x world_size float64 per
   draw).
2. Computed: a global minibatch of B splits among N ranks multinomially, so
   ranks draw different numbers of items and DDP waits for the busiest
   one. With equal total priorities, the expected largest share over the
   mean share B / N (drawn 2,000 times per setting) is the slowdown of the
   forward/backward a rank does per update compared with an even split.

    python benchmarks/prioritized_global_cost.py [--capacity 100000]
"""
import argparse
import statistics
import time

import torch
import torch.distributed as dist

from alf.data_structures import Experience
from runs import two_gloo_ranks

MODES = ("UniformReplay", "PrioritizedReplay", "PrioritizedGlobalReplay")


def _fill(replay, steps: int, envs: int) -> None:
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        obs = torch.randn(envs, 4, generator=g)
        replay.add_batch(Experience(obs, torch.zeros(envs, dtype=torch.long),
                                    torch.zeros(envs),
                                    torch.zeros(envs, dtype=torch.bool),
                                    torch.zeros(envs, dtype=torch.bool), obs))


def _rank(rank, init_file, args, out):
    capacity, batch, repeats = args
    world = 2
    from alf import replay_buffers
    from alf.utils import distributed
    torch.set_num_threads(1)
    envs = 8
    steps = capacity // envs
    with distributed.process_group(rank, world, "gloo", init_file):
        result = {}
        for mode in MODES:
            torch.manual_seed(1)  # equal split generators on both ranks
            replay = getattr(replay_buffers, mode)()
            replay.build(steps, envs)
            _fill(replay, steps, envs)
            # Each rank's share; the global strategy draws the whole
            # minibatch over the ranks.
            draw = lambda: replay.sample(batch // world)  # noqa: E731
            times = []
            for i in range(repeats + 10):
                dist.barrier()  # time draws, not arrival skew
                t = time.perf_counter()
                draw()
                if i >= 10:
                    times.append(time.perf_counter() - t)
            result[mode] = statistics.median(times) * 1e3
        if rank == 0:
            out.put(result)


def measure(capacity: int, batch: int, repeats: int) -> dict:
    """Median ms per minibatch draw on rank 0 of 2 gloo ranks, by mode."""
    return two_gloo_ranks(_rank, (capacity, batch, repeats), timeout=600)


def imbalance(world: int, batch: int, trials: int = 2000) -> float:
    """E[max over ranks of the rank's share] / (batch / world)."""
    g = torch.Generator().manual_seed(0)
    probs = torch.full((world, ), 1.0 / world)
    shares = torch.stack([torch.bincount(torch.multinomial(
        probs, batch, replacement=True, generator=g), minlength=world)
        for _ in range(trials)])
    return float(shares.max(1).values.double().mean()) / (batch / world)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capacity", type=int, default=100_000,
                        help="transitions per rank")
    parser.add_argument("--batch", type=int, default=256,
                        help="global minibatch size")
    parser.add_argument("--repeats", type=int, default=300)
    args = parser.parse_args()
    print(f"1. one minibatch draw, 2 gloo ranks, {args.capacity} transitions "
          f"per rank, global minibatch {args.batch} (median ms, rank 0):")
    ms = measure(args.capacity, args.batch, args.repeats)
    for mode in MODES:
        print(f"   {mode:24s} {ms[mode]:7.3f} ms  "
              f"({ms[mode] / ms['UniformReplay']:.1f}x uniform)")
    print("\n2. busiest rank's share / even share (computed, equal totals):")
    batches = (256, 1024, 4096)
    print("   ranks " + "".join(f"{'B=' + str(b):>9s}" for b in batches))
    for world in (2, 8, 32, 128):
        print(f"   {world:5d} " + "".join(
            f"{imbalance(world, b):9.2f}" for b in batches))


if __name__ == "__main__":
    main()
