r"""Choose the deterministic action's offset on the training environments.

    python -m alf.bin.calibrate --root_dir DIR [--checkpoint best] \
        --offsets 1=-0.3,-0.2,-0.1,0 [--offsets 0=...] [--num_episodes 10] \
        [--metric route_completion] [--held_out] [--gin_param ...]

A policy trained with exploration noise learns a mean for an agent that
acts with that noise; acting with the mean alone can do worse (on MetaDrive
the noise slows the car, and its mean drives too fast:
docs/metadrive.md). This plays a checkpoint deterministically with every
combination of the candidate offsets (``--offsets D=X,Y,...`` for action
dimension D; `PPOAlgorithm.deterministic_offset`), the same episodes for
each (the run's evaluation seeds, as ``alf.bin.play``), on the run's
training environments, and prints each candidate's means. The best by
``--metric`` wins; a tie goes to the smaller offset, so no offset wins
unless an offset does better. It prints the binding that acts with it
(``--gin_param`` for ``alf.bin.play``, or for a run's evaluations).

A run can also choose at every evaluation, on a validation split, and
evaluate with the choice (``TrainerConfig.calibrate_offsets``); its
checkpoints then act with it, and a binding given here overrides it.

``--held_out`` then plays the chosen offset and no offset on the run's
held-out environments: a check on environments the choice did not see.

Exit codes: 0, 1 for a bad input (one line), 130 on Ctrl-C.
"""
import math
import os
import re
from typing import Dict, List, Optional, Sequence, Tuple

from absl import app, flags

from alf.bin import cli
from alf.trainers.calibration import Offsets, candidates, choose, label
from alf.utils.errors import ConfigError, run_cli

BINDING = "PPOAlgorithm.deterministic_offset"
__all__ = ["parse_offsets", "binding", "choose", "calibrate"]


def define_flags() -> None:
    """The CLI's flags (defined when run as a program, as ``alf.bin.play``
    does)."""
    flags.DEFINE_string("root_dir", None, "The run's folder.")
    flags.DEFINE_string("checkpoint", "best", "latest, best or N.")
    flags.DEFINE_multi_string("offsets", None, "D=X,Y,...: candidate "
                              "offsets of action dimension D (repeat for "
                              "more dimensions: every combination plays).")
    flags.DEFINE_integer("num_episodes", 10, "Episodes per candidate.",
                         lower_bound=1)
    flags.DEFINE_string("metric", "return", "The episode metric to "
                        "maximise: return or one the environment reports.")
    flags.DEFINE_bool("held_out", False, "Then play the chosen offset and "
                      "none on the run's held-out environments.")
    flags.DEFINE_multi_string("gin_param", None, "Gin bindings applied "
                              "after the run's config.gin.")


def parse_offsets(specs: Sequence[str]) -> List[Offsets]:
    """Every combination of ``--offsets`` (``D=X,Y,...``), as
    ``{dimension: offset}``; the all-zero candidate is always included.

    Raises:
        ConfigError: naming a spec that is not ``D=X,Y,...``.
    """
    grid: Dict[int, List[float]] = {}
    for spec in specs:
        dim, _, values = spec.partition("=")
        try:
            d = int(dim)
            xs = [float(x) for x in values.split(",")]
            if d < 0 or not values or not all(map(math.isfinite, xs)):
                raise ValueError
        except ValueError:
            raise ConfigError(f"--offsets={spec!r}; valid: D=X,Y,... (an "
                              "action dimension, then numbers)") from None
        if d in grid:
            raise ConfigError(f"--offsets: dimension {d} is given twice")
        grid[d] = xs
    if not grid:
        raise ConfigError("--offsets: give at least one, e.g. 1=-0.2,-0.1")
    return candidates(grid, "--offsets")


def binding(offsets: Offsets) -> str:
    """The gin binding that acts with ``offsets``."""
    return f"{BINDING}={{{', '.join(f'{d}: {x}' for d, x in offsets.items())}}}"


def _check_candidates(root_dir: str, checkpoint: str,
                      candidates: List[Offsets], gin_params: Sequence[str]
                      ) -> None:
    """Refuses, in ``--offsets``' terms, a dimension the action lacks or an
    offset wider than its range, before any candidate plays: the policy is
    built (no episode played) acting with each dimension's widest one."""
    from alf.bin.play import play
    widest = {d: max((c[d] for c in candidates), key=abs)
              for d in candidates[0]}
    try:
        play(root_dir, checkpoint, 0,
             gin_params=[*gin_params, binding(widest)])
    except ConfigError as e:
        said = str(e).splitlines()[0]
        if not said.startswith(BINDING + "="):
            raise
        dims = re.search(r"; valid: dimensions in 0\.\.(-?\d+)", said)
        if dims:
            n = int(dims.group(1)) + 1
            bad = ", ".join(str(d) for d in sorted(widest)
                            if not 0 <= d < n)
            raise ConfigError(f"--offsets for dimension {bad}: the action "
                              f"has {n} (0..{n - 1})") from None
        wide = re.search(r": (offset .*)", said)
        if not wide:
            raise
        raise ConfigError(f"--offsets: {wide.group(1)}") from None


def calibrate(root_dir: str, checkpoint: str, candidates: List[Offsets],
              num_episodes: int, metric: str,
              gin_params: Sequence[str] = (), held_out: bool = False,
              echo=print) -> Tuple[Offsets, Optional[Dict]]:
    """Plays every candidate on the training environments and returns the
    best (`choose`) and, with ``held_out``, ``{"chosen": means, "none":
    means}`` on the held-out environments (else None); ``echo`` gets each
    table row as it is played.

    Raises:
        AlfError: one line, for a bad run, checkpoint, binding or metric.
    """
    from alf.bin.play import mean_row, open_run, play
    # What cannot be calibrated fails before minutes of play, not after.
    _, cfg, _ = open_run(root_dir, checkpoint,
                         "held_out" if held_out else "training", gin_params)
    if not hasattr(cfg.algorithm_ctor, "set_calibrated_offset"):
        raise ConfigError(
            f"the run in {root_dir} trains "
            f"{getattr(cfg.algorithm_ctor, '__name__', cfg.algorithm_ctor)}, "
            f"which has no deterministic offset ({BINDING} is PPO's and "
            "PPG's)")
    _check_candidates(root_dir, checkpoint, candidates, gin_params)
    results = []
    for i, offsets in enumerate(candidates):
        rows = play(root_dir, checkpoint, num_episodes,
                    gin_params=[*gin_params, binding(offsets)])
        row = mean_row(rows)
        if metric not in row:
            raise ConfigError(f"--metric={metric!r}: the episodes report "
                              f"{', '.join(row)}")
        # The return beside the metric, unless it is the metric.
        also = "return" if metric != "return" else ""
        if i == 0:
            echo(f"{'offsets':>24} {metric:>16} {also:>10} {'length':>8}")
        shown = f"{row['return']:10.2f}" if also else f"{'':>10}"
        echo(f"{label(offsets):>24} {row[metric]:16.3f} {shown} "
             f"{row['length']:8.1f}")
        results.append((offsets, row))
    best, _ = choose(results, metric)
    if not held_out:
        return best, None
    zero = {d: 0.0 for d in best}
    checked = {}
    for name, offsets in (("chosen", best), ("none", zero)):
        checked[name] = mean_row(play(root_dir, checkpoint, num_episodes,
                                   gin_params=[*gin_params,
                                               binding(offsets)],
                                   split="held_out"))
    return best, checked


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    FLAGS = flags.FLAGS
    cli.exit_on_stop_signals("alf.bin.calibrate")
    candidates = run_cli("alf.bin.calibrate", parse_offsets,
                         FLAGS.offsets or [])
    best, checked = run_cli("alf.bin.calibrate", calibrate,
                            os.path.expanduser(FLAGS.root_dir),
                            FLAGS.checkpoint, candidates, FLAGS.num_episodes,
                            FLAGS.metric, FLAGS.gin_param or (),
                            FLAGS.held_out)
    print(f"chosen: {label(best)}")
    print(f"act with it: --gin_param '{binding(best)}'")
    if checked:
        m = FLAGS.metric
        print(f"held out: {m} {checked['chosen'][m]:.3f} with it, "
              f"{checked['none'][m]:.3f} without")


if __name__ == "__main__":
    define_flags()
    flags.mark_flag_as_required("root_dir")
    cli.run(main, __name__)
