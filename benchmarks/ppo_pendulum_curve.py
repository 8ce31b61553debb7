r"""The evaluation curve of ppo_pendulum.gin (return against env steps).

    python benchmarks/ppo_pendulum_curve.py --seeds 2 [--root DIR]
"""
import argparse
import tempfile

from runs import first_reaching, print_curves, train_runs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--root", default=None)
    args = parser.parse_args()
    root = args.root or tempfile.mkdtemp(prefix="ppo_pendulum_")
    results = train_runs("ppo_pendulum.gin", root, range(args.seeds))
    print(f"runs in {root}")
    print_curves(results)
    for seed, curve in sorted(results.items()):
        print(f"seed {seed}: first return >= -200 at "
              f"{first_reaching(curve, -200)} env steps; best "
              f"{max(curve['average_return']):.1f}; final "
              f"{curve['average_return'][-1]:.1f} (a random policy scores "
              "about -1200)")


if __name__ == "__main__":
    main()
