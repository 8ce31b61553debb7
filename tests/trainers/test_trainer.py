"""In-process tests of alf/trainers/trainer.py: checkpoint/resume, NaN losses,
interruption (the CLI's Ctrl-C test is in tests/bin/test_train.py)."""
import functools
import glob
import math
import os

import gin
import gymnasium as gym
import numpy as np
import pytest
import torch

from alf.algorithms import PPOAlgorithm
from alf.algorithms.ppg_algorithm import PPGAlgorithm
from alf.trainers import Trainer, TrainerConfig, TrainingInterrupted
from alf.trainers.checkpointer import Checkpointer
from alf.trainers import seeds
from alf.trainers.collector import AsyncCollector
from alf.trainers.evaluator import read_eval_csv
from alf.trainers.reporting import Reporter
from alf.utils.errors import AlfError, TrainingError

SPI = 32  # env steps per iteration: 2 envs x 16 steps


@pytest.fixture(autouse=True)
def clean_gin():
    gin.clear_config()
    yield
    gin.clear_config()


def tiny_config(**kw) -> TrainerConfig:
    args = dict(algorithm_ctor=PPOAlgorithm, env_name="CartPole-v1",
                num_envs=2, unroll_length=16, minibatch_size=32,
                num_epochs=2, num_env_steps=4 * SPI,
                eval_interval=0, num_eval_episodes=2, summary_interval=2,
                checkpoint_interval=100, log_interval_seconds=1000.0)
    args.update(kw)
    return TrainerConfig(**args)


def ckpt_steps(root_dir):
    return sorted(int(os.path.basename(p)[5:-3])
                  for p in glob.glob(os.path.join(root_dir, "ckpt",
                                                  "ckpt-*.pt")))


def assert_same(a, b, where="state"):
    """Exact, recursive equality of nested dicts/lists of tensors."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), where
        assert a.dtype == b.dtype and a.shape == b.shape, where
        assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert set(a) == set(b), (where, set(a) ^ set(b))
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and math.isnan(a):
        assert isinstance(b, float) and math.isnan(b), where
    else:
        assert a == b, (where, a, b)


def snapshot_state(trainer):
    alg = trainer.algorithm
    return ({k: v.detach().clone() for k, v in alg.state_dict().items()},
            _clone(alg.optimizer_state_dict()),
            (trainer.iteration, trainer.env_steps,
             trainer._episodes.total_episodes))


def _clone(x):
    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    if isinstance(x, dict):
        return {k: _clone(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_clone(v) for v in x)
    return x


# ---- checkpoint -> resume -----------------------------------------------------
@pytest.mark.timeout(120)
def test_checkpoint_then_resume_restores_everything(tmp_path):
    root = str(tmp_path)
    first = Trainer(root, config=tiny_config())
    first.train()
    params, opt_state, counters = snapshot_state(first)
    rng = torch.get_rng_state()
    assert counters[:2] == (4, 4 * SPI)
    assert ckpt_steps(root) == [4 * SPI]
    assert any(len(s["state"]) for s in opt_state)  # Adam has moments

    second = Trainer(root, config=tiny_config(num_env_steps=8 * SPI))
    second._build()
    try:
        # Freshly built: different from the trained weights.
        fresh = second.algorithm.state_dict()
        assert any(not torch.equal(fresh[k], v) for k, v in params.items()
                   if v.is_floating_point())
        second._restore()
        p2, o2, c2 = snapshot_state(second)
        assert_same(params, p2, "algorithm")
        assert_same(opt_state, o2, "optimizers")
        assert c2 == counters
        assert second.env_steps_at_start == 4 * SPI
        assert torch.equal(second._rng_state, rng)
    finally:
        second._close()


@pytest.mark.timeout(120)
def test_resume_continues_to_larger_budget(tmp_path):
    root = str(tmp_path)
    Trainer(root, config=tiny_config()).train()
    t = Trainer(root, config=tiny_config(num_env_steps=6 * SPI))
    t.train()
    assert (t.iteration, t.env_steps) == (6, 6 * SPI)
    assert ckpt_steps(root) == [4 * SPI, 6 * SPI]
    # A run that has already finished does nothing.
    t = Trainer(root, config=tiny_config(num_env_steps=6 * SPI))
    assert t.train() == {}
    assert ckpt_steps(root) == [4 * SPI, 6 * SPI]


@pytest.mark.timeout(120)
def test_checkpoint_from_other_architecture_is_refused(tmp_path):
    root = str(tmp_path)
    Trainer(root, config=tiny_config()).train()
    other = tiny_config(num_env_steps=8 * SPI, env_name="Acrobot-v1")
    with pytest.raises(AlfError, match="does not fit"):
        Trainer(root, config=other).train()
    assert ckpt_steps(root) == [4 * SPI]


def test_resume_with_other_network_shapes_names_the_tensor(tmp_path):
    root = str(tmp_path)
    Trainer(root, config=tiny_config()).train()
    gin.bind_parameter("ActorDistributionNetwork.hidden_sizes", (32, 32))
    with pytest.raises(AlfError) as info:
        Trainer(root, config=tiny_config(num_env_steps=8 * SPI)).train()
    msg = str(info.value)
    assert "size mismatch for actor." in msg, msg
    assert "checkpoint [64, " in msg and "this config [32, " in msg, msg
    assert "\n" not in msg
    assert ckpt_steps(root) == [4 * SPI]


@pytest.mark.parametrize("content", [{"a": 1}, [1, 2], {
    "algorithm": {}, "optimizers": [], "counters": {"iteration": 1},
    "rng": {}}])
def test_checkpoint_with_wrong_structure_is_refused(tmp_path, content):
    os.makedirs(tmp_path / "ckpt")
    torch.save(content, tmp_path / "ckpt" / "ckpt-100.pt")
    with pytest.raises(AlfError, match="not a checkpoint of this trainer"):
        Trainer(str(tmp_path), config=tiny_config()).train()
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]  # nothing written


def _short_episodes(env_name, **kw):
    """CartPole cut at 20 steps: "held-out" evaluations that differ."""
    from alf.environments import suite_gym
    return suite_gym.load(env_name, max_episode_steps=20, **kw)


class _SeedLog(gym.Wrapper):
    """Notes every seed its environment is reset with."""

    seeds: list = []

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            _SeedLog.seeds.append(seed)
        return self.env.reset(seed=seed, options=options)


def _logged_short_episodes(env_name, **kw):
    return _short_episodes(env_name, wrappers=(_SeedLog, ), **kw)


def test_held_out_episodes_beyond_the_environments_play_in_rounds(tmp_path):
    # 5 held-out episodes with num_eval_episodes=2: two environments, and
    # each evaluation resets them with 5 consecutive seeds.
    _SeedLog.seeds.clear()
    cfg = tiny_config(eval_interval=2, held_out_env_load_fn=(
        _logged_short_episodes), num_held_out_eval_episodes=5)
    trainer = Trainer(str(tmp_path), config=cfg)
    trainer.train()
    assert trainer._held_out is not None
    assert trainer._held_out.num_episodes == 5
    assert len(trainer._held_out._envs) == 2
    first = seeds.eval_seed(cfg.seed)
    # Two evaluations (at 2 and 4 iterations), each from the same seeds.
    assert sorted(_SeedLog.seeds) == sorted(list(range(first, first + 5))
                                            * 2)
    held_out = read_eval_csv(os.path.join(str(tmp_path),
                                          "eval_held_out.csv"))
    assert held_out["env_steps"] == [2 * SPI, 4 * SPI]


def test_resume_from_older_checkpoint_keeps_eval_log_monotone(tmp_path):
    root = str(tmp_path)
    cfg = tiny_config(eval_interval=1, checkpoint_interval=2,
                      held_out_env_load_fn=_short_episodes)
    Trainer(root, config=cfg).train()
    os.remove(os.path.join(root, "ckpt", f"ckpt-{4 * SPI}.pt"))
    Trainer(root, config=cfg).train()  # from iteration 2
    steps = [SPI, 2 * SPI, 3 * SPI, 4 * SPI]
    with open(os.path.join(root, "eval.csv")) as f:
        assert [int(line.split(",")[0]) for line in f.readlines()[1:]] == \
            steps
    aside = glob.glob(os.path.join(root, "eval-discarded-*.csv"))
    assert len(aside) == 1
    assert read_eval_csv(aside[0])["env_steps"] == steps[2:]
    # The held-out evaluations: their own file, set aside the same way.
    held_out = read_eval_csv(os.path.join(root, "eval_held_out.csv"))
    assert held_out["env_steps"] == steps
    assert max(held_out["average_episode_length"]) <= 20
    aside = glob.glob(os.path.join(root, "eval_held_out-discarded-*.csv"))
    assert len(aside) == 1
    assert read_eval_csv(aside[0])["env_steps"] == steps[2:]
    # TensorBoard shows each step once too: the resumed run's writers purge
    # the first run's events after the checkpoint.
    from tensorboard.backend.event_processing.event_accumulator import \
        EventAccumulator
    ea = EventAccumulator(os.path.join(root, "eval"))
    ea.Reload()
    assert [e.step for e in ea.Scalars("eval/average_return")] == steps
    ea = EventAccumulator(os.path.join(root, "eval_held_out"))
    ea.Reload()
    assert [e.step for e in ea.Scalars("eval_held_out/average_return")] == \
        steps


def test_restart_before_any_checkpoint_sets_all_evaluations_aside(tmp_path):
    """A run that failed before its first checkpoint starts afresh: its
    evaluations all belong to the discarded history."""
    root = str(tmp_path)
    cfg = tiny_config(eval_interval=1, checkpoint_interval=100)
    Trainer(root, config=cfg).train()
    for path in glob.glob(os.path.join(root, "ckpt", "*.pt")):
        os.remove(path)
    Trainer(root, config=cfg).train()
    from alf.trainers.evaluator import read_eval_csv
    steps = [SPI, 2 * SPI, 3 * SPI, 4 * SPI]
    assert read_eval_csv(os.path.join(root, "eval.csv"))["env_steps"] == steps
    aside = glob.glob(os.path.join(root, "eval-discarded-*.csv"))
    assert len(aside) == 1 and read_eval_csv(aside[0])["env_steps"] == steps


def test_full_disk_while_writing_eval_csv_is_one_line(tmp_path, monkeypatch):
    import errno

    from alf.trainers import reporting

    def full(root_dir, env_steps, metrics, name="eval.csv"):
        raise OSError(errno.ENOSPC, "No space left on device",
                      os.path.join(root_dir, "eval.csv"))

    monkeypatch.setattr(reporting, "append_eval_csv", full)
    with pytest.raises(TrainingError) as info:
        Trainer(str(tmp_path), config=tiny_config(eval_interval=1)).train()
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith(f"cannot write {tmp_path}/eval.csv: No space left "
                          "on device ("), msg
    # Evaluated before the first checkpoint: none is said to be intact.
    assert "bytes free" in msg and "no checkpoint was saved yet" in msg
    assert msg.endswith("run the same command to start again"), msg


# ---- NaN loss -----------------------------------------------------------------
NAN_ENV_ID = "AlfTestNanReward-v0"
NAN_AFTER = 40  # steps of one environment; iteration 3 covers steps 33..48


class NanRewardEnv(gym.Env):
    """Reward 1 for ``nan_after`` steps (over all episodes), then NaN."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4, ), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, nan_after=NAN_AFTER, episode_length=10):
        self._nan_after = nan_after
        self._episode_length = episode_length
        self._total = 0
        self._t = 0

    def _obs(self):
        return self.np_random.uniform(-1, 1, 4).astype(np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return self._obs(), {}

    def step(self, action):
        self._t += 1
        self._total += 1
        reward = float("nan") if self._total > self._nan_after else 1.0
        return (self._obs(), reward, self._t >= self._episode_length, False,
                {})


if NAN_ENV_ID not in gym.registry:
    gym.register(id=NAN_ENV_ID, entry_point=NanRewardEnv)


@pytest.mark.timeout(120)
def test_nan_loss_raises_and_writes_no_later_checkpoint(tmp_path):
    root = str(tmp_path)
    cfg = tiny_config(env_name=NAN_ENV_ID, num_env_steps=10 * SPI,
                      checkpoint_interval=1, summary_interval=1)
    trainer = Trainer(root, config=cfg)
    with pytest.raises(TrainingError) as info:
        trainer.train()
    msg = str(info.value)
    assert "iteration 3" in msg, msg
    assert "non-finite" in msg
    assert "\n" not in msg
    # Checkpoints of iterations 1 and 2 (before the NaN), none after.
    steps = ckpt_steps(root)
    assert steps == [SPI, 2 * SPI]
    assert max(steps) < 3 * SPI
    state = Checkpointer.load(Checkpointer(os.path.join(root, "ckpt"))
                              .latest())
    assert state["counters"]["iteration"] == 2
    for name, value in state["algorithm"].items():
        if value.is_floating_point():
            assert torch.isfinite(value).all(), name
    assert not os.path.exists(os.path.join(root, "eval.csv"))


# ---- interruption (KeyboardInterrupt raised in-process) -------------------
def interrupting(method: str, at_call: int):
    """An algorithm_ctor: PPO whose ``method`` raises KeyboardInterrupt on
    its ``at_call``-th call."""

    def ctor(**kwargs):
        alg = PPOAlgorithm(**kwargs)
        original = getattr(alg, method)
        calls = [0]

        def wrapped(*args, **kw):
            calls[0] += 1
            if calls[0] == at_call:
                raise KeyboardInterrupt
            return original(*args, **kw)

        setattr(alg, method, wrapped)
        return alg

    return ctor


def _interrupt(root, method, at_call):
    cfg = tiny_config(algorithm_ctor=interrupting(method, at_call),
                      num_env_steps=10 * SPI)
    with pytest.raises(TrainingInterrupted) as info:
        Trainer(root, config=cfg).train()
    steps = ckpt_steps(root)
    assert len(steps) == 1
    path = os.path.join(root, "ckpt", f"ckpt-{steps[0]}.pt")
    assert path in str(info.value)
    return Checkpointer.load(path)["counters"]


@pytest.mark.timeout(120)
def test_interrupt_during_unroll_saves_consistent_counters(tmp_path):
    # rollout_step is called 16 times per iteration: call 40 is in iteration 3.
    counters = _interrupt(str(tmp_path), "rollout_step", 40)
    assert counters["iteration"] == 2
    assert counters["env_steps"] == 2 * SPI


@pytest.mark.timeout(120)
def test_interrupt_during_train_iter_saves_consistent_counters(tmp_path):
    # The first Ctrl-C only requests a stop at the end of the iteration; a
    # second one (or any KeyboardInterrupt) raises wherever the loop is.
    counters = _interrupt(str(tmp_path), "train_iter", 3)
    assert counters["env_steps"] == counters["iteration"] * SPI


@pytest.mark.timeout(120)
@pytest.mark.parametrize("segment_length", [None, 4])
def test_async_ppg_publishes_its_policy_before_the_auxiliary_phase(
        tmp_path, monkeypatch, segment_length):
    """An iteration with PPG's auxiliary phase publishes its version twice:
    when the policy phase is done (collection need not wait for the
    auxiliary phase) and, the same version, with the final weights. So
    with segments (which any actor fills) of a quarter unroll."""
    published = []
    publish = AsyncCollector.publish

    def recording(self, version):
        published.append(version)
        publish(self, version)
    monkeypatch.setattr(AsyncCollector, "publish", recording)
    ppg = functools.partial(PPGAlgorithm, aux_interval=2, aux_epochs=1,
                            aux_minibatch_size=32)
    trainer = Trainer(str(tmp_path), config=tiny_config(
        algorithm_ctor=ppg, unroll_mode="async",
        segment_length=segment_length))
    trainer.train()
    assert published == [1, 2, 2, 3, 4, 4]
    assert trainer.env_steps == 4 * SPI


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["stop", "checkpoint_interval"])
def test_a_checkpoint_counts_every_episode(tmp_path, monkeypatch, how):
    """Before, the episodes were counted when summaries were written: a
    checkpoint between them (sac_pendulum.gin writes summaries every 500
    iterations) missed those since, and a stop lost their statistics."""
    from alf.trainers.episode_stats import EpisodeStats
    counted = []
    record = EpisodeStats._record

    def counting(self, rets, lens, info):
        counted.append(len(rets))
        return record(self, rets, lens, info)

    monkeypatch.setattr(EpisodeStats, "_record", counting)
    trainer = Trainer(str(tmp_path), config=tiny_config(
        summary_interval=100, num_env_steps=100 * SPI,
        checkpoint_interval=5 if how == "checkpoint_interval" else 100))
    progress = Reporter.log_progress

    def stop_at_5(self, iteration, env_steps, final):
        if iteration == 5:
            trainer.request_stop()
        return progress(self, iteration, env_steps, final)

    monkeypatch.setattr(Reporter, "log_progress", stop_at_5)
    with pytest.raises(TrainingInterrupted):
        trainer.train()
    assert ckpt_steps(str(tmp_path)) == [5 * SPI]
    state = Checkpointer.load(os.path.join(str(tmp_path), "ckpt",
                                           f"ckpt-{5 * SPI}.pt"))
    assert state["counters"]["episodes"] == sum(counted) > 0


# ---- the evaluation a resumed run owes --------------------------------------
def _scripted_evaluations(monkeypatch, trainer_ref, returns, stop_at=()):
    """Evaluations that score ``returns[n - 1]`` at the n-th call (from
    1); those in ``stop_at`` are stopped, as by a Ctrl-C while rank 0
    evaluates."""
    import alf.trainers.trainer as trainer_module
    from alf.trainers.evaluator import EvaluationStopped
    calls = []

    def evaluate(evaluators, algorithm, should_stop=None):
        calls.append(1)
        if len(calls) in stop_at:
            trainer_ref[0].request_stop()
            raise EvaluationStopped()
        return [{"average_return": returns[len(calls) - 1],
                 "average_episode_length": 10.0}]

    monkeypatch.setattr(trainer_module, "evaluate_together", evaluate)
    return calls


def _train(root, trainer_ref, **kw):
    trainer_ref[0] = Trainer(root, config=tiny_config(
        eval_interval=1, checkpoint_interval=1, num_env_steps=4 * SPI, **kw))
    return trainer_ref[0].train()


@pytest.mark.timeout(120)
def test_a_stop_during_the_owed_evaluation_leaves_no_gap(tmp_path,
                                                         monkeypatch):
    """Before, the resumed run trained an iteration after the stopped
    make-up evaluation and checkpointed past it: no later run owed it, and
    eval.csv kept a gap at that step."""
    root, ref = str(tmp_path), [None]
    _scripted_evaluations(monkeypatch, ref, [1.0] * 20, stop_at=(2, 3))
    with pytest.raises(TrainingInterrupted):  # stopped evaluating at 64
        _train(root, ref)
    assert ckpt_steps(root)[-1] == 2 * SPI
    with pytest.raises(TrainingInterrupted):  # stopped making it up
        _train(root, ref)
    assert ckpt_steps(root)[-1] == 2 * SPI  # trained nothing after it
    _train(root, ref)
    steps = read_eval_csv(os.path.join(root, "eval.csv"))["env_steps"]
    assert steps == [SPI, 2 * SPI, 3 * SPI, 4 * SPI]


@pytest.mark.timeout(120)
def test_a_failed_owed_evaluation_is_agreed_saved_and_still_owed(
        tmp_path, monkeypatch):
    """Before, an evaluation failure in the make-up evaluation escaped on
    rank 0 alone (the other ranks then died in their collective), saying
    nothing of the checkpoint; now it ends every rank as after an
    iteration, and the next run still owes the evaluation."""
    import alf.trainers.trainer as trainer_module
    from alf.trainers.async_evaluator import EvaluationError
    root, ref = str(tmp_path), [None]
    _scripted_evaluations(monkeypatch, ref, [1.0] * 20, stop_at=(2, ))
    with pytest.raises(TrainingInterrupted):  # stopped evaluating at 64
        _train(root, ref)

    def failing(evaluators, algorithm, should_stop=None):
        raise EvaluationError("evaluation environment 0's worker died")
    monkeypatch.setattr(trainer_module, "evaluate_together", failing)
    with pytest.raises(EvaluationError) as info:
        _train(root, ref)
    assert str(info.value) == (
        f"evaluation environment 0's worker died; the checkpoint at "
        f"{2 * SPI} env steps (the last complete iteration) is saved, and "
        "a restart resumes from it"), info.value
    assert ckpt_steps(root)[-1] == 2 * SPI  # trained nothing after it
    _scripted_evaluations(monkeypatch, ref, [1.0] * 20)
    _train(root, ref)
    steps = read_eval_csv(os.path.join(root, "eval.csv"))["env_steps"]
    assert steps == [SPI, 2 * SPI, 3 * SPI, 4 * SPI]


@pytest.mark.timeout(120)
def test_a_failed_final_evaluation_says_a_restart_evaluates_it(
        tmp_path, monkeypatch):
    """Before, it said that a restart "resumes" the finished run, which
    only evaluates."""
    import alf.trainers.trainer as trainer_module
    from alf.trainers.async_evaluator import EvaluationError
    root, ref = str(tmp_path), [None]
    calls = _scripted_evaluations(monkeypatch, ref, [1.0] * 20)
    evaluate = trainer_module.evaluate_together

    def failing_last(evaluators, algorithm, should_stop=None):
        if len(calls) == 3:
            raise EvaluationError("the evaluator died")
        return evaluate(evaluators, algorithm, should_stop)
    monkeypatch.setattr(trainer_module, "evaluate_together", failing_last)
    with pytest.raises(EvaluationError) as info:
        _train(root, ref)
    assert str(info.value) == (
        f"the evaluator died; the final checkpoint, at {4 * SPI} env "
        "steps, is saved, and a restart evaluates it"), info.value
    monkeypatch.setattr(trainer_module, "evaluate_together", evaluate)
    assert _train(root, ref)["average_return"] == 1.0
    assert len(calls) == 4  # the final evaluation, and no training
    steps = read_eval_csv(os.path.join(root, "eval.csv"))["env_steps"]
    assert steps == [SPI, 2 * SPI, 3 * SPI, 4 * SPI]


@pytest.mark.timeout(120)
def test_the_owed_evaluations_best_holds_the_weights_it_evaluated(
        tmp_path, monkeypatch):
    """Before, best.pt was written after the next iteration, with its
    weights, under the owed evaluation's score and step."""
    root, ref = str(tmp_path), [None]
    # 64's evaluation is stopped; made up on resume, it is the best.
    _scripted_evaluations(monkeypatch, ref, [1.0, None, 9.0, 2.0, 3.0],
                          stop_at=(2, ))
    with pytest.raises(TrainingInterrupted):
        _train(root, ref)
    _train(root, ref)
    ckpt = Checkpointer(os.path.join(root, "ckpt"))
    best = ckpt.best()
    assert (best["env_steps"], best["value"]) == (2 * SPI, 9.0)
    assert_same(ckpt.load(best["path"])["algorithm"],
                ckpt.load(ckpt.saved()[2 * SPI])["algorithm"], "best.pt")


@pytest.mark.timeout(120)
def test_a_stop_after_the_final_evaluation_finishes_the_run(tmp_path,
                                                           monkeypatch):
    """Before: exit 143 and "run the same command to resume" for a run
    that was finished."""
    trainer = Trainer(str(tmp_path), config=tiny_config())
    ends = []
    real = Reporter.log_progress

    def log_progress(self, iteration, env_steps, final):
        if final:
            trainer.request_stop(15)  # arrives after the final evaluation
            ends.append(final)
        return real(self, iteration, env_steps, final)

    monkeypatch.setattr(Reporter, "log_progress", log_progress)
    trainer.train()  # no TrainingInterrupted
    assert ends == [True] and trainer.env_steps == 4 * SPI
    assert ckpt_steps(str(tmp_path))[-1] == 4 * SPI
    steps = read_eval_csv(os.path.join(str(tmp_path), "eval.csv"))
    assert steps["env_steps"][-1] == 4 * SPI


@pytest.mark.timeout(120)
def test_a_stop_during_the_final_evaluation_is_made_up_when_run_again(
        tmp_path, monkeypatch):
    """Before, the final evaluation ignored a stop: a calibrating one
    outlasts a scheduler's grace, and the SIGKILL that followed lost the
    training since the last checkpoint."""
    root, ref = str(tmp_path), [None]
    calls = _scripted_evaluations(monkeypatch, ref,
                                  [1.0, 2.0, 3.0, None, 9.0], stop_at=(4, ))
    with pytest.raises(TrainingInterrupted, match="final evaluation at 128 "
                       "env steps was stopped.*run the same command to "
                       "evaluate it"):
        _train(root, ref)
    assert ckpt_steps(root)[-1] == 4 * SPI
    metrics = _train(root, ref)  # evaluates, trains nothing
    assert metrics["average_return"] == 9.0 and len(calls) == 5
    assert ref[0].env_steps == 4 * SPI
    evals = read_eval_csv(os.path.join(root, "eval.csv"))
    assert evals["env_steps"] == [SPI, 2 * SPI, 3 * SPI, 4 * SPI]
    best = Checkpointer(os.path.join(root, "ckpt")).best()
    assert (best["env_steps"], best["value"]) == (4 * SPI, 9.0)
    assert _train(root, ref) == {} and len(calls) == 5  # nothing owed now


@pytest.mark.timeout(120)
def test_a_stop_after_the_finished_runs_evaluation_keeps_its_best(
        tmp_path, monkeypatch):
    """Before, a stop that came as the finished run's evaluation was
    recorded skipped best.pt: the row was in eval.csv, the run finished,
    and no later run wrote it."""
    root, ref = str(tmp_path), [None]
    _scripted_evaluations(monkeypatch, ref, [1.0, 2.0, 3.0], stop_at=(4, ))
    with pytest.raises(TrainingInterrupted):
        _train(root, ref)
    import alf.trainers.trainer as trainer_module

    def evaluate_then_stop(evaluators, algorithm, should_stop=None):
        ref[0].request_stop()  # comes as the evaluation ends
        return [{"average_return": 9.0, "average_episode_length": 10.0}]

    monkeypatch.setattr(trainer_module, "evaluate_together",
                        evaluate_then_stop)
    assert _train(root, ref)["average_return"] == 9.0
    best = Checkpointer(os.path.join(root, "ckpt")).best()
    assert (best["env_steps"], best["value"]) == (4 * SPI, 9.0)


@pytest.mark.timeout(120)
def test_an_owed_asynchronous_evaluation_is_waited_for(tmp_path,
                                                       monkeypatch):
    """The make-up evaluation ends before the resumed run trains with
    asynchronous evaluation too: before, it was only submitted, and a stop
    before its result lost it for good (the checkpoint then newest did
    not owe it)."""
    root, ref = str(tmp_path), [None]
    _scripted_evaluations(monkeypatch, ref, [1.0] * 4, stop_at=(2, ))
    with pytest.raises(TrainingInterrupted):
        _train(root, ref)
    monkeypatch.undo()
    seen = []
    iterate = Trainer._iterate

    def first_iteration(self):
        if not seen:
            seen.append(read_eval_csv(os.path.join(
                root, "eval.csv"))["env_steps"])
        return iterate(self)

    monkeypatch.setattr(Trainer, "_iterate", first_iteration)
    _train(root, ref, async_eval=True)
    assert seen == [[SPI, 2 * SPI]]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("final", [False, True])
def test_a_rank_killed_while_evaluating_keeps_the_iteration(
        tmp_path, monkeypatch, final):
    """The checkpoint due with an evaluation is written before it: before,
    a rank killed during a long evaluation lost the training since the
    previous checkpoint (here, crashing in it stands in for a SIGKILL)."""
    import alf.trainers.trainer as trainer_module
    root = str(tmp_path)
    cfg = dict(eval_interval=2, checkpoint_interval=2, num_env_steps=4 * SPI)
    real = trainer_module.evaluate_together
    calls = []

    def crashing(evaluators, algorithm, should_stop=None):
        calls.append(1)
        if len(calls) == (2 if final else 1):
            raise RuntimeError("killed")
        return real(evaluators, algorithm, should_stop)

    monkeypatch.setattr(trainer_module, "evaluate_together", crashing)
    with pytest.raises(RuntimeError, match="killed"):
        Trainer(root, config=tiny_config(**cfg)).train()
    crashed_at = 4 * SPI if final else 2 * SPI
    assert ckpt_steps(root) == ([2 * SPI] if final else []) + [crashed_at]
    trainer = Trainer(root, config=tiny_config(**cfg))
    trainer.train()  # evaluates the step it owes first
    assert trainer.env_steps_at_start == crashed_at
    evals = read_eval_csv(os.path.join(root, "eval.csv"))
    assert evals["env_steps"] == [2 * SPI, 4 * SPI]


# ---- a collection that fails --------------------------------------------------
def _failing_collect(monkeypatch, trainer_ref, at_unroll, stop=False):
    """AsyncCollector.collect raises as for a dead actor at ``at_unroll``
    (after asking for a stop, with ``stop``)."""
    from alf.trainers.collector import CollectionError
    collect = AsyncCollector.collect

    def failing(self):
        if self._next == at_unroll:
            if stop:
                trainer_ref[0].request_stop()
            raise CollectionError("actor 1 (environment 1 of this process) "
                                  "was killed by SIGKILL (exit -9; out of memory?)")
        return collect(self)
    monkeypatch.setattr(AsyncCollector, "collect", failing)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("at_unroll", [3, 0])
def test_a_failed_collection_saves_the_last_complete_iteration(
        tmp_path, monkeypatch, at_unroll):
    """Before the first iteration nothing is saved, and it says so."""
    from alf.trainers.collector import CollectionError
    trainer = Trainer(str(tmp_path), config=tiny_config(
        unroll_mode="async", num_env_steps=10 * SPI))
    _failing_collect(monkeypatch, [trainer], at_unroll=at_unroll)
    with pytest.raises(CollectionError) as info:
        trainer.train()
    said = str(info.value)
    assert said.startswith("actor 1 (environment 1 of this process) was "
                           "killed by SIGKILL (exit -9; out of memory?); "), said
    if at_unroll:
        assert f"the checkpoint at {3 * SPI} env steps" in said, said
        assert ckpt_steps(str(tmp_path)) == [3 * SPI]
        counters = Checkpointer.load(os.path.join(
            str(tmp_path), "ckpt", f"ckpt-{3 * SPI}.pt"))["counters"]
        assert counters["iteration"] == 3, counters
    else:
        assert said.endswith("no iteration had completed, so no "
                             "checkpoint was saved"), said
        assert ckpt_steps(str(tmp_path)) == []


@pytest.mark.timeout(120)
def test_a_stop_whose_iteration_failed_stops_with_the_iteration_before(
        tmp_path, monkeypatch):
    """A stop signal that also reached an actor's environment (a group's
    SIGTERM) is still the stop asked for: its checkpoint is the last
    complete iteration's."""
    ref: list = []
    trainer = Trainer(str(tmp_path), config=tiny_config(
        unroll_mode="async", num_env_steps=10 * SPI))
    ref.append(trainer)
    _failing_collect(monkeypatch, ref, at_unroll=2, stop=True)
    with pytest.raises(TrainingInterrupted) as info:
        trainer.train()
    assert f"stopped at {2 * SPI} env steps" in str(info.value), info.value
    assert ckpt_steps(str(tmp_path)) == [2 * SPI]


@pytest.mark.timeout(120)
def test_an_actor_dead_while_the_learner_trains_costs_no_iteration(
        tmp_path, monkeypatch):
    """Publishing to a dead actor completes the iteration (before, it
    failed half-way, trained but not counted, and nothing was saved); the
    next unroll says the actor died, and the iteration is saved."""
    from alf.trainers.collector import CollectionError
    ref: list = []
    train_iter = PPOAlgorithm.train_iter

    def killing(self, progress):
        stats = train_iter(self, progress)
        if ref[0].iteration == 2:
            proc = ref[0]._collector._procs[1]
            proc.kill()
            proc.join()
        return stats
    monkeypatch.setattr(PPOAlgorithm, "train_iter", killing)
    trainer = Trainer(str(tmp_path), config=tiny_config(
        unroll_mode="async", num_env_steps=10 * SPI))
    ref.append(trainer)
    with pytest.raises(CollectionError) as info:
        trainer.train()
    assert "actor 1" in str(info.value) and "SIGKILL" in str(info.value)
    # Iteration 3, or 4 if the actor had sent its part of the next unroll
    # (collection runs an unroll ahead) before it died.
    steps = ckpt_steps(str(tmp_path))
    assert len(steps) == 1 and steps[0] in (3 * SPI, 4 * SPI), steps
    assert f"the checkpoint at {steps[0]} env steps" in str(info.value)


@pytest.mark.timeout(120)
def test_a_dead_environment_worker_saves_what_a_regular_checkpoint_would(
        tmp_path, monkeypatch):
    """Lock-step collection: a worker that dies fails the unroll half-way;
    the checkpoint saved then is the last complete iteration's, equal to
    the one a run without the failure saves there: its RNG (so that
    resuming from it is exact) and its observation normaliser, without
    the half unroll's observations."""
    from alf.trainers.collector import CollectionError
    ref: list = []
    rollout_step = PPOAlgorithm.rollout_step
    calls = [0]

    def killing(self, obs):
        calls[0] += 1
        if ref and calls[0] == 2 * 16 + 8:  # half-way through unroll 3
            worker = ref[0]._collector._env._env.processes[1]
            worker.kill()
            worker.join()
        return rollout_step(self, obs)
    monkeypatch.setattr(PPOAlgorithm, "rollout_step", killing)
    ppo = functools.partial(PPOAlgorithm, normalize_observations=True)
    failed = Trainer(str(tmp_path / "failed"), config=tiny_config(
        algorithm_ctor=ppo, async_env=True, num_env_steps=10 * SPI))
    ref.append(failed)
    with pytest.raises(CollectionError) as info:
        failed.train()
    assert str(info.value).startswith(
        "training environment worker 1 of 2 was killed by SIGKILL")
    assert f"the checkpoint at {2 * SPI} env steps" in str(info.value)
    assert ckpt_steps(str(tmp_path / "failed")) == [2 * SPI]
    ref.clear()
    Trainer(str(tmp_path / "regular"), config=tiny_config(
        algorithm_ctor=ppo, async_env=True, num_env_steps=2 * SPI)).train()
    got, want = (Checkpointer.load(os.path.join(
        str(tmp_path / name), "ckpt", f"ckpt-{2 * SPI}.pt"))
        for name in ("failed", "regular"))
    for key in ("algorithm", "optimizers", "rng"):
        assert_same(got[key], want[key], key)
    assert got["counters"]["iteration"] == want["counters"]["iteration"]


@pytest.mark.timeout(120)
def test_a_stop_does_not_wait_forever_for_a_stopped_actor(
        tmp_path, monkeypatch, caplog):
    """An actor that sends nothing (SIGSTOP here, a hung simulator on a
    cluster) held a stopping run in its unroll until a second signal; now
    the stop waits `StallWatch.stop_limit` (5 s here), then saves the last
    complete iteration, naming the actor."""
    import signal
    import threading
    import time

    ref: list = []
    train_iter = PPOAlgorithm.train_iter
    asked: list = []

    def stopping(self, progress):
        stats = train_iter(self, progress)
        if ref[0].iteration == 2:  # collection waits for each version
            os.kill(ref[0]._collector._procs[1].pid, signal.SIGSTOP)
            threading.Timer(0.5, lambda: (asked.append(time.monotonic()),
                                          ref[0].request_stop(
                                              signal.SIGTERM))).start()
        return stats
    monkeypatch.setattr(PPOAlgorithm, "train_iter", stopping)
    trainer = Trainer(str(tmp_path), config=tiny_config(
        unroll_mode="async", max_policy_lag=0, num_env_steps=100 * SPI))
    ref.append(trainer)
    with pytest.raises(TrainingInterrupted) as info:
        trainer.train()
    assert 4.5 < time.monotonic() - asked[0] < 30, "the stop's wait"
    assert f"stopped at {3 * SPI} env steps" in str(info.value)
    assert ckpt_steps(str(tmp_path)) == [3 * SPI]
    assert ("SIGTERM: the unroll did not come within 5 s of the stop "
            "(twice the slowest so far, at least 5 s); actor 1 (environment "
            "1 of this process) has sent nothing for") in caplog.text, \
        caplog.text
    assert "is stopped (SIGSTOP" in caplog.text, caplog.text


@pytest.mark.timeout(120)
def test_a_stop_gives_up_a_first_reset_that_a_worker_holds(
        tmp_path, monkeypatch):
    """A worker that never answers the environments' first reset (SIGSTOP
    here, a simulator hung loading its engine) held a stopping run until a
    second signal; now the stop gives the reset up after
    `StallWatch.stop_limit` (5 s) and the run ends before its first
    iteration, naming the worker, the resumed checkpoint untouched."""
    import signal
    import threading
    import time

    from alf.trainers.collector import SyncCollector
    root = str(tmp_path)
    Trainer(root, config=tiny_config(async_env=True,
                                     num_env_steps=SPI)).train()
    saved = os.path.join(root, "ckpt", f"ckpt-{SPI}.pt")
    mtime = os.stat(saved).st_mtime_ns
    start, asked, pids = SyncCollector.start, [], []

    def hung(self, *args, **kwargs):
        pids.extend(self._env.worker_pids)
        os.kill(pids[1], signal.SIGSTOP)
        threading.Timer(0.5, lambda: (asked.append(time.monotonic()),
                                      trainer.request_stop(
                                          signal.SIGTERM))).start()
        return start(self, *args, **kwargs)
    monkeypatch.setattr(SyncCollector, "start", hung)
    trainer = Trainer(root, config=tiny_config(async_env=True,
                                               num_env_steps=4 * SPI))
    with pytest.raises(TrainingInterrupted) as info:
        trainer.train()
    assert 4.5 < time.monotonic() - asked[0] < 30, "the stop's wait"
    assert str(info.value).startswith(
        "SIGTERM: the environments' step (or reset) did not come within 5 "
        "s of the stop (twice the slowest so far, at least 5 s); training "
        "environment worker 1 of 2 has sent nothing for "), info.value
    assert str(info.value).endswith(
        f"; stopped before the first iteration: the checkpoint at {SPI} env "
        "steps is as it was; run the same command to resume"), info.value
    assert info.value.exit_code == 128 + signal.SIGTERM
    assert ckpt_steps(root) == [SPI]
    assert os.stat(saved).st_mtime_ns == mtime
    for pid in pids:  # the given-up environment was killed at close
        assert not os.path.exists(f"/proc/{pid}") or open(
            f"/proc/{pid}/stat").read().split()[2] == "Z", pid


def test_a_first_reset_that_raises_says_whose_and_saves_nothing(
        tmp_path, monkeypatch):
    from alf.trainers.collector import CollectionError, SyncCollector
    start = SyncCollector.start

    def raising(self, *args, **kwargs):
        def refused(*a, **k):
            raise ValueError("no map today")
        self._env._env.reset = refused
        return start(self, *args, **kwargs)
    monkeypatch.setattr(SyncCollector, "start", raising)
    with pytest.raises(CollectionError) as info:
        Trainer(str(tmp_path), config=tiny_config()).train()
    assert str(info.value) == (
        "an in-process environment of training raised ValueError: no map "
        "today (its traceback is logged above); before the first iteration: "
        "nothing had been trained or saved, and a restart starts afresh")
    assert ckpt_steps(str(tmp_path)) == []


def _first_reset_held_in_rank_1(rank, root):
    import signal

    from alf.trainers.collector import SyncCollector
    start = SyncCollector.start

    def held(self, *args, **kwargs):
        if rank == 1:
            os.kill(self._env.worker_pids[0], signal.SIGSTOP)
        return start(self, *args, **kwargs)
    SyncCollector.start = held
    Trainer(root, config=tiny_config(async_env=True)).train()


@pytest.mark.timeout(120)
def test_a_first_reset_that_a_stopped_worker_holds_ends_every_rank(
        tmp_path):
    """Rank 0 waited in its first collective for rank 1, whose first reset
    a stopped worker held, until the collective timed out; now rank 1
    gives the reset up and every rank ends with the same line."""
    from distributed_harness import errors, run_ranks
    said = errors(run_ranks(_first_reset_held_in_rank_1, str(tmp_path),
                            timeout=60), "CollectionError")
    assert said[0] == said[1], said
    assert said[0].startswith(
        "rank 1's training environment worker 0 of 1 has sent nothing for "
        ), said[0]
    assert said[0].endswith(
        ": rank 1's unroll cannot come, and the other ranks would wait for "
        "it until their collectives time out; before the first iteration: "
        "nothing had been trained or saved, and a restart starts afresh"), \
        said[0]
    assert ckpt_steps(str(tmp_path)) == []


@pytest.mark.timeout(120)
@pytest.mark.parametrize("where", ["collection", "evaluation"])
def test_an_environment_that_raises_costs_no_iteration(tmp_path,
                                                       monkeypatch, where):
    """An in-process environment's exception (a simulator's own failure)
    ended training with a traceback and nothing saved since the last due
    checkpoint; now, as for a worker that died, the last complete
    iteration is saved and a restart resumes from it, the environment's
    traceback logged."""
    from alf.trainers import trainer as trainer_module
    from alf.trainers.async_evaluator import EvaluationError
    from alf.trainers.collector import CollectionError
    evaluate, ref = trainer_module.evaluate_together, []

    def raising(*args):
        raise ValueError("physics exploded")

    def failing_evaluation(evaluators, algorithm, should_stop=None):
        evaluators[0]._envs[1]._env.step = raising
        return evaluate(evaluators, algorithm, should_stop)
    train_iter = PPOAlgorithm.train_iter

    def failing_collection(self, progress):
        if ref[0].iteration == 1:
            ref[0]._collector._env._env.step = raising
        return train_iter(self, progress)
    if where == "evaluation":
        monkeypatch.setattr(trainer_module, "evaluate_together",
                            failing_evaluation)
    else:
        monkeypatch.setattr(PPOAlgorithm, "train_iter", failing_collection)
    trainer = Trainer(str(tmp_path), config=tiny_config(
        eval_interval=2, num_env_steps=10 * SPI))
    ref.append(trainer)
    with pytest.raises(EvaluationError if where == "evaluation"
                       else CollectionError) as info:
        trainer.train()
    said = ("evaluation environment 1" if where == "evaluation" else
            "an in-process environment of training")
    assert str(info.value) == (
        f"{said} raised ValueError: physics exploded (its traceback is "
        f"logged above); the checkpoint at {2 * SPI} env steps (the last "
        "complete iteration) is saved, and a restart resumes from it")
    assert ckpt_steps(str(tmp_path)) == [2 * SPI]


@pytest.mark.timeout(120)
def test_a_dead_evaluation_worker_costs_no_iteration(tmp_path, monkeypatch):
    """Rank 0's evaluation environments in subprocesses: a worker that
    dies during an evaluation ends the run after the iteration is saved
    (it was not due), and names it as the evaluation's."""
    from alf.trainers import trainer as trainer_module
    from alf.trainers.async_evaluator import EvaluationError
    evaluate = trainer_module.evaluate_together

    def killing(evaluators, algorithm, should_stop=None):
        worker = evaluators[0]._envs[0]._env.processes[0]
        worker.kill()
        worker.join()
        return evaluate(evaluators, algorithm, should_stop)
    monkeypatch.setattr(trainer_module, "evaluate_together", killing)
    with pytest.raises(EvaluationError) as info:
        Trainer(str(tmp_path), config=tiny_config(
            async_env=True, eval_interval=2,
            num_env_steps=10 * SPI)).train()
    assert str(info.value).startswith(
        "evaluation environment 0's worker was killed by SIGKILL")
    assert f"the checkpoint at {2 * SPI} env steps" in str(info.value)
    assert ckpt_steps(str(tmp_path)) == [2 * SPI]


def test_a_setting_that_does_nothing_in_this_run_is_warned_of(tmp_path,
                                                               caplog):
    """PPG's aux_interval longer than the run: it trained as PPO without a
    word."""
    import logging
    ppg = functools.partial(PPGAlgorithm, aux_interval=5, aux_epochs=1,
                            aux_minibatch_size=32)
    with caplog.at_level(logging.WARNING):
        Trainer(str(tmp_path), config=tiny_config(algorithm_ctor=ppg)
                ).train()
    assert (f"PPGAlgorithm.aux_interval=5 exceeds the run's length in "
            f"iterations, 4 (num_env_steps={4 * SPI} at {SPI} per "
            "iteration)") in caplog.text, caplog.text


def test_a_stop_says_its_checkpoint_before_the_run_closes(tmp_path,
                                                          monkeypatch, caplog):
    """The saved line came after the actors were closed, and a second
    Ctrl-C meanwhile aborted rank 0 (the launcher had not heard that it
    saved): the launcher then said "this stop saved none" of a stop that
    had. It is said, and told (`process.stop_saved`), once the checkpoint
    is written."""
    import logging

    from alf.utils import process
    told = []
    closed = []
    monkeypatch.setattr(process, "_stop_saved_hook",
                        lambda: told.append(ckpt_steps(str(tmp_path))))
    trainer = Trainer(str(tmp_path), config=tiny_config(
        unroll_mode="async", num_env_steps=100 * SPI))
    progress, close = Reporter.log_progress, Trainer._close

    def stop_at_2(self, iteration, env_steps, final):
        if iteration == 2:
            trainer.request_stop()
        return progress(self, iteration, env_steps, final)

    def closing(self, *a, **kw):
        closed.append("stopped at" in caplog.text)
        return close(self, *a, **kw)

    monkeypatch.setattr(Reporter, "log_progress", stop_at_2)
    monkeypatch.setattr(Trainer, "_close", closing)
    with caplog.at_level(logging.WARNING):
        with pytest.raises(TrainingInterrupted) as info:
            trainer.train()
    assert told == [[2 * SPI]]  # after the checkpoint was written
    assert closed == [True]  # said before closing
    assert info.value.said and caplog.text.count("stopped at") == 1


def _undecorated(rank, root):
    from alf.examples.custom_algorithm import ExampleA2C

    class Undecorated(ExampleA2C):
        def loss(self, exp):  # the example's, without @data_distributed
            return ExampleA2C.loss.__wrapped__(self, exp)

    Trainer(root, config=tiny_config(algorithm_ctor=Undecorated,
                                     num_env_steps=20 * SPI)).train()


@pytest.mark.timeout(120)
def test_weights_are_checked_after_the_first_iteration(tmp_path):
    """An algorithm whose loss is not data-distributed drifts from its
    first update; checked only every sync_check_interval (50) iterations,
    a shorter run ended 0 with every rank's own weights."""
    from distributed_harness import errors, run_ranks
    said = errors(run_ranks(_undecorated, str(tmp_path), timeout=90),
                  "DistributedError")
    assert all(s.startswith("weights differ across ranks") for s in said), \
        said
    assert ckpt_steps(str(tmp_path)) == []  # before any checkpoint
