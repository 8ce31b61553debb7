"""Evaluations that choose the deterministic action's offset as they go
(``TrainerConfig.calibrate_offsets``).

Before each evaluation, rank 0 plays the deterministic policy with every
candidate offset (`PPOAlgorithm.deterministic_offset`'s form, a product of
per-dimension grids, no offset always among them) on the same episodes of
the calibration environments, keeps the best by the evaluation's metric,
and evaluates with it: the evaluation curves are those of the policy a
user would deploy. Calibrated on environments the evaluation does not play
(a validation split: ``TrainerConfig.calibration_env_load_fn``), the
curves are out of sample for the choice.

The chosen offset is a buffer of the algorithm (`CalibratedOffset`), so
checkpoints, ``best.pt`` and ``alf.bin.play`` act with it. Every
candidate's result goes to ``calibration.csv`` (one row per candidate per
evaluation, ``chosen`` 1 for the one kept) and the chosen offset to
``eval.csv``'s ``offset_D`` columns.
"""
import itertools
import math
from typing import (Callable, Dict, List, Mapping, NamedTuple, Optional,
                    Sequence)

from alf.utils.errors import ConfigError

Offsets = Dict[int, float]
#: Rows of every candidate the calibration played.
CALIBRATION_CSV = "calibration.csv"


def candidates(grid: Mapping, what: str = "TrainerConfig.calibrate_offsets"
               ) -> List[Offsets]:
    """Every combination of the per-dimension candidates of ``grid``
    (``{dimension: (x, y, ...)}``, a number for one), as ``{dimension:
    offset}``, each dimension's values sorted with 0 added (so no offset
    at all is always a candidate).

    Raises:
        ConfigError: naming ``what``, for a grid of another form.
    """
    valid = (f"{what}={grid!r}; valid: {{dimension: (offset, ...)}}, e.g. "
             "{1: (-0.3, -0.2, -0.1)}")
    if not isinstance(grid, Mapping) or not grid:
        raise ConfigError(valid)
    axes = {}
    for d, xs in grid.items():
        if isinstance(xs, (int, float)):
            xs = (xs, )
        if (not isinstance(d, int) or isinstance(d, bool) or d < 0
                # () would calibrate nothing but "no offset"
                or not isinstance(xs, (tuple, list)) or not xs or not all(
                    isinstance(x, (int, float)) and not isinstance(x, bool)
                    and math.isfinite(x) for x in xs)):
            raise ConfigError(valid)
        axes[d] = sorted({float(x) for x in xs} | {0.0})
    dims = sorted(axes)
    return [dict(zip(dims, combo))
            for combo in itertools.product(*(axes[d] for d in dims))]


def choose(results: Sequence, metric: str):
    """The ``(offsets, metrics)`` of ``results`` with the highest
    ``metric``; of equals, the one with the smallest total absolute offset
    (no offset wins unless an offset does better)."""
    return max(results, key=lambda r: (r[1][metric],
                                       -sum(map(abs, r[0].values()))))


def label(offsets: Offsets) -> str:
    """``1=-0.2 0=+0.1``: a candidate for a table."""
    return " ".join(f"{d}={x:+.3g}" for d, x in offsets.items())


def offset_columns(offsets: Offsets) -> Dict[str, float]:
    """The chosen offsets as ``eval.csv`` columns, ``offset_D``."""
    return {f"offset_{d}": x for d, x in offsets.items()}


class Calibration(NamedTuple):
    """One evaluation's calibration.

    Attributes:
        chosen: the offsets kept, ``{dimension: offset}``.
        played: ``(offsets, metrics)`` for every candidate, in play order.
    """
    chosen: Offsets
    played: List[tuple]

    def rows(self) -> List[Dict[str, float]]:
        """``calibration.csv``'s rows (``env_steps`` is added on write)."""
        return [dict(metrics, **offset_columns(offsets),
                     chosen=float(offsets == self.chosen))
                for offsets, metrics in self.played]


class Calibrator:
    """Chooses the deterministic offset by playing every candidate.

    Args:
        evaluator: plays the calibration episodes (deterministic).
        grid: ``TrainerConfig.calibrate_offsets``.
        metric: the evaluation metric to maximise.
    """

    def __init__(self, evaluator, grid: Mapping, metric: str):
        if not evaluator.deterministic:
            raise ConfigError("TrainerConfig.calibrate_offsets needs "
                              "eval_deterministic=True (the offset moves "
                              "the deterministic action)")
        self._evaluator = evaluator
        self._candidates = candidates(grid)
        self._metric = metric

    def calibrate(self, algorithm, should_stop: Optional[
            Callable[[], bool]] = None) -> Calibration:
        """Plays every candidate, leaves ``algorithm`` acting with the best
        (`PPOAlgorithm.set_calibrated_offset`) and returns the calibration.

        Raises:
            ConfigError: the metric is not one the episodes report.
            EvaluationStopped: ``should_stop()`` turned true (the algorithm
                acts with the offset it had before).
        """
        before = algorithm.get_calibrated_offset()
        try:
            return self._calibrate(algorithm, should_stop)
        except BaseException:
            algorithm.set_calibrated_offset(before)
            raise

    def _calibrate(self, algorithm, should_stop) -> Calibration:
        from alf.trainers.evaluator import evaluate_variants

        # All the candidates' episodes queue for the environments at once
        # (one candidate after another would wait out each one's longest
        # episode on idle cores); each episode acts with its candidate.
        def acting_with(offsets: Offsets) -> Callable[[], None]:
            return lambda: algorithm.set_calibrated_offset(offsets)

        results = evaluate_variants(
            self._evaluator, algorithm,
            [acting_with(offsets) for offsets in self._candidates],
            should_stop)
        if self._metric not in results[0]:
            raise ConfigError(
                f"calibration metric {self._metric!r} (best_metric) is "
                f"not reported; the episodes report "
                f"{', '.join(results[0])}")
        played = list(zip(self._candidates, results))
        chosen, _ = choose(played, self._metric)
        algorithm.set_calibrated_offset(chosen)
        return Calibration(chosen, played)

    def close(self) -> None:
        """Closes the calibration environments."""
        self._evaluator.close()


def make_calibrator(cfg) -> Optional[Calibrator]:
    """The `Calibrator` of the `TrainerConfig` ``cfg`` (None without
    ``calibrate_offsets``): ``num_calibration_episodes`` episodes in
    environments from ``calibration_env_load_fn`` (default: the training
    environments' loader), maximising ``best_metric`` (``average_return``
    without one)."""
    if cfg.calibrate_offsets is None:
        return None
    from alf.trainers.evaluator import make_evaluator
    evaluator = make_evaluator(
        cfg, cfg.calibration_env_load_fn or cfg.env_load_fn,
        cfg.num_calibration_episodes)
    try:
        return Calibrator(evaluator, cfg.calibrate_offsets,
                          cfg.best_metric or "average_return")
    except BaseException:
        evaluator.close()
        raise


def check_algorithm(cfg, algorithm) -> None:
    """Refuses ``calibrate_offsets`` for an algorithm that cannot act with
    a calibrated offset."""
    if cfg.calibrate_offsets is not None and not hasattr(
            algorithm, "set_calibrated_offset"):
        raise ConfigError(
            f"TrainerConfig.calibrate_offsets={cfg.calibrate_offsets!r}: "
            f"{type(algorithm).__name__} has no deterministic offset (PPO "
            f"and PPG have); drop the setting")
