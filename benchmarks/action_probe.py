r"""Which part of a policy's noise does its driving depend on? Plays a
checkpoint with the deterministic action, except for the action
dimensions named to sample and fixed offsets added to others.

    python benchmarks/action_probe.py --root_dir RUN [--checkpoint latest] \
        [--episodes 10] [--variant det --variant sample \
         --variant 'sample:0' --variant 'offset:1=-0.3' \
         --variant 'jitter:1e-6,1' --variant 'echo:0=4,0=5,1=6'] \
        [--watch 3] [--seed 0]

A variant is ``det`` (the deterministic policy), ``sample`` (the sampling
policy), ``sample:D[,D...]`` (sample dimensions D, the mean for the rest),
``offset:D=X[,D=X...]`` (the deterministic action plus X on dimension
D, clipped to the action box) or ``jitter:X,S`` (the deterministic action
plus noise uniform in [-X, X] on every dimension, drawn from a generator
seeded S: with X near a float32's rounding, ~1e-7, how much of a
deterministic score a simulator's chaos decides) or ``echo:D=I[,D=I...]``
(the deterministic action, but raw observation entry ``I`` shows, as
``(a_D + 1) / 2``, dimension ``D`` of an action the sampling policy drew
at the previous step and that was never applied: whether the policy
drives on the noise it sees in its own previous action, which
MetaDrive's state observation carries in entries 4-6; an episode's first
step, where those read 0.5, is left as it is). Every variant plays the
same episodes (episode ``e`` from seed ``--seed + e``, the sampled noise
seeded likewise), one after the other in this process. ``--watch I``
also reports the mean of raw observation entry ``I`` over each variant's
steps (MetaDrive's state observation: 3 is the speed over the speed
limit).

MetaDrive's actions are (steering, throttle); on the Beta ``ppg_metadrive``
run of 2026-11-26 this is how the gap between its deterministic and its
sampling policy was traced to speed (docs/metadrive.md).
"""
import argparse
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

import numpy as np
import torch

from alf.bin.play import play


class Variant(NamedTuple):
    """One ``--variant``: dimensions to sample (``[-1]``: all), offsets
    by dimension, jitter (size, seed) and echoes (observation entry ->
    action dimension)."""
    sample: List[int]
    offsets: Dict[int, float]
    jitter: Optional[Tuple[float, int]] = None
    echo: Dict[int, int] = {}


def parse_variant(text: str) -> Variant:
    """``text`` as a `Variant` (the forms are in the module's doc)."""
    kind, _, spec = text.partition(":")
    try:
        pairs = [p.split("=") for p in spec.split(",")] if spec else []
        if kind == "det" and not spec:
            return Variant([], {})
        if kind == "sample":
            return Variant([int(d) for d in spec.split(",")] if spec
                           else [-1], {})
        if kind == "offset" and spec:
            return Variant([], {int(d): float(x) for d, x in pairs})
        if kind == "jitter" and spec:
            size, seed = spec.split(",")
            return Variant([], {}, (float(size), int(seed)))
        if kind == "echo" and spec:
            return Variant([], {}, echo={int(i): int(d) for d, i in pairs})
    except ValueError:
        pass
    raise SystemExit(f"action_probe: --variant {text!r}; valid: det, sample, "
                     "sample:D[,D...], offset:D=X[,D=X...], jitter:X,S or "
                     "echo:D=I[,D=I...]")


def make_act(variant: Variant, watch: int, seen: List[float]) -> Callable:
    """An ``act`` for `alf.bin.play.play` (see the module's doc)."""
    sample, offsets, jitter, echo = variant
    generator = None
    if jitter is not None:
        generator = torch.Generator().manual_seed(jitter[1])
    drawn_before: List[torch.Tensor] = []

    def act(algorithm, obs, raw):
        if echo and drawn_before and not all(
                float(raw[0, i]) == 0.5 for i in echo):
            raw = raw.clone()
            for i, d in echo.items():
                raw[:, i] = ((drawn_before[0][:, d] + 1) / 2).clamp(0, 1)
            obs = algorithm.observe(raw, update=False)
        dist = algorithm.actor(obs)
        if echo:
            space = algorithm.action_space
            drawn_before[:] = [dist.sample().clamp(
                torch.as_tensor(space.low), torch.as_tensor(space.high))]
        action = dist.mode().clone()
        if sample:
            drawn = dist.sample()
            if sample == [-1]:
                action = drawn
            else:
                action[:, sample] = drawn[:, sample]
        for d, x in offsets.items():
            action[:, d] += x
        if generator is not None:
            if not action.is_floating_point():
                raise SystemExit("action_probe: jitter needs continuous "
                                 "actions")
            noise = torch.rand(action.shape, generator=generator)
            action += (2 * noise - 1).to(action.dtype) * jitter[0]
        if watch >= 0:
            seen.append(float(raw[0, watch]))
        space = algorithm.action_space
        return action.clamp(torch.as_tensor(space.low),
                            torch.as_tensor(space.high))
    return act


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root_dir", required=True)
    parser.add_argument("--checkpoint", default="latest")
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--variant", action="append", default=[])
    parser.add_argument("--watch", type=int, default=-1,
                        help="a raw observation entry to average")
    parser.add_argument("--seed", type=int, default=0,
                        help="episode e starts from seed + e")
    parser.add_argument("--gin_param", action="append", default=[])
    args = parser.parse_args()
    variants = args.variant or ["det", "sample"]
    print(f"{'variant':<22} {'route_completion':>16} {'success_rate':>12} "
          f"{'return':>8}" + (f" {'obs[' + str(args.watch) + ']':>8}"
                              if args.watch >= 0 else "") +
          "   per episode: route completion")
    for text in variants:
        seen: List[float] = []
        rows = play(args.root_dir, args.checkpoint, args.episodes,
                    gin_params=args.gin_param, seed=args.seed,
                    act=make_act(parse_variant(text), args.watch, seen))
        mean = lambda k: float(np.mean([r.get(k, np.nan)  # noqa: E731
                                        for r in rows]))
        line = (f"{text:<22} {mean('route_completion'):16.3f} "
                f"{mean('success_rate'):12.2f} {mean('return'):8.1f}")
        if args.watch >= 0:
            line += f" {np.mean(seen):8.3f}"
        print(line + "   " + " ".join(
            f"{r.get('route_completion', np.nan):.2f}" for r in rows),
            flush=True)


if __name__ == "__main__":
    main()
