"""The named tuples that flow between environments, algorithms and trainers.

Conventions (one row = one environment step):

* ``TimeStep`` is what a batched environment returns after ``step(action)``.
  ``observation`` is the observation to act on next: after an episode ends it is
  already the first observation of the new episode (gymnasium's same-step
  autoreset), and ``final_observation`` holds the true last observation of the
  ended episode. ``next_observation()`` gives the observation that really
  followed the action, which is what bootstrapping must use.
* ``Experience`` is one stored transition. ``terminated`` means the MDP ended
  (no bootstrap); ``truncated`` means a time limit cut the episode (bootstrap
  from ``next_observation``). Either one cuts any multi-step recursion, so no
  transition across an episode boundary is ever trained on.
"""
from typing import Any, NamedTuple

import torch


class TimeStep(NamedTuple):
    """A batched environment step; every field has a leading batch dim [B]."""

    observation: Any
    reward: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    final_observation: Any = None
    # Per-episode metrics (e.g. success) where an episode ended at this step:
    # name -> float [B], NaN in the other rows. Empty on most steps.
    episode_info: dict = {}

    @property
    def done(self) -> torch.Tensor:
        """Whether each environment's episode ended at this step."""
        return self.terminated | self.truncated

    def next_observation(self):
        """The observation that followed the action (the final one at ends)."""
        if self.final_observation is None:
            return self.observation
        return self.final_observation


class AlgStep(NamedTuple):
    """What an algorithm's ``*_step`` returns.

    Attributes:
        output: the action (rollout/predict) or the network output (train).
        state: recurrent state, ``()`` for feed-forward algorithms.
        info: algorithm-specific data to store or to compute a loss from.
    """

    output: Any = ()
    state: Any = ()
    info: Any = ()


class LossInfo(NamedTuple):
    """A scalar loss to minimise and named scalars to summarise.

    Attributes:
        loss: scalar tensor that ``backward()`` is called on.
        extra: dict of name -> scalar tensor, written to summaries.
        priority: optional per-sample priorities (prioritized replay).
    """

    loss: torch.Tensor
    extra: dict = {}
    priority: Any = ()


class Experience(NamedTuple):
    """One stored transition; fields have leading dims [B] (or [T, B]).

    ``rollout_info`` is what the acting policy's ``rollout_step`` returned as
    ``info`` (PPO: the behaviour log-probability); ``policy_version`` (int64)
    is the number of training iterations of the policy that acted, which
    tells how stale a step is when collection runs ahead of training.
    """

    observation: Any
    action: Any
    reward: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    next_observation: Any
    rollout_info: Any = ()
    policy_version: Any = ()
