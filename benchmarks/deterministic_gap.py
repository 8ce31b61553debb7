r"""Deterministic against sampling policy on the same checkpoints of a run.

    python benchmarks/deterministic_gap.py --root_dir RUN \
        [--checkpoints 'saved,best'] [--episodes 10] [--sampling_episodes 20] \
        [--held_out_param suite_metadrive.load.start_seed=0 \
         --held_out_param suite_metadrive.load.num_scenarios=200] \
        [--held_out_episodes 20] [--gin_param ...]

Each (checkpoint, scenario set, policy) is one ``python -m alf.bin.play``
(episode ``e`` from seed ``e``), ``--parallel`` at a time. With MetaDrive,
consecutive seeds drive distinct scenarios, so ``--episodes`` equal to the
run's ``num_scenarios`` plays every training scenario once (a
deterministic policy's score is then exact: `suite_metadrive.load`'s
``force_destroy`` makes an episode independent of the engine's earlier
ones), and the sampling policy plays each of them ``--sampling_episodes /
num_scenarios`` times. Held-out
scenarios (``--held_out_param``, bindings that turn the run's environments
into its held-out ones) are played by both policies on the same
``--held_out_episodes`` scenarios.

Prints, per checkpoint and scenario set, the mean of every episode metric
that ``--metrics`` names, deterministic and sampling, and their difference.
"""
import argparse
import concurrent.futures
import os
import subprocess
import sys
from typing import Dict, List, Sequence

from alf.bin.play import checkpoint_path
from alf.trainers.checkpointer import Checkpointer
from alf.utils.errors import ConfigError


def play_means(root_dir: str, checkpoint: str, episodes: int,
               sampling: bool, params: Sequence[str]) -> Dict[str, float]:
    """The mean row of one ``alf.bin.play``'s table."""
    cmd = [sys.executable, "-m", "alf.bin.play", "--root_dir", root_dir,
           "--checkpoint", checkpoint, "--num_episodes", str(episodes),
           "--seed", "0"]
    if sampling:
        cmd.append("--sampling")
    for p in params:
        cmd += ["--gin_param", p]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    lines = proc.stdout.splitlines()
    heads = [i for i, line in enumerate(lines)
             if line.split()[:1] == ["episode"]]
    means = [line for line in lines if line.split()[:1] == ["mean"]]
    if proc.returncode != 0 or not heads or not means:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit "
                           f"{proc.returncode}):\n{proc.stdout}\n"
                           f"{proc.stderr[-3000:]}")
    names = lines[heads[-1]].split()[1:]
    return dict(zip(names, map(float, means[-1].split()[1:])))


def checkpoints(root_dir: str, which: str) -> List[str]:
    """``--checkpoint`` values of alf.bin.play: 'saved' expands to every
    regular checkpoint's env steps. One that alf.bin.play would refuse (a
    step pruned as training went on, a ``best`` the run never wrote) is
    its one-line error before any play starts, not after every other play
    has run."""
    out = []
    for w in which.split(","):
        if w == "saved":
            ckpt = Checkpointer(os.path.join(root_dir, "ckpt"))
            out += [str(s) for s in ckpt.saved()]
            continue
        try:
            checkpoint_path(root_dir, w)
        except ConfigError as e:
            raise SystemExit(f"deterministic_gap: {e}") from None
        out.append(w)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root_dir", required=True)
    parser.add_argument("--checkpoints", default="saved,best",
                        help="comma-separated: saved, best, latest or N")
    parser.add_argument("--episodes", type=int, default=10,
                        help="deterministic episodes, training scenarios")
    parser.add_argument("--sampling_episodes", type=int, default=20,
                        help="sampling episodes, training scenarios")
    parser.add_argument("--held_out_param", action="append", default=[],
                        help="a binding that makes the held-out "
                        "environments (repeatable; none: no held-out set)")
    parser.add_argument("--held_out_episodes", type=int, default=20)
    parser.add_argument("--metrics", default="route_completion,success_rate",
                        help="comma-separated columns of alf.bin.play's "
                        "table to print (e.g. return, length, MetaDrive's "
                        "mean_speed_kmh)")
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--gin_param", action="append", default=[],
                        help="a binding for every play (repeatable), e.g. "
                        "the noise a run's checkpoints ended training with")
    args = parser.parse_args()
    sets = [("training", args.gin_param, args.episodes,
             args.sampling_episodes)]
    if args.held_out_param:
        sets.append(("held out", args.gin_param + args.held_out_param,
                     args.held_out_episodes, args.held_out_episodes))
    metrics = args.metrics.split(",")
    wanted = checkpoints(args.root_dir, args.checkpoints)
    width = 3 * 9
    print(f"{'':>10} {'':>9} " + " ".join(f"{m[:width]:>{width}}"
                                          for m in metrics))
    print(f"{'checkpoint':>10} {'scenarios':>9} " + " ".join(
        f"{'det':>8} {'sampling':>8} {'diff':>8}" for _ in metrics),
        flush=True)
    jobs = {}
    # Rows print as their plays finish, inside the pool: leaving it waits
    # for every play.
    with concurrent.futures.ThreadPoolExecutor(args.parallel) as pool:
        for ck in wanted:
            for name, params, det_n, samp_n in sets:
                for sampling, n in ((False, det_n), (True, samp_n)):
                    jobs[(ck, name, sampling)] = pool.submit(
                        play_means, args.root_dir, ck, n, sampling, params)
        try:
            for (ck, name, sampling), job in jobs.items():
                if sampling:
                    continue
                det = job.result()
                samp = jobs[(ck, name, True)].result()
                missing = [m for m in metrics if m not in det]
                if missing:
                    raise SystemExit(
                        f"deterministic_gap: --metrics "
                        f"{','.join(missing)!r} not in alf.bin.play's "
                        f"table; valid: {', '.join(det)}")
                print(f"{ck:>10} {name:>9} " + " ".join(
                    f"{det[m]:8.3f} {samp[m]:8.3f} {det[m] - samp[m]:+8.3f}"
                    for m in metrics), flush=True)
        except BaseException:
            # A failed play (or Ctrl-C) leaves the plays not yet started
            # unplayed instead of waiting for each of them.
            pool.shutdown(wait=False, cancel_futures=True)
            raise


if __name__ == "__main__":
    main()
