"""What saving a replay buffer beside a checkpoint costs in memory.

    python benchmarks/replay_save_memory.py [--capacity 1000000] [--dim 100]

Fills a `UniformReplay` of ``--capacity`` float32 observations of
``--dim`` values (full, then half full), saves it as a rank's replay file
(`Checkpointer.save_local`, as training does with every checkpoint) and
prints the process's resident memory before the save and its peak during
it (Linux: ``VmHWM``, reset through ``/proc/self/clear_refs``), with the
file's size and the time the save took.
"""
import argparse
import os
import tempfile
import time

import torch
from runs import positive_int

from alf.replay_buffers import UniformReplay
from alf.trainers.checkpointer import Checkpointer


def _status_mb(key: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    raise SystemExit(f"replay_save_memory: no {key} in /proc/self/status")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capacity", type=positive_int, default=1_000_000)
    parser.add_argument("--dim", type=positive_int, default=100)
    args = parser.parse_args()
    buffer = UniformReplay().build(args.capacity, 1)
    buffer.add_batch({"obs": torch.ones(1, args.dim)})
    for _, t in buffer.named_buffers():
        if t.dim() > 1:
            t.fill_(1.0)  # every page resident, as a filled buffer's
    storage_mb = args.capacity * args.dim * 4 / 2**20
    print(f"storage {storage_mb:.0f} MB ({args.capacity} x {args.dim} "
          "float32)")
    for fraction in (1.0, 0.5):
        # The counters of a buffer filled that far (filling it step by
        # step would take minutes and save the same tensors).
        buffer._added = int(args.capacity * fraction)
        buffer._num_added.fill_(buffer._added)
        before = _status_mb("VmRSS")
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets the peak (VmHWM) to the current RSS
        with tempfile.TemporaryDirectory() as folder:
            start = time.perf_counter()
            path = Checkpointer(folder).save_local(buffer.contents(), 1, 0, 1)
            seconds = time.perf_counter() - start
            size = os.path.getsize(path) / 2**20
        peak = _status_mb("VmHWM")
        print(f"filled {fraction:4.0%}: file {size:6.0f} MB in {seconds:5.2f} "
              f"s; resident {before:6.0f} MB before, peak {peak:6.0f} MB "
              f"during the save (+{peak - before:.0f} MB, "
              f"{(peak - before) / storage_mb:.2f}x the storage)")


if __name__ == "__main__":
    main()
