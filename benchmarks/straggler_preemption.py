r"""Straggler preemption: 2-process throughput with and without a slow rank,
preemption off and on, in one run.

    python benchmarks/straggler_preemption.py [--workloads cart_pole,metadrive]
        [--repeats 2] [--slowdown 2]

Every workload runs four variants with ``--distributed multi-process
--num_processes 2``, alternating their order between repeats so that machine
noise hits all of them:

* ``even``: no straggler, preemption off (the reference);
* ``even+preempt``: no straggler, preemption on (its cost when nobody
  straggles: rollouts cut by a hair, a store read per millisecond);
* ``straggler``: rank 1's collection ``--slowdown`` times slower
  (`alf.environments.straggler`), preemption off: every iteration waits
  for rank 1;
* ``straggler+preempt``: the same with preemption on (the default rule,
  ``"throughput"``: only while rank 1 collects slower than the run trains);
* ``straggler+always``: preemption with DD-PPO's rule alone
  (``preempt_rule="always"``).

A variant's rate is the trainer's own env steps/s (steps actually collected,
training only: no start-up, no evaluation); the report gives each variant's
ratio to ``even``, the issue's goal being ``straggler+preempt`` >= 0.8.

The bound: with rank 1 collecting ``s`` times slower and collection the
whole cost, the two ranks together collect ``(1 + 1/s) / 2`` of ``even``
(0.75 at s = 2) once rank 1 never holds rank 0 up; the learner's time,
which preemption does not shrink, and cores freed by the straggler's sleeps
(on a machine where the ranks share cores) move it.

``cart_pole``: ``ppo_cart_pole.gin`` (synchronous collection in each rank).
``metadrive``: ``ppg_metadrive.gin`` (asynchronous collection: actors) with
one environment per rank, so that on a 2-core machine each rank has a core
of its own, as ranks on separate machines do. With the config's 2 per rank,
6 processes share 2 cores: a rank that sleeps hands its CPU to the other,
and no straggler forms (measured: 642 env steps/s with the straggler, 641
without).
"""
import argparse
import os
import statistics
import tempfile

from runs import throughput_params, train_throughput

WORKLOADS = {
    # gin file, env steps per run, the config's env_load_fn, extra bindings
    "cart_pole": ("ppo_cart_pole.gin", 40960, "@suite_gym.load",
                  ["TrainerConfig.num_eval_episodes=1"]),
    # 16 iterations of 2048 steps: 4 auxiliary phases.
    "metadrive": ("ppg_metadrive.gin", 32768, "@suite_metadrive.load",
                  ["TrainerConfig.num_eval_episodes=1",
                   "TrainerConfig.num_envs=2"]),
}
VARIANTS = ("even", "even+preempt", "straggler", "straggler+preempt",
            "straggler+always")


def variant_params(variant: str, load_fn: str, slowdown: float):
    """The gin bindings of ``variant``."""
    params = []
    if variant.startswith("straggler"):
        params += ["TrainerConfig.env_load_fn=@straggler_load",
                   f"straggler_load.load_fn={load_fn}",
                   "straggler_load.ranks=(1,)",
                   f"straggler_load.slowdown={slowdown}"]
    if variant.endswith(("preempt", "always")):
        # With 2 ranks, 0.6 (DD-PPO's) would wait for both: never preempt.
        params += ["TrainerConfig.preempt_stragglers=True",
                   "TrainerConfig.sync_frac=0.5"]
    if variant.endswith("always"):
        params += ["TrainerConfig.preempt_rule='always'"]
    return params


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="cart_pole,metadrive")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--slowdown", type=float, default=2.0)
    parser.add_argument("--num_env_steps", type=int, default=None)
    args = parser.parse_args()
    unknown = set(args.workloads.split(",")) - set(WORKLOADS)
    if unknown:
        parser.error(f"--workloads: unknown {', '.join(sorted(unknown))}; "
                     f"valid: {', '.join(sorted(WORKLOADS))}")
    print(f"load before: {os.getloadavg()[0]:.2f}; {os.cpu_count()} cores; "
          f"rank 1 {args.slowdown}x slower in the straggler variants",
          flush=True)
    results = {}
    with tempfile.TemporaryDirectory(prefix="alf-straggler-") as root:
        for workload in args.workloads.split(","):
            gin_file, steps, load_fn, extra = WORKLOADS[workload]
            steps = args.num_env_steps or steps
            params = throughput_params(steps) + extra + [
                "TrainerConfig.log_interval_seconds=1000"]
            print(f"\n{workload}: {gin_file} {' '.join(params)}", flush=True)
            rates = results[workload] = {v: [] for v in VARIANTS}
            for rep in range(args.repeats):
                order = VARIANTS[::-1] if rep % 2 else VARIANTS
                for v in order:
                    r = train_throughput(
                        [gin_file],
                        params + variant_params(v, load_fn, args.slowdown),
                        os.path.join(root, f"{workload}-{v}-r{rep}"),
                        num_processes=2)
                    rates[v].append(r["rate"])
                    print(f"repeat {rep}: {v:<18} {r['rate']:7.0f} env "
                          f"steps/s ({r['env_steps']} steps, wall "
                          f"{r['wall']:.0f} s); load "
                          f"{os.getloadavg()[0]:.2f}", flush=True)
    print(f"\nload after: {os.getloadavg()[0]:.2f}")
    bound = (1 + 1 / args.slowdown) / 2
    for workload, rates in results.items():
        even = statistics.mean(rates["even"])
        print(f"\n{workload} (collection-bound limit with the straggler "
              f"and preemption: {bound:.2f} of even)")
        print(f"{'variant':<18} {'env steps/s':>11} {'/ even':>7}  "
              "per repeat")
        for v in VARIANTS:
            mean = statistics.mean(rates[v])
            print(f"{v:<18} {mean:11.0f} {mean / even:7.2f}  "
                  + ", ".join(f"{x:.0f}" for x in rates[v]))


if __name__ == "__main__":
    main()
