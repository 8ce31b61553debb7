r"""Training throughput, synchronous vs asynchronous collection, in one run.

    python benchmarks/async_collection.py --workload metadrive [--repeats 2]
    python benchmarks/async_collection.py --workload cart_pole
    python benchmarks/async_collection.py --workload sac_pendulum
    python benchmarks/async_collection.py --workload metadrive \
        --processes 1,2,4,8 --modes async --devices cpu,cuda \
        --gin_param TrainerConfig.num_envs=16 \
        --gin_param TrainerConfig.unroll_length=256

Each repeat runs every variant once (the order alternates between repeats,
so machine noise hits all of them); a variant is ``python -m alf.bin.train``
with ``TrainerConfig.unroll_mode`` "sync" or "async" (``--modes``; a mode
may carry further ``TrainerConfig`` bindings after ``+``, e.g.
``async+inference_workers=1+max_policy_lag=2``), 1 or 2
processes (``--processes``), on the CPU or, in one process, on the GPU
(``--devices``), with any further ``--gin_param``; its rate is the
trainer's steady one: env steps/s from the end of the first iteration (the
pipeline's fill) to the end of training, no start-up, no evaluation. The
asynchronous variants also say how much of their time the actors waited
for a policy (collection ahead of the learner: the lag bound holds it) and
the learner for unrolls (collection behind), and every variant's
"learner bound", ``processes x 1000 / learner ms``: the rate at which the
learners, each training its share serially, would be busy all the time.

``metadrive`` (``ppg_metadrive.gin``) also runs bare MetaDrive: one
``MetaDriveEnv`` per core stepping uniformly random actions with the
config's environment settings, no vector env, no learning: the cores'
simulation capacity ``C`` (env steps/s). It prints each variant's ratio to
``C`` and to the limit ``cores / (cores / C + L)``, where ``L`` is the
learner's own CPU time per env step measured in that run (the trainer's
progress line): what the machine could do if simulation and learning were
perfectly packed on its cores.

Random actions are the cheap case: a policy that drives moves through
traffic and ends episodes sooner (MetaDrive's resets are costly), so the
same simulator takes more CPU per step under a learning policy. The
asynchronous runs' actors measure that cost, ``E`` (CPU ms per step inside
the environment's step, on the trajectories training actually drove), and
``A``, the actors' whole CPU per step (``E`` plus inference and
bookkeeping). The report adds the run's own limit ``cores / (E + L)`` (the
cores spent on nothing but this run's simulation and learning) and the
ratio to it, for every variant (``E`` from the async runs with the same
number of processes).

``latency`` is ``ppg_metadrive.gin``'s learner (its networks, batch and
epochs) with 16 environments that take ``LATENCY_MS`` of sleep per step
(Pendulum behind `alf.environments.straggler`'s ``delay``): a simulator
whose cost is latency, not CPU, so that a 2-core machine shows what
asynchronous collection's structure would do with 16 cores' worth of
environments. ``--gin_param straggler_load.delay_spread=0.5`` makes the
environments uneven, as a simulator whose step costs what its scenario
costs (a factor ``exp(N(0, 0.5))`` on each episode's delay), and
``--modes async,async+segment_length=64`` shows what segments that any
actor fills do then. Its report adds the ideal, ``16 x 1000 / (mean delay
+ actor ms)`` (every actor stepping back to back, never waiting), and the
ratio to it.

``metadrive_bev`` is ``ppg_metadrive_bev.gin`` (no bare run: its
simulator renders top-down frames). ``cart_pole`` is ``ppo_cart_pole.gin``
with ``async_env`` (one subprocess per environment in sync mode);
``sac_pendulum`` is ``sac_pendulum.gin``.
"""
import argparse
import math
import os
import statistics
import tempfile

from runs import (positive_int, terminate_on_sigterm, throughput_params,
                  train_throughput)

LATENCY_MS = 10.0

WORKLOADS = {
    # gin file, env steps per run, extra bindings
    # PPG trains its auxiliary phase every 4th iteration: 12 iterations
    # hold 3 of them, and the steady state, not the pipeline's fill.
    "metadrive": ("ppg_metadrive.gin", 49152,
                  ["TrainerConfig.num_eval_episodes=1",
                   "TrainerConfig.held_out_env_load_fn=None"]),
    # the CNN on 84x84 top-down frames: where a GPU's update speed shows
    "metadrive_bev": ("ppg_metadrive_bev.gin", 12288,
                      ["TrainerConfig.num_eval_episodes=1",
                       "TrainerConfig.held_out_env_load_fn=None"]),
    "latency": ("ppg_metadrive.gin", 65536,
                ["TrainerConfig.env_load_fn=@straggler_load",
                 'TrainerConfig.env_name="Pendulum-v1"',
                 f"straggler_load.ranks={tuple(range(64))}",
                 f"straggler_load.delay={LATENCY_MS / 1000}",
                 "TrainerConfig.num_envs=16",
                 "TrainerConfig.unroll_length=256",
                 "TrainerConfig.num_eval_episodes=1",
                 "TrainerConfig.held_out_env_load_fn=None",
                 # Pendulum has one action dimension; MetaDrive's
                 # calibrated offsets are for its second.
                 "TrainerConfig.calibrate_offsets=None",
                 "TrainerConfig.best_metric=None"]),
    "cart_pole": ("ppo_cart_pole.gin", 40960,
                  ["TrainerConfig.async_env=True",
                   "TrainerConfig.num_eval_episodes=1"]),
    "sac_pendulum": ("sac_pendulum.gin", 6000,
                     ["TrainerConfig.num_eval_episodes=1"]),
}


def config_env_settings(gin_file: str) -> dict:
    """`metadrive_step_rate.CONFIG`'s keys as ``gin_file`` binds
    ``suite_metadrive.load`` (its defaults where unbound), so that bare
    MetaDrive steps the scenarios training steps."""
    import inspect

    import gin

    from alf.environments import suite_metadrive
    from alf.trainers.config_parser import parse_config
    from metadrive_step_rate import CONFIG
    defaults = inspect.signature(suite_metadrive.load).parameters
    parse_config([gin_file], [])
    try:
        out = {}
        for key in CONFIG:
            try:
                out[key] = gin.query_parameter(f"suite_metadrive.load.{key}")
            except ValueError:
                out[key] = defaults[key].default
        # What training environments use (this is not an evaluation).
        out["force_destroy"] = suite_metadrive.resolve_force_destroy(
            out["force_destroy"])
        return out
    finally:
        gin.clear_config()


def bare_rate(raws, steps: int) -> float:
    """Env steps/s of all ``raws`` stepping at once (over the slowest)."""
    for r in raws:
        r._conn.send(steps)
    seconds = [r._conn.recv()[0] for r in raws]
    return len(raws) * steps / max(seconds)


def main():
    terminate_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=sorted(WORKLOADS),
                        default="metadrive")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--num_env_steps", type=int, default=None)
    parser.add_argument("--processes", default="1,2",
                        help="comma-separated process counts")
    parser.add_argument("--modes", default="sync,async",
                        help="comma-separated unroll modes, each with "
                        "optional '+NAME=VALUE' TrainerConfig bindings, "
                        "e.g. async+inference_workers=1")
    parser.add_argument("--devices", default="cpu",
                        help="comma-separated TrainerConfig.device values; "
                        "'cuda' runs 1-process variants only (CPU processes "
                        "refuse a GPU)")
    parser.add_argument("--gin_param", action="append", default=[],
                        help="extra binding for every training run, e.g. "
                        "TrainerConfig.num_envs=16 (repeatable)")
    parser.add_argument("--bare_steps", type=int, default=3000)
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats {args.repeats}: give 1 or more")
    gin_file, steps, extra = WORKLOADS[args.workload]
    steps = args.num_env_steps or steps
    params = throughput_params(steps) + extra + [
        "TrainerConfig.log_interval_seconds=0"] + args.gin_param
    cores = os.cpu_count()
    try:
        procs = [positive_int(p) for p in args.processes.split(",")]
    except argparse.ArgumentTypeError as e:
        parser.error(f"--processes {args.processes}: {e}")
    variants = [(n, m, d) for d in args.devices.split(",")
                for n in procs for m in args.modes.split(",")
                if d == "cpu" or n == 1]
    print(f"config: {gin_file} {' '.join(params)}")
    print(f"load before: {os.getloadavg()[0]:.2f}; {cores} cores", flush=True)
    rates = {v: [] for v in variants}
    learner = {v: [] for v in variants}
    actors = {v: [] for v in variants}
    waits = {v: [] for v in variants}
    bare, raws = [], []
    if args.workload == "metadrive":
        from metadrive_step_rate import start_raws
        settings = config_env_settings(gin_file)
        print(f"bare MetaDrive settings (from {gin_file}): {settings}")
        raws = start_raws(cores, settings)
    try:
        with tempfile.TemporaryDirectory(prefix="alf-async-") as root:
            for rep in range(args.repeats):
                order = (["bare"] if raws else []) + variants
                if rep % 2:
                    order.reverse()
                for v in order:
                    if v == "bare":
                        bare.append(bare_rate(raws, args.bare_steps))
                        print(f"repeat {rep}: bare MetaDrive x{cores} "
                              f"{bare[-1]:6.0f} env steps/s", flush=True)
                        continue
                    n, mode, dev = v
                    unroll_mode, *bindings = mode.split("+")
                    r = _measure(
                        [gin_file], params + [
                            f'TrainerConfig.unroll_mode="{unroll_mode}"',
                            f'TrainerConfig.device="{dev}"'] + [
                            f"TrainerConfig.{b}" for b in bindings],
                        os.path.join(root, f"{mode}{n}{dev}-r{rep}"), n)
                    rates[v].append(r["steady_rate"])
                    learner[v].append(r["learner_ms"])
                    actors[v].append((r["actor_ms"], r["env_ms"],
                                      r["inference_ms"]))
                    waits[v].append((r["actor_wait"], r["learner_wait"]))
                    said = ("" if unroll_mode == "sync" else
                            f", actors {r['actor_ms']:.3f} (env step "
                            f"{r['env_ms']:.3f}; busy wall "
                            f"{r['busy_ms']:.3f}), waiting "
                            f"{r['actor_wait']:.0%} (slowest actor "
                            f"{r['actor_spread']:.2f}x the fastest), "
                            f"learner waiting "
                            f"{r['learner_wait']:.0%}")
                    if r["inference_batch"] > 0:  # not 0, not NaN
                        said += (f", inference {r['inference_ms']:.3f} "
                                 f"(batch {r['inference_batch']:.1f})")
                    print(f"repeat {rep}: {label(v)} "
                          f"{r['steady_rate']:6.0f} env steps/s (trainer's own "
                          f"{r['rate']:.0f}, first iteration in), learner "
                          f"{r['learner_ms']:.3f} ms CPU/step (wall "
                          f"{r['learner_wall_ms']:.3f}){said} (wall "
                          f"{r['wall']:.0f} s); load "
                          f"{os.getloadavg()[0]:.2f}", flush=True)
    finally:
        if raws:
            from metadrive_step_rate import close_raws
            close_raws(raws)
    print(f"load after: {os.getloadavg()[0]:.2f}\n")
    report(variants, rates, learner, actors, waits, bare, cores)
    if args.workload == "latency":
        report_latency(variants, rates, actors, params)


def _measure(gin_files, params, root_dir: str, num_processes: int) -> dict:
    """`train_throughput`, failing in one line where a run failed (its
    output kept outside the benchmark's temporary folder) or was too short
    for a steady rate."""
    try:
        r = train_throughput(gin_files, params, root_dir,
                             num_processes=num_processes)
    except RuntimeError as e:
        fd, kept = tempfile.mkstemp(prefix="alf-async-failed-",
                                    suffix=".log")
        with os.fdopen(fd, "w") as f, open(root_dir + ".log") as log:
            f.write(log.read())
        raise SystemExit(f"{str(e).split(' (whole output:')[0]} (whole "
                         f"output: {kept})") from e
    if math.isnan(r["steady_rate"]):
        raise SystemExit(
            f"{os.path.basename(root_dir)}: {r['env_steps']} env steps gave "
            "fewer than two progress lines, so no steady rate: give "
            "--num_env_steps several iterations' worth")
    return r


def report_latency(variants, rates, actors, params) -> None:
    """The ``latency`` workload's ideal and each async variant's ratio.

    The ideal takes the delay's mean: ``straggler_load.delay`` (the last
    binding given) times ``exp(delay_spread ** 2 / 2)``, the mean of the
    per-episode factor."""
    def last(name, default):
        given = [p for p in params if p.startswith(name + "=")]
        return float(given[-1].split("=")[1]) if given else default

    envs = int(last("TrainerConfig.num_envs", 0))
    delay_ms = 1000 * last("straggler_load.delay", LATENCY_MS / 1000)
    spread = last("straggler_load.delay_spread", 0.0)
    delay_ms *= math.exp(spread ** 2 / 2)
    for v in variants:
        if not is_async(v):
            continue
        actor_ms = statistics.mean(a + i for a, _, i in actors[v])
        ideal = envs * 1000 / (delay_ms + actor_ms)
        rate = statistics.mean(rates[v])
        print(f"{label(v)}: ideal {ideal:.0f} env steps/s ({envs} x 1000 / "
              f"({delay_ms:.2f} ms mean delay + actor {actor_ms:.3f} ms)), "
              f"reached {rate / ideal:.2f}")


def label(variant) -> str:
    """``(processes, mode, device)`` as the report names it."""
    n, mode, dev = variant
    return f"{n} proc {mode:<5s}" + ("" if dev == "cpu" else f" {dev}")


def is_async(variant) -> bool:
    return variant[1].split("+")[0] == "async"


def report(variants, rates, learner, actors, waits, bare, cores) -> None:
    """Prints the mean rate of each variant and its ratios."""
    mean = statistics.mean
    width = max(19, *(len(label(v)) for v in variants))
    head = (f"{'variant':<{width}} {'env steps/s':>11} {'async/sync':>10} "
            f"{'learner bound':>13} {'waiting: actors':>15} {'learner':>7}")
    if bare:
        capacity = mean(bare)
        print(f"bare MetaDrive x{cores} (capacity C): {capacity:.0f} env "
              f"steps/s, {1000 * cores / capacity:.3f} ms CPU/step; per "
              f"repeat {', '.join(f'{b:.0f}' for b in bare)}")
        # E of (processes, device): over all its asynchronous variants.
        measured: dict = {}
        for v in filter(is_async, variants):
            measured.setdefault((v[0], v[2]), []).extend(
                e for _, e, _ in actors[v])
            a = mean(a for a, _, _ in actors[v])
            e = mean(e for _, e, _ in actors[v])
            i = mean(i for _, _, i in actors[v])
            dearer = e * capacity / 1000 / cores
            print(f"{label(v)}, actors: {a:.3f} ms CPU/step, of which the "
                  f"simulator E = {e:.3f} ({dearer:.2f}x its random-action "
                  f"cost); inference and bookkeeping {a - e + i:.3f}" +
                  (f" ({i:.3f} in inference workers)" if i else ""))
        env_ms = {k: mean(e) for k, e in measured.items()}
        head += (f" {'learner ms':>10} {'/ bare':>7} {'limit':>7} "
                 f"{'/ limit':>7} {'run limit':>9} {'/ run':>6}")
    print(head)
    for v in variants:
        n, mode, dev = v
        rate = mean(rates[v])
        sync = rates.get((n, "sync", dev))
        versus = (f"{rate / mean(sync):10.2f}" if is_async(v) and sync
                  else f"{'':>10}")
        ms = mean(learner[v])
        line = (f"{label(v):<{width}} {rate:11.0f} {versus} "
                f"{n * 1000 / ms:13.0f}")
        if is_async(v):
            line += (f" {mean(w for w, _ in waits[v]):15.0%} "
                     f"{mean(w for _, w in waits[v]):7.0%}")
        else:
            line += f" {'':>15} {'':>7}"
        if bare:
            limit = cores / (cores / capacity + ms / 1000)
            line += (f" {ms:10.3f} {rate / capacity:7.2f} {limit:7.0f} "
                     f"{rate / limit:7.2f}")
            e = env_ms.get((n, dev))
            if e is not None:
                run_limit = cores / ((e + ms) / 1000)
                line += f" {run_limit:9.0f} {rate / run_limit:6.2f}"
        print(line + "   per repeat " +
              " ".join(f"{x:.0f}" for x in rates[v]))


if __name__ == "__main__":
    main()
