r"""Sum-tree cost at 1M capacity: sampling a minibatch and updating its
priorities (alf.replay_buffers.SumTree, one torch thread), against a plain
``torch.multinomial`` over all priorities for scale.

    python benchmarks/sum_tree_cost.py [--capacity 1000000] [--batch 256]
"""
import argparse
import os
import statistics
import time

import torch

from alf.replay_buffers import SumTree
from runs import positive_int


def _per_call_ms(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capacity", type=positive_int, default=1_000_000)
    parser.add_argument("--batch", type=positive_int, action="append",
                        default=None,
                        help="minibatch size (repeat); default 64 256 1024")
    parser.add_argument("--repeats", type=positive_int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    tree = SumTree(args.capacity)
    t = time.perf_counter()
    tree.update(torch.arange(args.capacity),
                torch.rand(args.capacity, generator=g))
    fill = time.perf_counter() - t
    flat = tree.get(torch.arange(args.capacity))
    print(f"capacity {args.capacity:,}; load {os.getloadavg()[0]:.2f}; "
          f"filling all priorities once: {fill * 1e3:.0f} ms")
    print(f"{'batch':>6s} {'sample ms':>10s} {'update ms':>10s} "
          f"{'multinomial ms':>15s}")
    for batch in args.batch or [64, 256, 1024]:
        idx = tree.sample(batch, g)[0]
        sample = _per_call_ms(lambda: tree.sample(batch, g), args.repeats)
        update = _per_call_ms(lambda: tree.update(
            idx, torch.rand(batch, generator=g)), args.repeats)
        multinomial = _per_call_ms(lambda: torch.multinomial(
            flat, batch, replacement=True, generator=g), 20)
        print(f"{batch:6d} {sample:10.3f} {update:10.3f} {multinomial:15.3f}")


if __name__ == "__main__":
    main()
