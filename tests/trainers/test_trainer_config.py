"""TrainerConfig: device resolution (GPU cases simulated where none exists),
global and per-rank sizes, and the former spellings of renamed settings."""
import dataclasses
import logging
import re

import gin
import pytest
import torch

from alf.algorithms.ppo_algorithm import PPOAlgorithm
from alf.algorithms.rl_algorithm import RLAlgorithm
from alf.trainers import parse_config
from alf.trainers.trainer_config import TrainerConfig
from alf.utils import deprecation
from alf.utils.errors import ConfigError, one_line


def _config(device):
    return TrainerConfig(algorithm_ctor=PPOAlgorithm, device=device)


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


@pytest.fixture
def two_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)


@pytest.mark.parametrize("bad", ["gpu", "tpu:0", "cuda:x", 3])
def test_unknown_device_name_is_refused_at_construction(bad):
    with pytest.raises(ConfigError, match="'auto', 'cpu', 'cuda'"):
        _config(bad)


def test_auto_is_the_cpu_without_gpu(no_gpu):
    assert _config("auto").resolve_device("none") == torch.device("cpu")


def test_cuda_without_gpu_names_the_setting(no_gpu):
    with pytest.raises(ConfigError, match="device='cuda' but no GPU"):
        _config("cuda").resolve_device("none")


def test_auto_single_process_takes_a_visible_gpu(two_gpus):
    assert _config("auto").resolve_device("none").type == "cuda"


def test_gpu_index_out_of_range(two_gpus):
    with pytest.raises(ConfigError, match="cuda:0 .. cuda:1"):
        _config("cuda:2").resolve_device("none")
    assert _config("cuda:1").resolve_device("none") == torch.device("cuda", 1)


def test_cpu_ranks_stay_on_cpu_even_with_gpus(two_gpus):
    assert _config("auto").resolve_device("gloo") == torch.device("cpu")
    with pytest.raises(ConfigError, match="multi-gpu"):
        _config("cuda").resolve_device("gloo")


def test_gpu_ranks_take_their_own_gpu(two_gpus):
    assert _config("auto").resolve_device("nccl").type == "cuda"
    assert _config("cpu").resolve_device("nccl") == torch.device("cpu")
    with pytest.raises(ConfigError, match="its own GPU"):
        _config("cuda:1").resolve_device("nccl")


def test_inside_a_gloo_group_auto_is_the_cpu(two_gpus, monkeypatch):
    from alf.utils import distributed
    monkeypatch.setattr(distributed, "is_distributed", lambda: True)
    monkeypatch.setattr(distributed, "uses_gpus", lambda: False)
    assert _config("auto").resolve_device() == torch.device("cpu")


def test_inside_a_nccl_group_auto_is_the_local_gpu(two_gpus, monkeypatch):
    from alf.utils import distributed
    from alf.utils.distributed import group
    monkeypatch.setattr(distributed, "is_distributed", lambda: True)
    for module in (distributed, group):  # local_device reads group's
        monkeypatch.setattr(module, "uses_gpus", lambda: True)
    monkeypatch.setattr(group, "_LOCAL_RANK", 1)
    assert _config("auto").resolve_device() == torch.device("cuda", 1)


def test_per_rank_runs_the_algorithms_own_check():
    # An N-process launch refuses sizes PPO cannot use before it spawns.
    from alf.utils.errors import ConfigError
    cfg = TrainerConfig(algorithm_ctor=PPOAlgorithm, num_envs=4,
                        unroll_length=8, minibatch_size=64)
    with pytest.raises(ConfigError, match="per process, 32 of 16"):
        cfg.per_rank(2)
    ok = TrainerConfig(algorithm_ctor=PPOAlgorithm, num_envs=4,
                       unroll_length=8, minibatch_size=32)
    ranked = ok.per_rank(2)
    assert (ranked.minibatch_size, ranked.local_minibatch_size) == (32, 16)
    # A constructor without the hook (a plain function) is fine.
    TrainerConfig(algorithm_ctor=lambda **kw: None).per_rank(2)


# ---- global sizes and a rank's share ---------------------------------------
def test_per_rank_keeps_the_global_sizes_and_names_the_ranks_share():
    cfg = TrainerConfig(algorithm_ctor=PPOAlgorithm, num_envs=8,
                        unroll_length=4, minibatch_size=16,
                        initial_collect_steps=6, replay_buffer_capacity=64)
    assert (cfg.world_size, cfg.local_num_envs, cfg.local_minibatch_size) \
        == (1, 8, 16)
    ranked = cfg.per_rank(2)
    assert (ranked.num_envs, ranked.minibatch_size,
            ranked.initial_collect_steps, ranked.replay_buffer_capacity,
            ranked.steps_per_iteration) == (8, 16, 6, 64, 32)
    assert (ranked.world_size, ranked.local_num_envs,
            ranked.local_minibatch_size, ranked.local_initial_collect_steps,
            ranked.local_replay_buffer_capacity) == (2, 4, 8, 3, 32)
    # The sizes stay global, so dividing again divides the global ones.
    assert ranked.per_rank(2) == ranked
    assert ranked.per_rank(1) == cfg
    # The async collector copies a rank's config with dataclasses.replace.
    assert dataclasses.replace(ranked, seed=3).local_num_envs == 4


def test_a_size_that_does_not_divide_among_the_ranks_is_refused():
    cfg = TrainerConfig(algorithm_ctor=PPOAlgorithm, num_envs=3)
    with pytest.raises(ConfigError) as info:
        cfg.per_rank(2)
    assert str(info.value) == ("TrainerConfig.num_envs=3 does not divide "
                               "among 2 processes; use a multiple of 2")


def test_only_the_sizes_the_algorithm_divides_must_divide():
    """An algorithm without minibatches (the example A2C) trains on 3
    processes with the default minibatch_size=256; PPO does not, and an
    algorithm that does not say is held to every size."""
    from alf.examples.custom_algorithm import ExampleA2C

    class Unsaid(ExampleA2C):
        divided_config_sizes = RLAlgorithm.divided_config_sizes

    TrainerConfig(algorithm_ctor=ExampleA2C, num_envs=6).per_rank(3)
    for ctor in (PPOAlgorithm, Unsaid):
        with pytest.raises(ConfigError, match="TrainerConfig.minibatch_size="
                           "256 does not divide among 3 processes"):
            TrainerConfig(algorithm_ctor=ctor, num_envs=6).per_rank(3)
    with pytest.raises(ConfigError, match="num_envs=4 does not divide"):
        TrainerConfig(algorithm_ctor=ExampleA2C, num_envs=4).per_rank(3)


@pytest.mark.parametrize("kw", [
    dict(max_policy_lag=2), dict(envs_per_actor=4), dict(inference_workers=1),
    dict(actor_niceness=0), dict(segment_length=32)])
def test_async_only_settings_are_refused_in_sync_collection(kw):
    """In lock-step collection they would do nothing; at their defaults
    (as ppg_metadrive.gin binds max_policy_lag=1) they pass."""
    (name, value), = kw.items()
    with pytest.raises(ConfigError, match=re.escape(
            f"TrainerConfig.{name}={value!r} needs unroll_mode=\"async\" "
            "(it is 'sync'); drop it or set "
            "TrainerConfig.unroll_mode=\"async\"")):
        TrainerConfig(algorithm_ctor=PPOAlgorithm, **kw)
    TrainerConfig(algorithm_ctor=PPOAlgorithm, unroll_mode="async", **kw)
    TrainerConfig(algorithm_ctor=PPOAlgorithm, max_policy_lag=1,
                  actor_niceness=10, envs_per_actor=1)


@pytest.mark.parametrize("kw, message", [
    (dict(segment_length=3), "TrainerConfig.segment_length=3; it must be "
     "None or a positive divisor of unroll_length=128"),
    (dict(segment_length=0), "TrainerConfig.segment_length=0; it must be "
     "None or a positive divisor of unroll_length=128"),
    (dict(segment_length=32, unroll_mode="sync"),
     "TrainerConfig.segment_length=32 needs unroll_mode=\"async\" (it is "
     "'sync'); drop it or set TrainerConfig.unroll_mode=\"async\""),
    (dict(segment_length=32, preempt_stragglers=True),
     "TrainerConfig.segment_length=32 does not combine with "
     "preempt_stragglers=True; drop one of them"),
])
def test_a_segment_length_that_cannot_be_used_is_refused(kw, message):
    kw = dict(dict(unroll_mode="async"), **kw)
    with pytest.raises(ConfigError, match=re.escape(message)):
        TrainerConfig(algorithm_ctor=PPOAlgorithm, **kw)


@pytest.mark.parametrize("bad", [-1, 20, 2.5, "5", True])
def test_an_actor_niceness_outside_what_nice_takes_is_refused(bad):
    with pytest.raises(ConfigError) as info:
        TrainerConfig(algorithm_ctor=PPOAlgorithm, actor_niceness=bad)
    assert one_line(info.value) == (f"TrainerConfig.actor_niceness={bad!r}; "
                               "valid: an integer in 0..19 (0: the "
                               "learner's priority)")


@pytest.mark.parametrize("name, bad, valid", [
    # -1 deleted every checkpoint as it was written (a resume then started
    # afresh); 0 kept them all.
    ("max_checkpoints", -1, "a positive integer, or None (keep all)"),
    ("max_checkpoints", 0, "a positive integer, or None (keep all)"),
    ("max_checkpoints", 2.5, "a positive integer, or None (keep all)"),
    # A negative interval evaluated (or checked) at every iteration.
    ("eval_interval", -1, "an integer >= 0 (0: only at the end)"),
    ("sync_check_interval", -3, "an integer >= 0 (0: never)"),
    # A traceback from gymnasium, or torch, after files were written.
    ("seed", -3, "an integer in 0..4294967295"),
    ("seed", 2**32, "an integer in 0..4294967295"),
    ("seed", 1.5, "an integer in 0..4294967295"),
    ("seed", "x", "an integer in 0..4294967295"),
    ("log_interval_seconds", -1, "a number of seconds >= 0 (0: every "
     "iteration)"),
    ("log_interval_seconds", "10", "a number of seconds >= 0 (0: every "
     "iteration)")])
def test_a_setting_out_of_its_range_is_refused(name, bad, valid):
    with pytest.raises(ConfigError) as info:
        TrainerConfig(algorithm_ctor=PPOAlgorithm, **{name: bad})
    assert one_line(info.value) == (f"TrainerConfig.{name}={bad!r}; it must "
                                     f"be {valid}")


def test_the_edges_of_those_ranges_are_accepted():
    TrainerConfig(algorithm_ctor=PPOAlgorithm, max_checkpoints=None,
                  eval_interval=0, sync_check_interval=0, seed=2**32 - 1,
                  log_interval_seconds=0)
    TrainerConfig(algorithm_ctor=PPOAlgorithm, max_checkpoints=1, seed=0)


@pytest.mark.parametrize("name", ["max_policy_lag", "num_envs",
                                  "segment_length", "initial_collect_steps"])
def test_a_bool_is_not_an_integer_setting(name):
    """``True`` is an int to Python; as a count or a bound it is a typo."""
    with pytest.raises(ConfigError, match=f"TrainerConfig.{name}=True; "):
        TrainerConfig(algorithm_ctor=PPOAlgorithm, unroll_mode="async",
                      **{name: True})


@pytest.mark.parametrize("name", ["async_env", "preempt_stragglers",
                                  "eval_deterministic", "async_eval",
                                  "checkpoint_replay"])
@pytest.mark.parametrize("bad", ["False", 0, 1, None])
def test_a_switch_takes_true_or_false_only(name, bad):
    """`async_eval="False"` (a string) started the async evaluator."""
    with pytest.raises(ConfigError) as info:
        TrainerConfig(algorithm_ctor=PPOAlgorithm, **{name: bad})
    assert one_line(info.value) == (f"TrainerConfig.{name}={bad!r}; valid: "
                                     "True or False")


def test_world_size_is_not_a_gin_setting():
    with pytest.raises(ConfigError, match="world_size"):
        parse_config([], ["TrainerConfig.world_size = 2"])


# ---- former spellings -----------------------------------------------------
@pytest.fixture
def deprecations(monkeypatch, caplog):
    """The deprecation warnings logged (each process warns once: start
    afresh)."""
    monkeypatch.setattr(deprecation, "_warned", set())
    caplog.set_level(logging.WARNING)
    yield lambda: [r.getMessage() for r in caplog.records
                   if "deprecated" in r.getMessage()]
    gin.clear_config()


def test_mini_batch_size_still_works_and_warns_once(deprecations):
    parse_config([], ["TrainerConfig.algorithm_ctor = @PPOAlgorithm",
                      "TrainerConfig.mini_batch_size = 64"])
    assert TrainerConfig().minibatch_size == 64
    assert TrainerConfig().per_rank(2).local_minibatch_size == 32
    assert deprecations() == ["TrainerConfig.mini_batch_size is deprecated; "
                              "use TrainerConfig.minibatch_size"]


def test_num_updates_per_train_iter_sets_epochs_and_updates(deprecations):
    cfg = TrainerConfig(algorithm_ctor=PPOAlgorithm,
                        num_updates_per_train_iter=3)
    assert (cfg.num_epochs, cfg.num_updates_per_iter) == (3, 3)
    assert deprecations() == [
        "TrainerConfig.num_updates_per_train_iter is deprecated; use "
        "TrainerConfig.num_epochs (on-policy) or "
        "TrainerConfig.num_updates_per_iter (off-policy)"]


@pytest.mark.parametrize("former,new", [
    ("mini_batch_size", "minibatch_size"),
    ("num_updates_per_train_iter", "num_epochs"),
    ("num_updates_per_train_iter", "num_updates_per_iter")])
def test_former_and_new_spelling_together_is_one_line_error(former, new):
    with pytest.raises(ConfigError) as info:
        TrainerConfig(algorithm_ctor=PPOAlgorithm, **{former: 4, new: 8})
    msg = one_line(info.value)  # what the CLI prints (gin adds context)
    assert msg.startswith(f"TrainerConfig.{former} and its new spelling "
                          f"TrainerConfig."), msg
    assert f"TrainerConfig.{new}" in msg
    assert msg.endswith("are both set; keep only the new one"), msg


def test_a_saved_config_with_a_former_spelling_builds_the_same_run(
        deprecations):
    # config.gin lists every default too: minibatch_size = 256 beside the
    # former spelling must not count as giving both.
    parse_config(["ppo_cart_pole.gin"],
                 ["TrainerConfig.mini_batch_size = 64",
                  "TrainerConfig.num_updates_per_train_iter = 3",
                  "TrainerConfig.num_epochs = 10"])
    first = TrainerConfig()
    saved = gin.operative_config_str()
    assert "TrainerConfig.minibatch_size = 256" in saved
    parse_config([], [saved])
    assert TrainerConfig() == first
    assert (first.minibatch_size, first.num_epochs) == (64, 3)


@pytest.mark.parametrize("bad", [0, -3, 2.5, "20"])
def test_a_held_out_episode_count_that_is_not_positive_is_refused(bad):
    with pytest.raises(ConfigError, match=re.escape(
            f"TrainerConfig.num_held_out_eval_episodes={bad!r}; it must be "
            f"a positive integer or None")):
        TrainerConfig(algorithm_ctor=PPOAlgorithm,
                      num_held_out_eval_episodes=bad)
    assert TrainerConfig(algorithm_ctor=PPOAlgorithm,
                         num_held_out_eval_episodes=40
                         ).num_held_out_eval_episodes == 40


def test_settings_the_algorithms_kind_never_reads_are_named():
    """A gin file written for the other kind of algorithm trained without
    a word."""
    import gymnasium as gym

    from alf.algorithms.dqn_algorithm import DQNAlgorithm
    obs, act = gym.spaces.Box(-1, 1, (3, )), gym.spaces.Discrete(2)
    cfg = TrainerConfig(algorithm_ctor=PPOAlgorithm, num_envs=2,
                        unroll_length=4, minibatch_size=4,
                        num_updates_per_iter=7, replay_buffer_capacity=5)
    assert cfg.unused_settings(PPOAlgorithm(obs, act, cfg)) == [
        f"TrainerConfig.{name} does nothing for PPOAlgorithm (on-policy: "
        "num_epochs sets its updates, and it keeps no replay buffer)"
        for name in ("num_updates_per_iter=7", "replay_buffer_capacity=5")]
    cfg = TrainerConfig(algorithm_ctor=DQNAlgorithm, num_envs=2,
                        unroll_length=4, minibatch_size=4, num_epochs=3,
                        initial_collect_steps=8, replay_buffer_capacity=64)
    assert cfg.unused_settings(DQNAlgorithm(obs, act, cfg)) == [
        "TrainerConfig.num_epochs=3 does nothing for DQNAlgorithm "
        "(off-policy: num_updates_per_iter sets its updates)"]
    # The former spelling set both counts: neither is named.
    cfg = TrainerConfig(algorithm_ctor=PPOAlgorithm, num_envs=2,
                        unroll_length=4, minibatch_size=4, num_epochs=3,
                        num_updates_per_iter=3)
    assert cfg.unused_settings(PPOAlgorithm(obs, act, cfg)) == []
