r"""The evaluation curve of ppo_pendulum.gin (return against env steps).

    python benchmarks/ppo_pendulum_curve.py --seeds 2 [--root DIR]
        [--num_env_steps N]   (default: the gin file's 300k)
"""
import argparse
import tempfile

from runs import first_reaching, positive_int, print_curves, train_runs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=positive_int, default=2)
    parser.add_argument("--root", default=None)
    parser.add_argument("--num_env_steps", type=positive_int, default=None,
                        help="a shorter run, e.g. to check the script")
    args = parser.parse_args()
    root = args.root or tempfile.mkdtemp(prefix="ppo_pendulum_")
    params = ([] if args.num_env_steps is None else
              [f"TrainerConfig.num_env_steps={args.num_env_steps}"])
    results = train_runs("ppo_pendulum.gin", root, range(args.seeds), params)
    print(f"runs in {root}")
    print_curves(results)
    for seed, curve in sorted(results.items()):
        reach = first_reaching(curve, -200)
        when = ("never" if reach is None else f"at {reach} env steps")
        print(f"seed {seed}: first return >= -200 {when}; best "
              f"{max(curve['average_return']):.1f}; final "
              f"{curve['average_return'][-1]:.1f} (a random policy scores "
              "about -1200)")


if __name__ == "__main__":
    main()
