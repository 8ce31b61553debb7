r"""ppg_metadrive.gin's training throughput with 1 and 2 processes, against
MetaDrive's raw step rate with random actions, in one run.

Each repeat (the order alternates, so machine noise hits every variant):

* ``raw x1``: one bare ``MetaDriveEnv`` stepping random actions in one
  process (no vector env, no learning): the simulator's own rate;
* ``raw x2``: two such processes at once (env steps of both over the
  slower one's time): what this machine's cores can simulate at best;
* ``alf 1 proc`` / ``alf 2 proc``: ``python -m alf.bin.train --gin_file
  ppg_metadrive.gin`` with ``--distributed none`` and with
  ``--distributed multi-process --num_processes 2`` (the same global config:
  4 environments, 4,096 env steps per iteration, an auxiliary phase every 4
  iterations), the trainer's own rate (training only: no start-up, no
  evaluation).

The gap between ``alf`` and ``raw x2`` is what the library adds per env step
(policy inference, transfers between processes, PPO/PPG updates).

    python benchmarks/ppg_metadrive_throughput.py [--repeats 2] \
        [--num_env_steps 16384] [--raw_steps 2000]
"""
import argparse
import os
import statistics
import tempfile

from metadrive_step_rate import Raw
from runs import throughput_params, train_throughput


def raw_rates(raws, steps: int):
    """Env steps/s of ``raws[0]`` alone, then of all of ``raws`` at once."""
    alone = steps / raws[0].seconds(steps)
    for r in raws:
        r._conn.send(steps)
    seconds = [r._conn.recv()[0] for r in raws]
    return alone, len(raws) * steps / max(seconds)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--num_env_steps", type=int, default=16384,
                        help="per training run (4 iterations by default)")
    parser.add_argument("--raw_steps", type=int, default=2000)
    args = parser.parse_args()
    params = throughput_params(args.num_env_steps) + [
        "TrainerConfig.num_eval_episodes=1",
        "TrainerConfig.log_interval_seconds=1000"]
    print(f"config: ppg_metadrive.gin {' '.join(params)}")
    print(f"load before: {os.getloadavg()[0]:.2f}; {os.cpu_count()} cores",
          flush=True)
    rates = {k: [] for k in ("raw x1", "raw x2", "alf 1 proc", "alf 2 proc")}
    raws = [Raw(0), Raw(1)]
    try:
        with tempfile.TemporaryDirectory(prefix="alf-md-thr-") as root:
            for rep in range(args.repeats):
                order = ("raw", 1, 2) if rep % 2 == 0 else (2, 1, "raw")
                for what in order:
                    if what == "raw":
                        one, two = raw_rates(raws, args.raw_steps)
                        rates["raw x1"].append(one)
                        rates["raw x2"].append(two)
                        print(f"repeat {rep}: raw x1 {one:5.0f}, raw x2 "
                              f"{two:5.0f} env steps/s", flush=True)
                        continue
                    r = train_throughput(
                        ["ppg_metadrive.gin"], params,
                        os.path.join(root, f"p{what}-r{rep}"),
                        num_processes=what)
                    rates[f"alf {what} proc"].append(r["rate"])
                    print(f"repeat {rep}: alf {what} proc {r['rate']:5.0f} "
                          f"env steps/s (wall {r['wall']:.0f} s); load "
                          f"{os.getloadavg()[0]:.2f}", flush=True)
    finally:
        for r in raws:
            r.close()
    print(f"load after: {os.getloadavg()[0]:.2f}")
    mean = {k: statistics.mean(v) for k, v in rates.items()}
    print(f"\n{'variant':<12} {'env steps/s':>11}  per repeat")
    for k, v in rates.items():
        print(f"{k:<12} {mean[k]:11.0f}  {' '.join(f'{x:.0f}' for x in v)}")
    print(f"\nalf 2 proc / alf 1 proc: "
          f"{mean['alf 2 proc'] / mean['alf 1 proc']:.2f}")
    print(f"alf 2 proc / raw x2:     "
          f"{mean['alf 2 proc'] / mean['raw x2']:.2f}")
    print(f"alf 1 proc / raw x2:     "
          f"{mean['alf 1 proc'] / mean['raw x2']:.2f}")
    print(f"raw x2 / raw x1:         {mean['raw x2'] / mean['raw x1']:.2f}")


if __name__ == "__main__":
    main()
