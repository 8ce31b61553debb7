r"""Share of a real PPO iteration spent in the call-order check.

Trains the same config with 2 gloo processes twice per repeat, with the
call-order check on (the default) and off (``call_order_check.enabled=
False``), alternating, and prints the trainer's env steps/s (its last
progress line: training only) of both, the % difference, and what that
implies per check (the config's data-distributed calls per iteration are
known: epochs x minibatches per epoch). The check's cost in isolation, and
against hand-written DDP, is in ddp_decorator_overhead.py.

    python benchmarks/call_order_check_cost.py [--repeats 3] \
        [--num_env_steps 50000] [--gin_file ppo_cart_pole.gin] \
        [--gin_param 'X.y=z' ...]
"""
import argparse
import math
import os
import statistics
import tempfile

from runs import parse_config_or_exit, throughput_params, train_throughput


def ddp_calls_per_iteration(gin_files, params, world_size):
    """(global env steps, data-distributed calls) per iteration (PPO)."""
    from alf.trainers.trainer_config import TrainerConfig
    parse_config_or_exit("call_order_check_cost", gin_files, params)
    c = TrainerConfig().per_rank(world_size)
    per_epoch = math.ceil(c.local_num_envs * c.unroll_length /
                          c.local_minibatch_size)
    return c.steps_per_iteration, per_epoch * c.num_epochs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--num_env_steps", type=int, default=50_000)
    parser.add_argument("--num_processes", type=int, default=2)
    parser.add_argument("--gin_file", action="append", default=None,
                        help="default: ppo_cart_pole.gin")
    parser.add_argument("--gin_param", action="append", default=[])
    args = parser.parse_args()
    gin_files = args.gin_file or ["ppo_cart_pole.gin"]
    params = throughput_params(args.num_env_steps) + args.gin_param
    variants = {"check on": ["call_order_check.enabled=True"],
                "check off": ["call_order_check.enabled=False"]}
    steps_per_iter, calls = ddp_calls_per_iteration(gin_files, params,
                                                    args.num_processes)
    print(f"config: {' '.join(gin_files)} {' '.join(params)}; "
          f"{args.num_processes} processes; {calls} data-distributed calls "
          f"per iteration of {steps_per_iter} env steps")
    print(f"load before: {os.getloadavg()[0]:.2f} (1 min), "
          f"{os.getloadavg()[1]:.2f} (5 min); {os.cpu_count()} cores",
          flush=True)
    rows = {v: [] for v in variants}
    names = list(variants)
    with tempfile.TemporaryDirectory(prefix="alf-check-cost-") as root:
        for rep in range(args.repeats):
            for v in (names if rep % 2 == 0 else names[::-1]):
                r = train_throughput(
                    gin_files, params + variants[v],
                    os.path.join(root, f"{v.replace(' ', '-')}-r{rep}"),
                    num_processes=args.num_processes)
                rows[v].append(r["rate"])
                print(f"{v:9s} repeat {rep}: {r['rate']:7.0f} env steps/s; "
                      f"load {os.getloadavg()[0]:.2f}", flush=True)
    print(f"load after: {os.getloadavg()[0]:.2f} (1 min), "
          f"{os.getloadavg()[1]:.2f} (5 min)")
    on, off = (statistics.mean(rows[v]) for v in names)
    print(f"\nmean env steps/s: check on {on:.0f}, check off {off:.0f}")
    print(f"the check costs {(1 - on / off) * 100:+.1f}% of the throughput "
          f"(per repeat: " + ", ".join(
              f"{(1 - a / b) * 100:+.1f}%"
              for a, b in zip(rows["check on"], rows["check off"])) +
          "); goal < 2% for small networks")
    per_iter = steps_per_iter * (1 / on - 1 / off)
    print(f"implied cost: {per_iter * 1e3:.2f} ms per iteration = "
          f"{per_iter / calls * 1e3:.3f} ms per check ({calls} checks per "
          f"iteration of {steps_per_iter / off * 1e3:.1f} ms without them)")


if __name__ == "__main__":
    main()
