"""A constant added to a policy's deterministic action: configured
(``PPOAlgorithm.deterministic_offset``) or chosen by the evaluations
(``TrainerConfig.calibrate_offsets``, `alf.trainers.calibration`).

A policy trained with exploration noise learns a mean for an agent that
acts with that noise; acting with the mean alone can do worse (on MetaDrive
the noise slows the car and its mean alone drives too fast:
docs/metadrive.md). A constant offset per action dimension is the cheapest
correction.
"""
from typing import Dict, Mapping, Optional, Tuple

import gymnasium as gym
import torch
from torch import nn

from alf.networks.actor import per_dimension
from alf.utils.distributed import exclude_from_ddp
from alf.utils.errors import ConfigError

#: The algorithm's attribute (and state-dict prefix) holding a calibrated
#: offset.
CALIBRATED = "calibrated_offset"


def box_bounds(action_space, what: str) -> Tuple[torch.Tensor, torch.Tensor]:
    """(low, high) of a one-dimensional Box; ``what`` names the setting
    refused for any other action space."""
    if (not isinstance(action_space, gym.spaces.Box)
            or len(action_space.shape) != 1):
        raise ConfigError(f"{what} needs a one-dimensional Box action space, "
                          f"not {action_space}")
    return (torch.as_tensor(action_space.low, dtype=torch.float32),
            torch.as_tensor(action_space.high, dtype=torch.float32))


def check_dimensions(dims: Mapping, action_space, what: str) -> int:
    """The action's dimension count; refuses keys of ``dims`` that are not
    its dimensions (``what`` names the setting)."""
    n = action_space.shape[0]
    if not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < n
               for d in dims):
        raise ConfigError(f"{what}; valid: dimensions in 0..{n - 1}")
    return n


def check_widths(values: Mapping, low: torch.Tensor, high: torch.Tensor,
                 what: str) -> None:
    """Refuses an offset wider than its dimension's box (``values``:
    ``{dimension: offsets}``): it would hold every action at a bound, a
    typo's likely result (``what`` names the setting)."""
    for d, xs in values.items():
        width = float(high[d] - low[d])
        for x in xs:
            # A NaN fails the comparison too; an infinite bound allows all.
            if not abs(x) <= width:
                raise ConfigError(
                    f"{what}: offset {x!r} for dimension {d} is not within "
                    f"the width of its range [{float(low[d]):g}, "
                    f"{float(high[d]):g}] (a wider one holds every action "
                    f"at a bound); valid: |offset| <= {width:g}")


def configured_offset(action_space, offset
                      ) -> Optional[Tuple[torch.Tensor, ...]]:
    """(offset, low, high) of ``PPOAlgorithm.deterministic_offset`` (None
    for none), refused for actions it cannot shift."""
    if offset is None:
        return None
    what = f"PPOAlgorithm.deterministic_offset={offset!r}"
    low, high = box_bounds(action_space, what)
    dims = action_space.shape[0]
    if isinstance(offset, dict):
        # {dimension: offset}: the dimensions not named keep their mode.
        check_dimensions(offset, action_space, what)
        offset = [offset.get(d, 0.0) for d in range(dims)]
    value = per_dimension(offset, dims, "PPOAlgorithm.deterministic_offset")
    # The values as given (a float32 tensor would name -4.01 otherwise).
    given = offset if isinstance(offset, (tuple, list)) else [offset] * dims
    check_widths({d: [x] for d, x in enumerate(given)}, low, high, what)
    return value, low, high


def shift(mode: torch.Tensor, offset: torch.Tensor, low: torch.Tensor,
          high: torch.Tensor) -> torch.Tensor:
    """``mode`` moved by ``offset`` inside the box [low, high]."""
    offset, low, high = (t.to(mode) for t in (offset, low, high))
    # From the action the environment takes: a Gaussian's mean beyond the
    # box is clipped there first.
    return (mode.clamp(low, high) + offset).clamp(low, high)


class CalibratedOffset(nn.Module):
    """The offset the latest evaluation chose (`set`), kept in checkpoints
    so that ``alf.bin.play`` and ``best.pt`` act as that evaluation did.

    Rank 0 alone evaluates, so the buffer is rank-local (`exclude_from_ddp`):
    the other ranks never act deterministically and never write it.

    Args:
        action_space: a one-dimensional Box.
        dims: the action dimensions calibrated (for the error message).
    """

    value: torch.Tensor
    low: torch.Tensor
    high: torch.Tensor

    def __init__(self, action_space, dims: Mapping):
        super().__init__()
        what = f"TrainerConfig.calibrate_offsets={dict(dims)!r}"
        low, high = box_bounds(action_space, what)
        n = check_dimensions(dims, action_space, what)
        check_widths({d: xs if isinstance(xs, (tuple, list)) else (xs, )
                      for d, xs in dims.items()}, low, high, what)
        self.register_buffer("value", torch.zeros(n))
        self.register_buffer("low", low)
        self.register_buffer("high", high)
        exclude_from_ddp(self)

    def set(self, offsets: Dict[int, float]) -> None:
        """Acts with ``offsets`` (``{dimension: offset}``; others 0)."""
        self.value.zero_()
        for d, x in offsets.items():
            self.value[d] = x

    def get(self) -> Dict[int, float]:
        """The offsets acted with, ``{dimension: offset}`` (all dimensions)."""
        return {d: float(x) for d, x in enumerate(self.value.tolist())}

    def _load_from_state_dict(self, state_dict, prefix, local_metadata,
                              strict, missing_keys, unexpected_keys,
                              error_msgs):
        # A checkpoint from before calibration was turned on (a run resumed
        # with ``calibrate_offsets`` added) has none: act with no offset
        # until the next evaluation chooses one.
        if prefix + "value" not in state_dict:
            return
        super()._load_from_state_dict(state_dict, prefix, local_metadata,
                                      strict, missing_keys, unexpected_keys,
                                      error_msgs)

    def forward(self, mode: torch.Tensor) -> torch.Tensor:
        return shift(mode, self.value, self.low, self.high)
