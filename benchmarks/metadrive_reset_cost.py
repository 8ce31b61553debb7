r"""What a MetaDrive reset costs, with alf's faster seeding and without
rebuilding every episode, side by side in one process.

A learning policy ends an episode every ~65 steps early in training (it
crashes), so MetaDrive's reset is a large share of what a training step
costs, unlike the random actions of bare MetaDrive, which rarely end an
episode. One engine (one process) alternates blocks of resets, each reset
followed by one step, over four variants:

* ``seeding``: MetaDrive's own ``get_np_random`` or alf's
  (`alf.environments.metadrive_seeding`, the same random streams);
* ``force_destroy``: every episode's objects built anew (what evaluation
  uses) or reused (what training uses; `suite_metadrive.load`).

It prints each variant's median CPU milliseconds per reset and its ratio to
MetaDrive's defaults as alf used them before (MetaDrive's seeding, objects
built anew), and what that is per env step for an episode length.

    python benchmarks/metadrive_reset_cost.py [--blocks 6] [--resets 10]
        [--episode_steps 65]
"""
import argparse
import itertools
import os
import statistics
import sys
import time

import numpy as np

from alf.environments import metadrive_seeding, suite_metadrive
from alf.environments.metadrive_env_fn import make_env

CONFIG = dict(num_scenarios=10, start_seed=1000, traffic_density=0.1,
              horizon=1000, map=3, force_destroy=True, log_level=50)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=6,
                        help="blocks per variant, interleaved")
    parser.add_argument("--resets", type=int, default=10,
                        help="resets per block")
    parser.add_argument("--episode_steps", type=float, default=65.0,
                        help="episode length for the per-step figure")
    args = parser.parse_args()
    env = make_env(suite_metadrive.OBSERVATIONS["state"][0], dict(CONFIG))
    if metadrive_seeding.install() is None:
        sys.exit("alf's seeding is not installed in this MetaDrive "
                 "(metadrive_seeding.install refused it): nothing to compare")
    env.reset(seed=0)  # starts the engine
    engine = env.unwrapped.engine
    for _ in range(4 * CONFIG["num_scenarios"]):  # every map built once
        env.reset()
    variants = list(itertools.product(("metadrive", "alf"), (True, False)))
    times = {v: [] for v in variants}
    step = np.array([0.0, 1.0], np.float32)
    print(f"load before: {os.getloadavg()[0]:.2f}", flush=True)
    for block in range(args.blocks):
        for seeding, destroy in variants[block % 4:] + variants[:block % 4]:
            if seeding == "alf":
                metadrive_seeding.install()
            else:
                metadrive_seeding.uninstall()
            engine.global_config["force_destroy"] = destroy
            env.reset()  # leaves the other variant's objects behind
            start = time.process_time()
            for _ in range(args.resets):
                env.reset()
                env.step(step)
            times[(seeding, destroy)].append(
                (time.process_time() - start) / args.resets * 1e3)
    print(f"load after: {os.getloadavg()[0]:.2f}")
    base = statistics.median(times[("metadrive", True)])
    print(f"{'seeding':10} {'force_destroy':>13} {'ms/reset':>9} "
          f"{'ratio':>6} {'ms/step at ' + str(args.episode_steps):>16}  "
          "blocks")
    for (seeding, destroy), ms in times.items():
        med = statistics.median(ms)
        print(f"{seeding:10} {str(destroy):>13} {med:9.1f} {med / base:6.2f} "
              f"{med / args.episode_steps:16.3f}  "
              f"{' '.join(f'{t:.1f}' for t in ms)}")
    env.close()


if __name__ == "__main__":
    main()
