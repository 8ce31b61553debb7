"""Evaluations that choose the deterministic offset as they go
(``TrainerConfig.calibrate_offsets``): the candidates, the choice, and a
run whose evaluation curve is its calibrated policy's (synchronous and
asynchronous evaluation, checkpoints, best.pt and alf.bin.play)."""
import csv
import os

import gymnasium as gym
import pytest
import torch

from alf.algorithms.deterministic_offset import CALIBRATED
from alf.algorithms.ppo_algorithm import PPOAlgorithm
from alf.algorithms.sac_algorithm import SACAlgorithm
from alf.trainers import Trainer
from alf.trainers.calibration import (CALIBRATION_CSV, Calibration,
                                      candidates, choose)
from alf.trainers.checkpointer import Checkpointer
from alf.trainers.evaluator import read_eval_csv
from alf.trainers.trainer_config import TrainerConfig
from alf.utils.distributed.rank_local import excluded_buffer_names
from alf.utils.errors import ConfigError
from test_trainer import SPI, clean_gin  # noqa: F401


def test_candidates_are_every_combination_with_zero():
    assert candidates({1: (-0.2, -0.1)}) == [{1: -0.2}, {1: -0.1},
                                             {1: 0.0}]
    assert candidates({1: -0.1, 0: [0.5]}) == [
        {0: 0.0, 1: -0.1}, {0: 0.0, 1: 0.0}, {0: 0.5, 1: -0.1},
        {0: 0.5, 1: 0.0}]
    for bad in ({}, (0.1, ), {"1": (0.1, )}, {-1: (0.1, )},
                {1: ("fast", )}, {1: (float("nan"), )}, {True: (0.1, )},
                {0: ()}, {0: []}):  # an empty tuple calibrated nothing
        with pytest.raises(ConfigError, match="calibrate_offsets=.*valid"):
            candidates(bad)


def test_the_best_wins_and_a_tie_keeps_the_smaller_offset():
    played = [({1: -0.2}, {"m": 0.8}), ({1: 0.0}, {"m": 0.8}),
              ({1: -0.1}, {"m": 0.7})]
    assert choose(played, "m")[0] == {1: 0.0}
    played.append(({1: -0.3}, {"m": 0.9}))
    chosen = choose(played, "m")[0]
    assert chosen == {1: -0.3}
    rows = Calibration(chosen, played).rows()
    assert [r["chosen"] for r in rows] == [0.0, 0.0, 0.0, 1.0]
    assert rows[0] == {"m": 0.8, "offset_1": -0.2, "chosen": 0.0}


def _pendulum(**kw) -> TrainerConfig:
    args = dict(algorithm_ctor=PPOAlgorithm, env_name="Pendulum-v1",
                num_envs=2, unroll_length=32, minibatch_size=32,
                num_epochs=1, num_env_steps=4 * 64, eval_interval=2,
                num_eval_episodes=2, summary_interval=2,
                checkpoint_interval=1, log_interval_seconds=1000.0,
                calibrate_offsets={0: (-2.0, 1.0)})
    args.update(kw)
    return TrainerConfig(**args)


def test_settings_that_cannot_calibrate_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="eval_deterministic=True"):
        _pendulum(eval_deterministic=False)
    with pytest.raises(ConfigError, match="num_calibration_episodes=0"):
        _pendulum(num_calibration_episodes=0)
    with pytest.raises(ConfigError, match=r"valid: dimensions in 0..0"):
        Trainer(str(tmp_path / "a"),
                config=_pendulum(calibrate_offsets={1: (0.1, )})).train()
    with pytest.raises(ConfigError, match="needs a one-dimensional Box"):
        Trainer(str(tmp_path / "b"), config=_pendulum(
            env_name="CartPole-v1")).train()
    with pytest.raises(ConfigError, match="SACAlgorithm has no "
                       "deterministic offset"):
        Trainer(str(tmp_path / "c"), config=_pendulum(
            algorithm_ctor=SACAlgorithm, initial_collect_steps=64)).train()


def test_the_calibrated_offset_acts_unless_a_binding_overrides_it():
    cfg = _pendulum()
    space = gym.spaces.Box(-1, 1, (3, ))
    action = gym.spaces.Box(-2, 2, (1, ))
    alg = PPOAlgorithm(space, action, cfg)
    obs = torch.randn(50, 3)
    mode = alg.predict_step(obs).output  # a zero offset to begin with
    alg.set_calibrated_offset({0: -1.0})
    torch.testing.assert_close(alg.predict_step(obs).output,
                               (mode.clamp(-2, 2) - 1.0).clamp(-2, 2))
    # In checkpoints, rank-local (rank 0 alone evaluates).
    assert alg.state_dict()[f"{CALIBRATED}.value"].tolist() == [-1.0]
    assert f"{CALIBRATED}.value" in excluded_buffer_names(alg)
    copy = PPOAlgorithm(space, action, cfg)
    copy.load_state_dict(alg.state_dict())
    torch.testing.assert_close(copy.predict_step(obs).output,
                               alg.predict_step(obs).output)
    bound = PPOAlgorithm(space, action, cfg, deterministic_offset=0.5)
    bound.load_state_dict(alg.state_dict())
    torch.testing.assert_close(bound.predict_step(obs).output,
                               (mode.clamp(-2, 2) + 0.5).clamp(-2, 2))
    # Without calibration nothing is added to the state.
    plain = PPOAlgorithm(space, action, _pendulum(calibrate_offsets=None))
    assert not any(k.startswith(CALIBRATED) for k in plain.state_dict())
    # Its checkpoint loads strictly into a calibrating algorithm (a run
    # resumed with calibrate_offsets added), which acts with no offset
    # until an evaluation chooses one.
    resumed = PPOAlgorithm(space, action, cfg)
    resumed.load_state_dict(plain.state_dict())
    assert resumed.state_dict()[f"{CALIBRATED}.value"].tolist() == [0.0]
    torch.testing.assert_close(resumed.predict_step(obs).output,
                               plain.predict_step(obs).output)


def _check_run(root: str) -> dict:
    """What every calibrated run must show; returns eval.csv."""
    evals = read_eval_csv(os.path.join(root, "eval.csv"))
    rows = read_eval_csv(os.path.join(root, CALIBRATION_CSV))
    assert evals["env_steps"] == [128, 256]
    for i, steps in enumerate(evals["env_steps"]):
        # read_eval_csv keeps the last row per step: read them all.
        import csv
        with open(os.path.join(root, CALIBRATION_CSV)) as f:
            mine = [r for r in csv.DictReader(f)
                    if int(float(r["env_steps"])) == steps]
        assert sorted(float(r["offset_0"]) for r in mine) == [-2.0, 0.0, 1.0]
        # The offsets are three policies: three returns.
        returns = {float(r["average_return"]) for r in mine}
        assert len(returns) == 3
        chosen = [r for r in mine if float(r["chosen"]) == 1.0]
        assert len(chosen) == 1
        assert float(chosen[0]["average_return"]) == max(returns)
        assert evals["offset_0"][i] == float(chosen[0]["offset_0"])
        # Calibrated on the evaluation's own episodes (the default): the
        # evaluation is the chosen candidate's episodes again.
        assert evals["average_return"][i] == pytest.approx(
            float(chosen[0]["average_return"]), rel=1e-6)
    assert set(rows) >= {"env_steps", "average_return", "offset_0", "chosen"}
    return evals


@pytest.mark.timeout(240)
@pytest.mark.parametrize("async_eval", [False, True])
def test_evaluations_play_and_keep_the_offset_they_choose(tmp_path,
                                                          async_eval):
    root = str(tmp_path / "run")
    os.makedirs(root)
    cfg = _pendulum(async_eval=async_eval)
    Trainer(root, config=cfg).train()
    evals = _check_run(root)
    ckpt = Checkpointer(os.path.join(root, "ckpt"))
    latest = ckpt.load(ckpt.latest())
    assert latest["algorithm"][f"{CALIBRATED}.value"].tolist() == [
        evals["offset_0"][-1]]
    best = torch.load(os.path.join(root, "ckpt", "best.pt"),
                      weights_only=True)
    k = evals["average_return"].index(max(evals["average_return"]))
    assert best["algorithm"][f"{CALIBRATED}.value"].tolist() == [
        evals["offset_0"][k]]


@pytest.mark.timeout(240)
def test_a_resumed_run_sets_its_discarded_calibrations_aside(tmp_path):
    import csv
    import glob
    root = str(tmp_path)
    cfg = _pendulum(eval_interval=1, checkpoint_interval=2,
                    max_checkpoints=None)
    Trainer(root, config=cfg).train()
    os.remove(os.path.join(root, "ckpt", "ckpt-256.pt"))
    Trainer(root, config=cfg).train()  # from 128 env steps

    def steps(path):
        with open(path) as f:
            return [int(float(r["env_steps"])) for r in csv.DictReader(f)]

    # Three candidates per evaluation, each evaluation once, in order.
    assert steps(os.path.join(root, CALIBRATION_CSV)) == [
        s for s in (64, 128, 192, 256) for _ in range(3)]
    aside = glob.glob(os.path.join(root, "calibration-discarded-*.csv"))
    assert len(aside) == 1
    assert steps(aside[0]) == [s for s in (192, 256) for _ in range(3)]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("stop_at, kept", [
    (3, [64]),  # the second evaluation's calibration: dropped
    (4, [64]),  # its evaluation proper, after calibrating: dropped
    (8, [64, 128, 192]),  # the final one: dropped too, made up resumed
])
def test_a_stop_mid_evaluation_drops_it_and_checkpoints(tmp_path, monkeypatch,
                                                        stop_at, kept):
    """Ctrl-C while rank 0 calibrates or evaluates (minutes on MetaDrive,
    beyond the launcher's grace) abandons that evaluation: no row, the
    offset chosen before, the stop's checkpoint saved. So does the final
    one: the finished run evaluates it when run again."""
    from alf.trainers import evaluator
    from alf.trainers.trainer import TrainingInterrupted
    root = str(tmp_path)
    trainer = Trainer(root, config=_pendulum(eval_interval=1))
    # Per evaluation: one play of every candidate's episodes, then the
    # evaluation's.
    calls = []
    play = evaluator._play_sets

    def stopping_play(*args, **kwargs):
        calls.append(1)
        if len(calls) == stop_at:
            trainer.request_stop()
        return play(*args, **kwargs)

    monkeypatch.setattr(evaluator, "_play_sets", stopping_play)
    with pytest.raises(TrainingInterrupted):
        trainer.train()
    evals = read_eval_csv(os.path.join(root, "eval.csv"))
    assert evals["env_steps"] == kept
    rows = read_eval_csv(os.path.join(root, CALIBRATION_CSV))
    assert rows["env_steps"] == kept
    ckpt = Checkpointer(os.path.join(root, "ckpt"))
    state = ckpt.load(ckpt.latest())
    assert state["counters"]["env_steps"] == (128 if len(kept) == 1 else 256)
    assert state["algorithm"][f"{CALIBRATED}.value"].tolist() == [
        evals["offset_0"][-1]]
    # Resumed, the run first evaluates the step whose evaluation the stop
    # dropped (its checkpoint holds the weights that were due): no gap.
    monkeypatch.undo()
    Trainer(root, config=_pendulum(eval_interval=1)).train()
    for name in ("eval.csv", CALIBRATION_CSV):
        with open(os.path.join(root, name)) as f:
            steps = [int(float(r["env_steps"])) for r in csv.DictReader(f)]
        assert sorted(set(steps)) == [64, 128, 192, 256], (name, steps)
        # Each evaluation once (a calibration's rows: one per candidate).
        assert steps == sorted(steps), (name, steps)
        assert len(steps) == 4 * (steps.count(64)), (name, steps)
