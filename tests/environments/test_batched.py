"""`check_time_step`: a suite's TimeStep of the wrong shape is one line
naming the suite, the field and what it must be."""
import gymnasium as gym
import numpy as np
import pytest
import torch

from alf.data_structures import TimeStep
from alf.environments.batched import BatchedEnvironment, check_time_step
from alf.utils.errors import AlfError


class _Chain(BatchedEnvironment):

    def __init__(self):
        super().__init__(3, gym.spaces.Box(0, 1, (2, )),
                         gym.spaces.Discrete(2))

    def reset(self, seed=None):
        raise NotImplementedError

    def step(self, action):
        raise NotImplementedError

    def close(self):
        pass


def _ts(**fields):
    base = dict(observation=torch.zeros(3, 2), reward=torch.zeros(3),
                terminated=torch.zeros(3, dtype=torch.bool),
                truncated=torch.zeros(3, dtype=torch.bool))
    return TimeStep(**dict(base, **fields))


def test_a_well_formed_time_step_passes():
    ts = _ts()
    assert check_time_step(_Chain(), ts) is ts


@pytest.mark.parametrize("fields, message", [
    (dict(reward=torch.zeros(3, 1)), "_Chain.step returned TimeStep.reward "
     "of shape (3, 1), torch.float32; it must be a float tensor of shape "
     "[num_envs] = [3]"),
    (dict(reward=[0.0, 0.0, 0.0]), "TimeStep.reward of a list; it must be"),
    (dict(reward=torch.zeros(3, dtype=torch.int64)), "TimeStep.reward of "
     "shape (3,), torch.int64; it must be a float tensor"),
    (dict(terminated=torch.zeros(3)), "TimeStep.terminated of shape (3,), "
     "torch.float32; it must be a bool tensor"),
    (dict(truncated=torch.zeros(3, dtype=torch.bool)[:2]),
     "TimeStep.truncated of shape (2,)"),
    (dict(observation=torch.zeros(2)), "TimeStep.observation of shape (2,), "
     "whose first dimension is not num_envs (3)")])
def test_a_field_of_the_wrong_shape_or_kind_is_named(fields, message):
    with pytest.raises(AlfError) as info:
        check_time_step(_Chain(), _ts(**fields))
    assert message in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("ts, message", [
    ((torch.zeros(3, 2), {}), "_Chain.step returned a tuple; it must return "
     "an alf.data_structures.TimeStep"),
    (None, "_Chain.step returned a NoneType"),
    (_ts(observation=torch.zeros(3, 6)), "TimeStep.observation of shape "
     "(3, 6), not [num_envs, *the observation space's shape] = (3, 2)"),
    (_ts(observation=np.zeros((3, 2), np.float32)),
     "TimeStep.observation of a ndarray"),
    (_ts(final_observation=torch.zeros(3, 1)), "TimeStep.final_observation "
     "of shape (3, 1)"),
    (_ts(observation={"a": torch.zeros(2, 2)}), "TimeStep.observation of "
     "shape (2, 2), whose first dimension is not num_envs (3)")])
def test_a_malformed_step_or_observation_is_named(ts, message):
    with pytest.raises(AlfError) as info:
        check_time_step(_Chain(), ts)
    assert message in str(info.value)


def test_a_nest_of_observations_passes_for_a_dict_space():
    env = _Chain()
    env.observation_space = gym.spaces.Dict(
        {"a": gym.spaces.Box(0, 1, (2, )), "b": gym.spaces.Discrete(4)})
    check_time_step(env, _ts(observation={"a": torch.zeros(3, 2),
                                          "b": torch.zeros(3)}))
