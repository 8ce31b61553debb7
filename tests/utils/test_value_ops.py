"""`generalized_advantage_estimation` against a hand computation.

Example: T = 4 steps, B = 2 environments, gamma = 0.9, lambda = 0.8
(gamma * lambda = 0.72).

* column 0: the episode *terminates* at t = 1 (rows 2, 3 are a new episode);
* column 1: a time limit *truncates* the episode at t = 2 (row 3 is a new
  episode).
"""
import pytest
import torch

from alf.utils.value_ops import generalized_advantage_estimation

GAMMA, LAMBDA = 0.9, 0.8
GL = GAMMA * LAMBDA  # 0.72

# Columns: [env 0, env 1].
REWARDS = [[1.0, 0.5], [2.0, -1.0], [0.0, 3.0], [4.0, 1.0]]
VALUES = [[0.3, 0.2], [0.6, 0.4], [-0.2, 1.5], [0.7, 0.1]]
NEXT_VALUES = [[0.6, 0.4], [5.0, 1.5], [0.7, 2.5], [0.9, 0.8]]
TERMINATED = [[False, False], [True, False], [False, False], [False, False]]
TRUNCATED = [[False, False], [False, False], [False, True], [False, False]]


def _inputs(rewards=REWARDS, values=VALUES, next_values=NEXT_VALUES):
    def f(x):
        return torch.tensor(x, dtype=torch.float64)
    return dict(rewards=f(rewards), values=f(values),
                next_values=f(next_values),
                terminated=torch.tensor(TERMINATED),
                truncated=torch.tensor(TRUNCATED), gamma=GAMMA,
                gae_lambda=LAMBDA)


def _gae(**overrides):
    return generalized_advantage_estimation(**{**_inputs(), **overrides})


def _hand_computed():
    # Column 0: deltas; t = 1 terminates -> no bootstrap from next_values.
    d0_0 = 1.0 + 0.9 * 0.6 - 0.3  # 1.24
    d0_1 = 2.0 - 0.6  # 1.4   (next value 5.0 ignored)
    d0_2 = 0.0 + 0.9 * 0.7 - (-0.2)  # 0.83
    d0_3 = 4.0 + 0.9 * 0.9 - 0.7  # 4.11
    a0_3 = d0_3  # 4.11 (end of the unroll: nothing to carry)
    a0_2 = d0_2 + GL * a0_3  # 0.83 + 0.72 * 4.11 = 3.7892
    a0_1 = d0_1  # 1.4   (episode ended: no carry from t = 2)
    a0_0 = d0_0 + GL * a0_1  # 1.24 + 0.72 * 1.4 = 2.248

    # Column 1: t = 2 is truncated -> bootstrap from next_values[2] = 2.5,
    # but no carry from t = 3 (a different episode).
    d1_0 = 0.5 + 0.9 * 0.4 - 0.2  # 0.66
    d1_1 = -1.0 + 0.9 * 1.5 - 0.4  # -0.05
    d1_2 = 3.0 + 0.9 * 2.5 - 1.5  # 3.75
    d1_3 = 1.0 + 0.9 * 0.8 - 0.1  # 1.62
    a1_3 = d1_3  # 1.62
    a1_2 = d1_2  # 3.75
    a1_1 = d1_1 + GL * a1_2  # -0.05 + 2.7 = 2.65
    a1_0 = d1_0 + GL * a1_1  # 0.66 + 1.908 = 2.568
    return torch.tensor([[a0_0, a1_0], [a0_1, a1_1], [a0_2, a1_2],
                         [a0_3, a1_3]], dtype=torch.float64)


def test_gae_matches_hand_computation():
    """The [4, 2] example equals the hand computation (and its numbers)."""
    adv = _gae()
    assert adv.shape == (4, 2)
    torch.testing.assert_close(adv, _hand_computed())
    torch.testing.assert_close(
        adv,
        torch.tensor([[2.248, 2.568], [1.4, 2.65], [3.7892, 3.75],
                      [4.11, 1.62]], dtype=torch.float64))


def test_termination_does_not_bootstrap():
    """next_values at the terminating step do not affect any advantage."""
    nv = [row[:] for row in NEXT_VALUES]
    nv[1][0] = -1000.0
    torch.testing.assert_close(_gae(**_inputs(next_values=nv)), _gae())


def test_truncation_bootstraps_from_next_value_at_that_step():
    """At a truncation, advantage moves by gamma * change of next_values[t]."""
    nv = [row[:] for row in NEXT_VALUES]
    nv[2][1] += 10.0
    diff = _gae(**_inputs(next_values=nv)) - _gae()
    expected = torch.zeros(4, 2, dtype=torch.float64)
    expected[2, 1] = GAMMA * 10.0
    expected[1, 1] = GL * GAMMA * 10.0
    expected[0, 1] = GL * GL * GAMMA * 10.0
    torch.testing.assert_close(diff, expected)


@pytest.mark.parametrize("column,boundary", [(0, 1), (1, 2)])
def test_no_dependence_across_the_boundary(column, boundary):
    """Rewards/values after an episode end leave earlier advantages unchanged."""
    rewards = [row[:] for row in REWARDS]
    values = [row[:] for row in VALUES]
    for t in range(boundary + 1, 4):
        rewards[t][column] += 100.0 * (t + 1)
        values[t][column] -= 50.0
    new = _gae(**_inputs(rewards=rewards, values=values))
    old = _gae()
    torch.testing.assert_close(new[:boundary + 1, column],
                               old[:boundary + 1, column])
    # The changes do reach the steps after the boundary (the test can fail).
    assert (new[boundary + 1:, column] != old[boundary + 1:, column]).all()
    # The other column is untouched.
    torch.testing.assert_close(new[:, 1 - column], old[:, 1 - column])


def test_without_episode_ends_is_standard_gae():
    """With no boundaries, lambda=1 advantages are discounted MC + bootstrap."""
    r = torch.tensor([[1.0], [2.0], [3.0]], dtype=torch.float64)
    v = torch.tensor([[0.5], [0.25], [0.125]], dtype=torch.float64)
    nv = torch.tensor([[0.25], [0.125], [4.0]], dtype=torch.float64)
    false = torch.zeros(3, 1, dtype=torch.bool)
    adv = generalized_advantage_estimation(r, v, nv, false, false, 0.5, 1.0)
    # Return from t=0: 1 + 0.5*2 + 0.25*3 + 0.125*4 = 3.25.
    expected = torch.tensor([[3.25 - 0.5], [2 + 0.5 * 3 + 0.25 * 4 - 0.25],
                             [3 + 0.5 * 4 - 0.125]], dtype=torch.float64)
    torch.testing.assert_close(adv, expected)
