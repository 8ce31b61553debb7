r"""Random and full-throttle policies on MetaDrive, measured like alf's
evaluation (the suite settings of ``--gin_file``, ``ppg_metadrive.gin``
by default, its failure penalties included; the same evaluation seed; one
episode per environment), for comparison with a trained policy's eval.csv
and
eval_held_out.csv: on the training scenarios and on the held-out ones of
``ppg_metadrive.gin``'s split (MetaDrive's: training from seed 1000 up,
test scenarios 0-199).

    python benchmarks/metadrive_baselines.py [--episodes 8] [--seed 0] \
        [--out_dir DIR]

``--out_dir`` also writes each policy's results as a run would,
``DIR/random/eval.csv`` and ``eval_held_out.csv`` (and the same under
``DIR/full_throttle``), for ``python -m alf.bin.report --baseline
DIR/random``.
"""
import argparse
import os

import torch

from alf.environments import suite_metadrive
from alf.environments.env_fn import evaluation_environments
from alf.trainers.evaluator import (EVAL_CSV, HELD_OUT_CSV, Evaluator,
                                    append_eval_csv)
from alf.trainers.seeds import eval_seed
from alf.data_structures import AlgStep


class _FixedPolicy:
    """``predict_step`` for a random or a constant action."""

    def __init__(self, kind: str):
        self.kind = kind

    def observe(self, observation, update=True):
        return observation

    def predict_step(self, observation) -> AlgStep:
        n = observation.shape[0]
        if self.kind == "random":
            action = torch.rand(n, 2) * 2 - 1
        else:  # full throttle, straight
            action = torch.tensor([[0.0, 1.0]]).repeat(n, 1)
        return AlgStep(output=action)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0,
                        help="the training run's TrainerConfig.seed")
    parser.add_argument("--traffic_density", type=float, default=0.1)
    parser.add_argument("--num_scenarios", type=int, default=10,
                        help="training scenarios")
    parser.add_argument("--start_seed", type=int, default=1000,
                        help="the first training scenario")
    parser.add_argument("--held_out_start_seed", type=int, default=0)
    parser.add_argument("--held_out_scenarios", type=int, default=200)
    parser.add_argument("--gin_file", default="ppg_metadrive.gin",
                        help="the config whose environment settings "
                        "(observation, horizon, penalties) the episodes use")
    parser.add_argument("--out_dir", default=None,
                        help="also write DIR/<policy>/eval.csv and "
                        "eval_held_out.csv")
    args = parser.parse_args()
    kinds = ("random", "full_throttle")
    if args.out_dir:
        for kind in kinds:  # never overwrite what an earlier run wrote
            for name in (EVAL_CSV, HELD_OUT_CSV):
                path = os.path.join(args.out_dir, kind, name)
                if os.path.exists(path):
                    raise SystemExit(f"metadrive_baselines: {path} exists; "
                                     "choose another --out_dir")
    # The config's suite settings, e.g. its failure penalties: without
    # them a return is not what training's evaluation records.
    from alf.trainers.config_parser import parse_config
    from alf.utils.errors import AlfError
    try:
        parse_config([args.gin_file])
    except AlfError as e:
        raise SystemExit(f"metadrive_baselines: {e}") from None
    torch.manual_seed(args.seed)
    print(f"{args.episodes} episodes each, traffic {args.traffic_density}, "
          "horizon 1000")
    for split, start, count, csv_name in (
            ("train", args.start_seed, args.num_scenarios, EVAL_CSV),
            ("held-out", args.held_out_start_seed, args.held_out_scenarios,
             HELD_OUT_CSV)):
        with evaluation_environments():  # exact, as evaluation builds them
            env = suite_metadrive.load(num_envs=args.episodes,
                                       traffic_density=args.traffic_density,
                                       num_scenarios=count, start_seed=start)
        evaluator = Evaluator(env, seed=eval_seed(args.seed))
        print(f"{split}: scenarios {start}-{start + count - 1}")
        for kind in kinds:
            m = evaluator.evaluate(_FixedPolicy(kind))
            print(f"  {kind:14s} " + ", ".join(
                f"{k} {v:.3f}" for k, v in sorted(m.items())))
            if args.out_dir:
                os.makedirs(os.path.join(args.out_dir, kind), exist_ok=True)
                append_eval_csv(os.path.join(args.out_dir, kind), 0, m,
                                csv_name)
        evaluator.close()


if __name__ == "__main__":
    main()
