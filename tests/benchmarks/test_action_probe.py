"""benchmarks/action_probe.py: its variants' grammar and what an ``echo``
variant shows the policy (a stub algorithm; `play`'s ``act`` hook itself
is checked in tests/bin/test_play.py)."""
import os
import sys

import gymnasium as gym
import pytest
import torch

BENCHMARKS = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks")
sys.path.insert(0, BENCHMARKS)
import action_probe  # noqa: E402


@pytest.mark.parametrize("text,expect", [
    ("det", ([], {}, None, {})),
    ("sample", ([-1], {}, None, {})),
    ("sample:0,1", ([0, 1], {}, None, {})),
    ("offset:1=-0.2", ([], {1: -0.2}, None, {})),
    ("jitter:1e-6,3", ([], {}, (1e-6, 3), {})),
    ("echo:0=4,0=5,1=6", ([], {}, None, {4: 0, 5: 0, 6: 1})),
])
def test_variants_parse(text, expect):
    assert tuple(action_probe.parse_variant(text)) == expect


@pytest.mark.parametrize("text", ["echo", "echo:1", "offset:x=1", "det:0",
                                  "noise"])
def test_a_malformed_variant_is_one_line_naming_the_forms(text):
    with pytest.raises(SystemExit, match="echo:D=I"):
        action_probe.parse_variant(text)


class _Dist:
    def __init__(self, obs):
        self.obs = obs

    def mode(self):
        return torch.zeros(self.obs.shape[0], 2)

    def sample(self):
        # Draws that differ from step to step: the step's first entry.
        return torch.stack([self.obs[:, 0], -self.obs[:, 0]], -1) * 0.1


class _Algorithm:
    action_space = gym.spaces.Box(-1, 1, (2, ))

    def __init__(self):
        self.seen = []

    def observe(self, raw, update=False):
        return raw * 1.0

    def actor(self, obs):
        self.seen.append(obs.clone())
        return _Dist(obs)


def test_echo_shows_the_previous_steps_draw_and_acts_with_the_mode():
    act = action_probe.make_act(action_probe.parse_variant("echo:1=2"),
                                -1, [])
    alg = _Algorithm()
    first = torch.tensor([[3.0, 0.0, 0.5]])  # an episode's first step
    second = torch.tensor([[5.0, 0.0, 0.9]])
    assert act(alg, first, first).tolist() == [[0.0, 0.0]]
    assert torch.equal(alg.seen[-1], first)  # left as it was
    assert act(alg, second, second).tolist() == [[0.0, 0.0]]
    # Entry 2 shows dimension 1 of the first step's draw (-0.3), mapped
    # to [0, 1] as MetaDrive maps an action.
    assert alg.seen[-1][0, 2].item() == pytest.approx((1 - 0.3) / 2)
    assert alg.seen[-1][0, 0].item() == 5.0
    # A new episode (the entry back at 0.5) is left alone again.
    act(alg, first, first)
    assert torch.equal(alg.seen[-1], first)
