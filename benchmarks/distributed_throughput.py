r"""Env steps/s of 1 process vs 2 processes on the same global config.

Runs ``python -m alf.bin.train`` as a subprocess with ``--distributed none``
and with ``--distributed multi-process --num_processes 2`` (gloo, one torch
thread per process), alternating the two modes over ``--repeats`` so machine
noise hits both. Config sizes are global, so both modes are the same
experiment: 2 processes each run half the environments and half of every
minibatch, and the same number of minibatches.

Two figures per run: the trainer's own rate (its last ``... | N steps/s |``
console line: training only, no evaluation, no start-up) and the wall-clock
rate of the whole command (interpreter and rank start-up and the final
evaluation included).

``--preset compute`` makes per-rank compute dominate communication: 256x256
actor and critic, 32 environments, minibatch 1024 (512 per rank).

    python benchmarks/distributed_throughput.py [--repeats 2] \
        [--num_env_steps 50000] [--preset default|compute] \
        [--gin_file ppo_cart_pole.gin] [--gin_param 'X.y=z' ...]
"""
import argparse
import os
import statistics
import tempfile

from runs import positive_int, throughput_params, train_throughput

PRESETS = {
    "default": [],
    "compute": [
        "ActorDistributionNetwork.hidden_sizes=(256, 256)",
        "ValueNetwork.hidden_sizes=(256, 256)",
        "TrainerConfig.num_envs=32", "TrainerConfig.minibatch_size=1024"
    ],
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=positive_int, default=2)
    parser.add_argument("--num_env_steps", type=positive_int, default=50_000)
    parser.add_argument("--num_processes", type=int, default=2)
    parser.add_argument("--preset", choices=sorted(PRESETS),
                        default="default")
    parser.add_argument("--gin_file", action="append", default=None,
                        help="default: ppo_cart_pole.gin")
    parser.add_argument("--gin_param", action="append", default=[],
                        help="extra bindings, after the preset's")
    args = parser.parse_args()
    gin_files = args.gin_file or ["ppo_cart_pole.gin"]
    params = (throughput_params(args.num_env_steps) +
              ["TrainerConfig.torch_num_threads=1"] + PRESETS[args.preset] +
              args.gin_param)
    n = args.num_processes
    modes = (1, n)
    print(f"config: {' '.join(gin_files)} {' '.join(params)}")
    print(f"load before: {os.getloadavg()[0]:.2f} (1 min), "
          f"{os.getloadavg()[1]:.2f} (5 min); {os.cpu_count()} cores",
          flush=True)
    rows = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="alf-throughput-") as root:
        for rep in range(args.repeats):
            for m in (modes if rep % 2 == 0 else modes[::-1]):
                r = train_throughput(gin_files, params,
                                     os.path.join(root, f"p{m}-r{rep}"),
                                     num_processes=m)
                rows[m].append(r)
                print(f"{m} proc, repeat {rep}: {r['rate']:7.0f} env steps/s "
                      f"(trainer), {r['wall_rate']:7.0f} env steps/s "
                      f"(wall, {r['wall']:.1f} s for {r['env_steps']} "
                      f"steps); load {os.getloadavg()[0]:.2f}", flush=True)
    print(f"load after: {os.getloadavg()[0]:.2f} (1 min), "
          f"{os.getloadavg()[1]:.2f} (5 min)")
    mean = {m: {k: statistics.mean(r[k] for r in rows[m])
                for k in ("rate", "wall_rate")} for m in modes}
    print(f"\n{'processes':>9s} {'trainer steps/s':>16s} "
          f"{'wall steps/s':>13s}")
    for m in modes:
        print(f"{m:9d} {mean[m]['rate']:16.0f} {mean[m]['wall_rate']:13.0f}")
    per_rep = [b["rate"] / a["rate"] for a, b in zip(rows[1], rows[n])]
    print(f"\nratio {n}-proc/1-proc: trainer "
          f"{mean[n]['rate'] / mean[1]['rate']:.2f}"
          f" (per repeat: {', '.join(f'{x:.2f}' for x in per_rep)}), wall "
          f"{mean[n]['wall_rate'] / mean[1]['wall_rate']:.2f} "
          f"(preset {args.preset}, {args.repeats} repeats)")


if __name__ == "__main__":
    main()
