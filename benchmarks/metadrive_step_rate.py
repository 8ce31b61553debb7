r"""MetaDrive env steps/s: raw, and through `suite_metadrive.load`.

MetaDrive with uniform random actions (state/lidar observation, 10
scenarios, traffic density 0.1, horizon 1000), stepped three ways:

* ``raw``: ``MetaDriveEnv.step`` in one process (a worker of this script,
  since a process holds at most one MetaDrive engine), no vector env;
* ``suite x1``: ``BatchedEnvironment.step`` of ``suite_metadrive.load(
  num_envs=1)``: one worker process, actions and observations as tensors;
* ``suite x2``: the same with ``num_envs=2`` (env steps counted over both).

A step's cost depends a lot on the scenario (how many vehicles it has), so
every variant does the same work: trajectory ``i`` is the scenario sequence
of seed ``i`` driven with the actions of generator ``100 + i``; ``raw`` and
``suite x1`` run trajectory 0, ``suite x2`` runs trajectories 0 and 1, and
``raw`` also runs trajectory 1 (in a second process) so that ``suite x2``
is compared with one process doing both, one after the other.

Each round runs one block of ``--steps`` steps of each variant (the order
rotates), all at the same point of their trajectories; ratios are medians
of per-round ratios. The load average before and after is printed: on a
shared 2-core machine, figures taken above ~0.5 are not worth much.

    python benchmarks/metadrive_step_rate.py [--rounds 5] [--steps 1000]
"""
import argparse
import multiprocessing as mp
import os
import statistics
import time
from typing import List, Optional, Sequence

import numpy as np
import torch

from alf.environments import suite_metadrive

CONFIG = dict(num_scenarios=10, start_seed=0, traffic_density=0.1,
              horizon=1000, map=3, force_destroy=True)


def _actions(trajectory: int):
    """The action generator of a trajectory: uniform in [-1, 1]^2."""
    rng = np.random.default_rng(100 + trajectory)
    return lambda: rng.uniform(-1, 1, 2).astype(np.float32)


def _raw_worker(conn, trajectory: int, config: dict) -> None:
    """Runs one MetaDriveEnv; answers each number of steps with seconds."""
    from alf.environments.metadrive_env_fn import make_env
    # The same scenario choice as the suite's workers (ScenarioSampling),
    # all of MetaDrive's info (nothing crosses a process boundary here).
    env = make_env(suite_metadrive.OBSERVATIONS["state"][0],
                   dict(config, log_level=30))
    action = _actions(trajectory)
    env.reset(seed=trajectory)

    def run(n):
        total = 0.0
        for _ in range(n):
            _, reward, term, trunc, _ = env.step(action())
            total += reward
            if term or trunc:
                env.reset()
        return total

    conn.send("ready")
    while True:
        n = conn.recv()
        if n is None:
            break
        t = time.perf_counter()
        total = run(n)
        conn.send((time.perf_counter() - t, total))
    env.close()


class Raw:
    """One bare MetaDriveEnv in a process of its own, stepping trajectory
    ``trajectory`` under ``config`` (MetaDrive's settings; default
    `CONFIG`)."""

    def __init__(self, trajectory: int, config: Optional[dict] = None,
                 wait: bool = True):
        ctx = mp.get_context("spawn")
        self._trajectory = trajectory
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_raw_worker, args=(
            child, trajectory, dict(config or CONFIG)), daemon=True)
        self._proc.start()
        # Without the parent's copy of the child's end, a worker that dies
        # ends recv() with EOFError instead of blocking it forever.
        child.close()
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        """Blocks until the engine is up (``wait=False`` leaves it to the
        caller, so that many engines start at once)."""
        try:
            self._conn.recv()
        except EOFError:
            self._proc.join(timeout=10)
            raise RuntimeError(
                f"bare MetaDrive worker {self._trajectory} died before "
                f"stepping (exit code {self._proc.exitcode}; its traceback "
                "is above)") from None

    def seconds(self, n: int) -> float:
        """Runs ``n`` steps; returns the seconds taken (and keeps the sum
        of trajectory 0's rewards in ``reward``)."""
        self._conn.send(n)
        t, self.reward = self._conn.recv()
        return t

    def close(self, join: bool = True):
        """Asks the worker to end; ``join=False`` leaves `join` to the
        caller, so that many engines close at once."""
        try:
            self._conn.send(None)
        except OSError:
            pass  # the worker is gone already (e.g. SIGTERM to the group)
        if join:
            self.join()

    def join(self):
        """Waits up to 30 s for the worker, then kills it."""
        self._proc.join(timeout=30)
        if self._proc.is_alive():
            self._proc.kill()


def start_raws(n: int, config: Optional[dict] = None) -> List[Raw]:
    """``n`` bare engines (trajectories 0..n-1) started at once: one at a
    time, 16 engines took ~40 s of a GPU machine's 15 minutes."""
    raws: List[Raw] = []
    try:
        for i in range(n):
            raws.append(Raw(i, config, wait=False))
        for r in raws:
            r.wait_ready()
    except BaseException:
        close_raws(raws)
        raise
    return raws


def close_raws(raws: Sequence[Raw]) -> None:
    """Ends every engine of ``raws`` at once."""
    for r in raws:
        r.close(join=False)
    for r in raws:
        r.join()


class Suite:

    def __init__(self, num_envs: int):
        self._env = suite_metadrive.load(num_envs=num_envs, seed=0, **CONFIG)
        self._env.reset()  # env i: seed i
        self._actions = [_actions(i) for i in range(num_envs)]

    def seconds(self, n: int) -> float:
        t = time.perf_counter()
        rewards = [self._env.step(torch.from_numpy(np.stack(
            [a() for a in self._actions]))).reward[0] for _ in range(n)]
        t = time.perf_counter() - t
        self.reward = float(torch.stack(rewards).double().sum())
        return t

    def close(self):
        self._env.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=1000,
                        help="vector steps per block")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"load average before: {os.getloadavg()}  cores: {os.cpu_count()}")
    variants = {"raw": Raw(0), "raw traj. 1": Raw(1), "suite x1": Suite(1),
                "suite x2": Suite(2)}
    seconds = {name: [] for name in variants}
    names = list(variants)
    try:
        for r in range(args.rounds):
            for name in names[r % 4:] + names[:r % 4]:
                seconds[name].append(variants[name].seconds(args.steps))
            same = [variants[v].reward for v in ("raw", "suite x1",
                                                 "suite x2")]
            if max(same) - min(same) > 1e-3 * (1 + abs(same[0])):
                print(f"round {r}: trajectories differ (rewards {same})")
    finally:
        for v in variants.values():
            v.close()
    print(f"load average after:  {os.getloadavg()}")
    n = args.steps
    rates = {
        "raw": [n / t for t in seconds["raw"]],
        "raw, trajectories 0+1": [2 * n / (a + b) for a, b in zip(
            seconds["raw"], seconds["raw traj. 1"])],
        "suite x1": [n / t for t in seconds["suite x1"]],
        "suite x2": [2 * n / t for t in seconds["suite x2"]],
    }
    print(f"{'env steps/s':<22} {'median':>7} {'min':>6} {'max':>6}  blocks")
    for name, rs in rates.items():
        print(f"{name:<22} {statistics.median(rs):7.0f} {min(rs):6.0f} "
              f"{max(rs):6.0f}  {' '.join(f'{r:.0f}' for r in rs)}")
    for name, base in (("suite x1", "raw"),
                       ("suite x2", "raw, trajectories 0+1")):
        ratio = statistics.median(s / b for s, b in zip(rates[name],
                                                        rates[base]))
        print(f"{name} / {base}: {ratio:.2f}")


if __name__ == "__main__":
    main()
