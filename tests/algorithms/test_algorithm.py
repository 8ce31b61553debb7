"""`Algorithm` optimizer plumbing and `clip_grad_norm`."""
import copy

import pytest
import torch
from torch import nn

from alf.algorithms.algorithm import Algorithm, clip_grad_norm
from alf.data_structures import LossInfo
from alf.utils.errors import CheckpointError, ConfigError


def _gen(seed):
    return torch.Generator().manual_seed(seed)


class TwoNets(Algorithm):
    """Two small networks; each gets its own optimizer (two param groups)."""

    def __init__(self, opt="sgd", lr=0.1):
        super().__init__()
        g = _gen(0)
        self.a = nn.Linear(3, 4)
        self.b = nn.Linear(4, 2)
        self.unused = nn.Linear(2, 2)  # never gets a gradient
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g))
        make = {"sgd": lambda ps: torch.optim.SGD(ps, lr=lr),
                "adam": lambda ps: torch.optim.Adam(ps, lr=lr)}[opt]
        self.add_optimizer(make(list(self.a.parameters())))
        self.add_optimizer(
            make(list(self.b.parameters()) + list(self.unused.parameters())))

    def loss(self, x):
        return LossInfo(loss=self.b(torch.tanh(self.a(x))).square().sum())


def _x(scale=1.0):
    return torch.randn(5, 3, generator=_gen(1)) * scale


def _grads_of(alg, x):
    alg.zero_grad(set_to_none=True)
    alg.loss(x).loss.backward()


# ---- clip_grad_norm --------------------------------------------------------


@pytest.mark.parametrize("max_norm,clips", [(0.5, True), (1e6, False)])
def test_clip_grad_norm_matches_torch(max_norm, clips):
    """Same clipped gradients and returned norm as clip_grad_norm_."""
    ours, ref = TwoNets(), TwoNets()
    x = _x()
    _grads_of(ours, x)
    _grads_of(ref, x)
    raw = [p.grad.clone() for p in ours.parameters() if p.grad is not None]
    assert ours.unused.weight.grad is None

    norm = clip_grad_norm(ours._param_groups(), max_norm)
    ref_norm = torch.nn.utils.clip_grad_norm_(
        [p for p in ref.parameters() if p.grad is not None], max_norm)

    torch.testing.assert_close(norm, ref_norm)
    assert (norm > max_norm) == clips
    clipped = [p.grad for p in ours.parameters() if p.grad is not None]
    for a, b in zip(clipped,
                    [p.grad for p in ref.parameters() if p.grad is not None]):
        torch.testing.assert_close(a, b)
    total = torch.linalg.vector_norm(torch.cat([g.flatten() for g in clipped]))
    if clips:
        torch.testing.assert_close(total, torch.tensor(max_norm), rtol=1e-4,
                                   atol=1e-6)
    else:
        for a, b in zip(clipped, raw):
            torch.testing.assert_close(a, b)


def test_clip_grad_norm_without_gradients_returns_zero():
    """No gradients at all: norm 0 and nothing fails."""
    alg = TwoNets()
    norm = clip_grad_norm(alg._param_groups(), 1.0)
    assert float(norm) == 0.0


# ---- update_with_gradient --------------------------------------------------


def test_update_with_gradient_one_sgd_step():
    """Parameters move by -lr * grad, each optimizer steps exactly once."""
    alg, ref = TwoNets(lr=0.1), TwoNets()
    x = _x()
    _grads_of(ref, x)
    # Stale gradients must be discarded by update_with_gradient.
    for p in alg.parameters():
        p.grad = torch.full_like(p, 123.0)
    norm = alg.update_with_gradient(alg.loss(x))
    assert float(norm) == 0.0  # no clipping requested
    for (name, p), p0 in zip(alg.named_parameters(), ref.parameters()):
        if name.startswith("unused"):
            torch.testing.assert_close(p, p0)
        else:
            torch.testing.assert_close(p, p0 - 0.1 * p0.grad)


def test_update_with_gradient_without_an_optimizer_is_refused():
    """A user's algorithm that forgot add_optimizer trained nothing, for a
    whole run, without a word."""
    alg = TwoNets()
    alg._optimizers.clear()
    with pytest.raises(ConfigError, match=r"TwoNets\.update_with_gradient: "
                       r"no optimizer is registered, so nothing would train; "
                       r"register one in __init__ with self\.add_optimizer"):
        alg.update_with_gradient(alg.loss(_x()))


def test_update_with_gradient_clips_and_returns_norm():
    """With max_grad_norm the step uses clipped gradients; returns the raw
    norm."""
    alg, ref = TwoNets(lr=0.1), TwoNets()
    x = _x(scale=3.0)
    _grads_of(ref, x)
    grads = [p.grad for p in ref.parameters() if p.grad is not None]
    raw_norm = torch.linalg.vector_norm(torch.cat([g.flatten()
                                                   for g in grads]))
    assert raw_norm > 1.0
    norm = alg.update_with_gradient(alg.loss(x), max_grad_norm=1.0)
    torch.testing.assert_close(norm, raw_norm)
    scale = 1.0 / (raw_norm + 1e-6)
    for p, p0 in zip(alg.a.parameters(), ref.a.parameters()):
        torch.testing.assert_close(p, p0 - 0.1 * scale * p0.grad)


def test_set_learning_rate_applies_to_every_optimizer():
    """set_learning_rate changes every param group's lr."""
    alg = TwoNets()
    alg.set_learning_rate(0.25)
    assert [g["lr"] for g in alg._param_groups()] == [0.25, 0.25]


# ---- optimizer state -------------------------------------------------------


def test_optimizer_state_dict_round_trip():
    """A restored Adam continues exactly like the original one."""
    x = _x()
    src = TwoNets(opt="adam", lr=0.01)
    for _ in range(3):
        src.update_with_gradient(src.loss(x))
    states = src.optimizer_state_dict()
    assert len(states) == 2 and all("state" in s for s in states)

    restored = TwoNets(opt="adam", lr=0.01)
    restored.load_state_dict(src.state_dict())
    restored.load_optimizer_state_dict(copy.deepcopy(states))
    fresh = TwoNets(opt="adam", lr=0.01)  # same weights, no optimizer state
    fresh.load_state_dict(src.state_dict())

    for alg in (src, restored, fresh):
        alg.update_with_gradient(alg.loss(x))
    for p, q in zip(src.parameters(), restored.parameters()):
        torch.testing.assert_close(p, q)
    # Without the optimizer state the step differs (the test can fail).
    assert not torch.allclose(src.a.weight, fresh.a.weight)


def test_load_optimizer_state_dict_length_mismatch():
    """A checkpoint with a different number of optimizers is rejected."""
    alg = TwoNets()
    states = alg.optimizer_state_dict()
    with pytest.raises(CheckpointError, match="1 optimizer states.*has 2"):
        alg.load_optimizer_state_dict(states[:1])
    with pytest.raises(CheckpointError, match="3 optimizer states"):
        alg.load_optimizer_state_dict(states + states[:1])


def test_device_follows_to():
    alg = Algorithm()
    alg.net = nn.Linear(2, 2)
    assert alg.device == torch.device("cpu")
    alg.to("meta")  # stands in for a GPU on a CPU-only machine
    assert alg.device.type == "meta"


# ---- constructor arguments (issue 11) ----------------------------------------
def _build(name, **kw):
    """Builds one of alf's algorithms on a small task, with ``kw``."""
    import gymnasium as gym

    from alf.algorithms import (DQNAlgorithm, PPGAlgorithm, PPOAlgorithm,
                                SACAlgorithm)
    from alf.trainers.trainer_config import TrainerConfig
    ctor = {"PPOAlgorithm": PPOAlgorithm, "PPGAlgorithm": PPGAlgorithm,
            "SACAlgorithm": SACAlgorithm, "DQNAlgorithm": DQNAlgorithm}[name]
    cfg = TrainerConfig(algorithm_ctor=ctor, num_envs=2, unroll_length=4,
                        minibatch_size=8, replay_buffer_capacity=16)
    box = gym.spaces.Box(-1, 1, (2, ))
    action = box if name == "SACAlgorithm" else gym.spaces.Discrete(2)
    return ctor(box, action, cfg, **kw)


ALGORITHMS = ["PPOAlgorithm", "PPGAlgorithm", "SACAlgorithm", "DQNAlgorithm"]


@pytest.mark.parametrize("name", ALGORITHMS)
@pytest.mark.parametrize("value", ["abc", -1.0, 0.0, 0, float("nan"),
                                   float("inf"), None, True])
def test_bad_learning_rate_is_refused_naming_parameter_and_value(name,
                                                                  value):
    from alf.utils.errors import ConfigError, one_line
    with pytest.raises(ConfigError) as info:
        _build(name, learning_rate=value)
    msg = one_line(info.value)  # what the CLI prints
    assert f"{name}.learning_rate={value!r}" in msg, msg
    assert "positive float" in msg


@pytest.mark.parametrize("name", ALGORITHMS)
@pytest.mark.parametrize("value", [1e-3, 2])
def test_good_learning_rate_is_used(name, value):
    alg = _build(name, learning_rate=value)
    assert alg._optimizers[0].param_groups[0]["lr"] == value


@pytest.mark.parametrize("name", ALGORITHMS)
def test_unknown_constructor_argument_is_a_type_error(name):
    # No **kwargs: a misspelled argument (and so a misspelled gin binding)
    # is refused instead of being passed on silently.
    with pytest.raises(TypeError, match="learning_rat"):
        _build(name, learning_rat=3e-4)


# ---- max_grad_norm -----------------------------------------------------------
BAD_MAX_GRAD_NORMS = [-1.0, 0.0, 0, float("nan"), float("inf"), "abc", True]


@pytest.mark.parametrize("name", ["SACAlgorithm", "DQNAlgorithm"])
@pytest.mark.parametrize("value", BAD_MAX_GRAD_NORMS)
def test_bad_max_grad_norm_is_refused_when_built(name, value):
    # -1 flipped every gradient and 0 zeroed them, both silently.
    from alf.utils.errors import one_line
    with pytest.raises(ConfigError) as info:
        _build(name, max_grad_norm=value)
    msg = one_line(info.value)
    assert msg == (f"{name}.max_grad_norm={value!r}; it must be a positive "
                   "number, or None (no clipping)"), msg


@pytest.mark.parametrize("name", ["SACAlgorithm", "DQNAlgorithm"])
@pytest.mark.parametrize("value", [None, 0.5, 10])
def test_good_max_grad_norm_is_kept(name, value):
    assert _build(name, max_grad_norm=value)._max_grad_norm == value


@pytest.mark.parametrize("value", [-1.0, 0.0])
def test_update_with_gradient_refuses_a_bad_max_grad_norm_untouched(value):
    # The backstop for an algorithm that does not check when built (PPO,
    # PPG): refused before any parameter moves.
    alg = TwoNets()
    before = [p.detach().clone() for p in alg.parameters()]
    with pytest.raises(ConfigError, match=r"^TwoNets\.max_grad_norm="):
        alg.update_with_gradient(alg.loss(_x()), max_grad_norm=value)
    assert all(torch.equal(p, b) for p, b in zip(alg.parameters(), before))
