"""The `Replay` interface of the shipped strategies, and the one place that
reads the former ``replay`` strings (`as_replay`)."""
import doctest
import logging

import gin
import gymnasium as gym
import pytest
import torch

from alf import trainers as alf_trainers
from alf.algorithms import DQNAlgorithm
from alf.data_structures import Experience
from alf.replay_buffers import (PrioritizedGlobalReplay, PrioritizedReplay,
                                Replay, ReplaySample, SumTree, UniformReplay,
                                as_replay, prioritized_replay, replay)
from alf.trainers.trainer_config import TrainerConfig
from alf.utils import deprecation
from alf.utils.errors import ConfigError
from stat_checks import chi_square_pvalue

SHIPPED = [UniformReplay, PrioritizedReplay, PrioritizedGlobalReplay]
PRIORITIZED = [PrioritizedReplay, PrioritizedGlobalReplay]


def _filled(cls, steps=4, streams=2, **kw) -> Replay:
    """A strategy whose item k (numbered t * streams + b) holds k."""
    r = cls(**kw)
    r.build(steps, streams)
    for t in range(steps):
        r.add_batch(torch.arange(streams, dtype=torch.float32) + t * streams)
    return r


def _indices(r: Replay, seed=0, draws=8) -> torch.Tensor:
    """The items of ``draws`` minibatches of 8."""
    g = torch.Generator().manual_seed(seed)
    return torch.cat([r.sample(8, generator=g).indices for _ in range(draws)])


@pytest.mark.parametrize("module", [replay, prioritized_replay])
def test_docstring_examples_run(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("cls", SHIPPED)
def test_sample_is_the_stored_items_it_names(cls):
    r = _filled(cls)
    assert len(r) == 8 and r.ready(8) and not r.ready(9)
    out = r.sample(5, progress=0.5)
    assert isinstance(out, ReplaySample)
    assert torch.equal(out.batch, out.indices.float())  # item k holds k
    assert out.loss_scale == 1 / 5  # one process: the minibatch mean
    if cls is UniformReplay:
        assert out.weights is None and r.beta(0.5) is None
    else:
        assert out.weights.shape == (5, ) and r.beta(0.5) == 0.7


@pytest.mark.parametrize("cls", SHIPPED)
def test_storage_bytes_is_what_build_and_the_first_add_allocate(cls):
    example = Experience(torch.zeros(3, 5), torch.zeros(3, dtype=torch.long),
                         torch.zeros(3), torch.zeros(3, dtype=torch.bool),
                         torch.zeros(3, dtype=torch.bool), torch.zeros(3, 5))
    r = cls()
    expected = r.storage_bytes(7, 3, example)
    buffer = r.build(7, 3)
    r.add_batch(example)
    allocated = sum(s.numel() * s.element_size()
                    for name, s in buffer.named_buffers()
                    if name.startswith("_storage_") or "tree" in name)
    assert expected == allocated
    if cls is not UniformReplay:
        assert expected == 7 * 3 * (2 * 5 * 4 + 8 + 4 + 2) + \
            SumTree.storage_bytes(21)


def test_uniform_update_priorities_is_a_no_op():
    r = _filled(UniformReplay)
    before = _indices(r)
    state = {k: v.clone() for k, v in r.buffer.state_dict(
        keep_vars=True).items()}
    r.update_priorities(before[:4], torch.tensor([100.0, 0.0, 5.0, 1.0]))
    assert torch.equal(_indices(r), before)
    for k, v in r.buffer.state_dict(keep_vars=True).items():
        assert torch.equal(v, state[k]), k


@pytest.mark.parametrize("cls", PRIORITIZED)
def test_prioritized_update_changes_sampling_probabilities(cls):
    r = _filled(cls, alpha=0.6, eps=0.0)
    # New items all get the largest priority so far: uniform at first.
    counts = torch.bincount(_indices(r, draws=500), minlength=8)
    assert chi_square_pvalue(counts, torch.ones(8)) > 1e-3
    p = torch.tensor([1.0, 2.0, 0.5, 4.0, 3.0, 1.0, 0.25, 6.0])
    r.update_priorities(torch.arange(8), p)
    counts = torch.bincount(_indices(r, seed=1, draws=500), minlength=8)
    assert chi_square_pvalue(counts, p.double()**0.6) > 1e-3
    assert counts[7] > 3 * counts[6]


@pytest.mark.parametrize("cls", SHIPPED)
def test_one_strategy_object_serves_one_algorithm(cls):
    r = cls()
    r.build(4, 2)
    with pytest.raises(ValueError, match="one replay object per algorithm"):
        r.build(4, 2)


def test_gin_bindings_of_one_prioritized_strategy_stay_its_own():
    try:
        alf_trainers.parse_config([], ["PrioritizedReplay.alpha = 0.9",
                                     "PrioritizedGlobalReplay.beta = 0.2"])
        assert (PrioritizedReplay().alpha, PrioritizedReplay().beta0) == \
            (0.9, 0.4)
        assert (PrioritizedGlobalReplay().alpha,
                PrioritizedGlobalReplay().beta0) == (0.6, 0.2)
    finally:
        gin.clear_config()


# ---- the former strings ------------------------------------------------------
@pytest.fixture
def warnings_seen(monkeypatch, caplog):
    monkeypatch.setattr(deprecation, "_warned", set())
    caplog.set_level(logging.WARNING)
    return lambda: [r.getMessage() for r in caplog.records
                    if "deprecated" in r.getMessage()]


@pytest.mark.parametrize("mode,cls", [("uniform", UniformReplay),
                                      ("prioritized", PrioritizedReplay),
                                      ("prioritized_global",
                                       PrioritizedGlobalReplay)])
def test_a_mode_string_maps_to_its_strategy_and_warns_once(
        warnings_seen, mode, cls):
    r = as_replay(mode)
    assert type(r) is cls
    assert type(as_replay(mode)) is cls
    seen = warnings_seen()
    assert len(seen) == 1 and "\n" not in seen[0]
    assert f"replay={mode!r} is deprecated; use replay=@{cls.__name__}()" \
        in seen[0]


def test_priority_options_go_with_the_string_and_nowhere_else():
    r = as_replay("prioritized_global", priority_alpha=0.5,
                  priority_beta=0.3)
    assert type(r) is PrioritizedGlobalReplay
    assert (r.alpha, r.beta0) == (0.5, 0.3)
    assert (as_replay("prioritized").alpha,
            as_replay("prioritized").beta0) == (0.6, 0.4)
    mine = PrioritizedReplay()
    assert as_replay(mine) is mine
    assert type(as_replay(None)) is UniformReplay
    with pytest.raises(ConfigError, match=r"choose the strategy and set its "
                       r"own options: replay = @PrioritizedReplay\(\)"):
        as_replay(mine, priority_alpha=0.5)


@pytest.mark.parametrize("bad,match", [
    ("prioritised", r"^replay='prioritised'; valid: \('uniform', "
     r"'prioritized', 'prioritized_global'\) \(former spellings\) or a "
     r"Replay object such as @PrioritizedReplay\(\)$"),
    (PrioritizedReplay, r"^replay=PrioritizedReplay is a class; pass an "
     r"object: @PrioritizedReplay\(\) in gin"),
    (3, r"^replay=3 is a int; valid: a Replay object"),
])
def test_a_bad_replay_is_one_line_naming_the_valid_values(bad, match):
    with pytest.raises(ConfigError, match=match) as info:
        as_replay(bad)
    assert "\n" not in str(info.value)


def _train_dqn(replay, **kw):
    """Weights of a DQN after a few updates on fixed random experience."""
    cfg = TrainerConfig(algorithm_ctor=DQNAlgorithm, num_envs=2,
                        unroll_length=4, minibatch_size=4,
                        replay_buffer_capacity=32, initial_collect_steps=8,
                        num_updates_per_iter=2)
    torch.manual_seed(0)
    alg = DQNAlgorithm(gym.spaces.Box(-1, 1, (3, )), gym.spaces.Discrete(3),
                       cfg, replay=replay, **kw)
    torch.manual_seed(1)
    for it in range(6):
        for _ in range(4):
            obs = torch.randn(2, 3)
            with torch.inference_mode():
                action = alg.rollout_step(obs).output
            alg.store(Experience(obs, action, obs.sum(1),
                                 torch.zeros(2, dtype=torch.bool),
                                 torch.zeros(2, dtype=torch.bool),
                                 torch.randn(2, 3)))
        alg.train_iter(it / 6)
    return alg.state_dict()


def test_a_string_trains_exactly_as_its_strategy():
    ref = _train_dqn(PrioritizedReplay(alpha=0.5, beta=0.3))
    old = _train_dqn("prioritized", priority_alpha=0.5, priority_beta=0.3)
    assert ref.keys() == old.keys()
    for k in ref:
        assert torch.equal(ref[k], old[k]), k


# ---- options refused when built ----------------------------------------------
@pytest.mark.parametrize("cls", PRIORITIZED)
@pytest.mark.parametrize("name,value,valid", [
    # -1 was a ValueError with a 47-line traceback; 'x' a TypeError.
    ("alpha", -1, "a number >= 0 (0: uniform)"),
    ("alpha", "x", "a number >= 0 (0: uniform)"),
    ("alpha", float("nan"), "a number >= 0 (0: uniform)"),
    # -1 was accepted, then refused mid-training as a bad priority.
    ("eps", -1.0, "a number >= 0 (added to every priority; e.g. 1e-6)"),
    ("eps", None, "a number >= 0 (added to every priority; e.g. 1e-6)"),
    # 2 was accepted: beta then shrank towards 1 over training.
    ("beta", 2.0, "a number in [0, 1] (1: full correction)"),
    ("beta", -0.1, "a number in [0, 1] (1: full correction)"),
    ("beta", True, "a number in [0, 1] (1: full correction)"),
])
def test_a_bad_prioritized_option_is_one_line_naming_it(cls, name, value,
                                                        valid):
    from alf.utils.errors import one_line
    with pytest.raises(ConfigError) as info:
        cls(**{name: value})
    assert one_line(info.value) == (f"{cls.__name__}.{name}={value!r}; "
                                    f"valid: {valid}")


@pytest.mark.parametrize("cls", PRIORITIZED)
def test_prioritized_options_at_the_ends_of_their_ranges_are_accepted(cls):
    r = cls(alpha=0, beta=1.0, eps=0.0)
    assert (r.alpha, r.beta0, r.eps) == (0, 1.0, 0.0)
    assert cls(alpha=2.0, beta=0.0, eps=1e-3).beta(0.5) == 0.5


def test_a_bad_prioritized_binding_is_one_line_through_gin():
    from alf.utils.errors import one_line
    try:
        alf_trainers.parse_config([], ["PrioritizedReplay.alpha = -1"])
        with pytest.raises(ConfigError) as info:
            PrioritizedReplay()
    finally:
        gin.clear_config()
    assert one_line(info.value) == ("PrioritizedReplay.alpha=-1; valid: a "
                                    "number >= 0 (0: uniform)")
