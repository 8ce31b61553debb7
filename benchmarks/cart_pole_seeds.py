r"""Does a config reach an evaluation return of 475 (``--threshold``) within
100k env steps (``--num_env_steps``)? Trains one run per seed (two at a time)
and prints a table.

    python benchmarks/cart_pole_seeds.py --seeds 5 [--gin_file ppg_cart_pole.gin]
    python benchmarks/cart_pole_seeds.py --seeds 5 --gin_file sac_pendulum.gin \
        --threshold -200 --num_env_steps 20000 --eval_interval -1
    python benchmarks/cart_pole_seeds.py --seeds 5 --gin_file ppg_cart_pole.gin \
        --parallel 1 --extra=--distributed=multi-process --extra=--num_processes=2
"""
import argparse
import tempfile

from runs import first_reaching, positive_int, train_runs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gin_file", default="ppo_cart_pole.gin")
    parser.add_argument("--seeds", type=positive_int, default=5)
    parser.add_argument("--parallel", type=int, default=2,
                        help="runs at a time (1 for 2-process runs)")
    parser.add_argument("--num_env_steps", type=positive_int, default=100_000)
    parser.add_argument("--threshold", type=float, default=475.0)
    parser.add_argument("--eval_interval", type=int, default=10,
                        help="iterations between evaluations (-1: the gin "
                        "file's)")
    parser.add_argument("--root", default=None,
                        help="keep the runs here (default: a temp folder)")
    parser.add_argument("--extra", action="append", default=[],
                        help="an extra train CLI argument (repeat), e.g. "
                        "--extra=--distributed=multi-process")
    args = parser.parse_args()
    root = args.root or tempfile.mkdtemp(prefix="cart_pole_seeds_")
    params = [f"TrainerConfig.num_env_steps={args.num_env_steps}"]
    if args.eval_interval >= 0:
        params.append(f"TrainerConfig.eval_interval={args.eval_interval}")
    results = train_runs(args.gin_file, root, range(args.seeds), params,
                         parallel=args.parallel, extra_args=args.extra)
    print(f"{args.gin_file} {' '.join(args.extra)}: runs in {root}")
    first = f"first env steps with return >= {int(args.threshold)}"
    print(f"{'seed':>4s} {first:>38s}"
          f" {'best return':>12s} {'final return':>13s}")
    passed = 0
    for seed, curve in sorted(results.items()):
        reach = first_reaching(curve, args.threshold)
        passed += reach is not None
        print(f"{seed:4d} {str(reach) if reach else 'never':>38s} "
              f"{max(curve['average_return']):12.1f} "
              f"{curve['average_return'][-1]:13.1f}")
    print(f"{passed} of {args.seeds} seeds reached {args.threshold:g} within "
          f"{args.num_env_steps} env steps")


if __name__ == "__main__":
    main()
