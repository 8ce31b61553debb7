"""Tests of alf/trainers/run_state.py: what a checkpoint holds, the best
checkpoint across resumes, the best metric's check, the operative config
(restoring a whole run is tested through the trainer, test_trainer.py)."""
import os

import gin
import pytest
import torch

from alf.trainers.checkpointer import check_layout
from alf.trainers.episode_stats import EpisodeStats
from alf.trainers.run_state import (CHECKPOINT_LAYOUT, RunState,
                                   check_best_metric)
from alf.utils.errors import ConfigError


class _Algorithm(torch.nn.Module):
    """What RunState needs of an algorithm: a state and optimizer state."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.arange(3.0))
        self.optimizer = torch.optim.Adam(self.parameters())

    def optimizer_state_dict(self):
        return [self.optimizer.state_dict()]

    def load_optimizer_state_dict(self, states):
        self.optimizer.load_state_dict(states[0])


def _run_state(root, **kw) -> RunState:
    episodes = EpisodeStats(num_envs=1)
    episodes.total_episodes = 7
    return RunState(str(root), _Algorithm(), episodes, is_chief=True, **kw)


def test_a_checkpoint_has_the_layout_earlier_runs_wrote(tmp_path):
    """Checkpoints stay loadable across versions: the keys are those of
    ``format`` 1, checked by the layout that resuming applies."""
    state = _run_state(tmp_path).state(iteration=3, env_steps=96)
    assert set(state) == {"format", "algorithm", "optimizers", "counters",
                          "rng"}
    assert state["format"] == 1
    assert state["counters"] == {"iteration": 3, "env_steps": 96,
                                 "episodes": 7}
    assert check_layout(state, CHECKPOINT_LAYOUT) is None
    assert CHECKPOINT_LAYOUT == {
        "algorithm": dict, "optimizers": list,
        "counters": {"iteration": int, "env_steps": int, "episodes": int},
        "rng": {"torch": torch.Tensor}}


def test_save_then_restore_gives_back_everything(tmp_path):
    first = _run_state(tmp_path)
    with torch.no_grad():
        first._algorithm.w.add_(1.0)
    rng = torch.get_rng_state()
    path = first.save(iteration=3, env_steps=96)
    assert path == str(tmp_path / "ckpt" / "ckpt-96.pt")
    second = _run_state(tmp_path)
    second._episodes.total_episodes = 0
    resumed = second.restore()
    assert (resumed.path, resumed.iteration, resumed.env_steps) == (
        path, 3, 96)
    assert torch.equal(resumed.rng, rng)
    assert torch.equal(second._algorithm.w, first._algorithm.w)
    assert second._episodes.total_episodes == 7


def test_restore_without_checkpoint_and_save_on_other_ranks(tmp_path):
    assert _run_state(tmp_path).restore() is None
    other = RunState(str(tmp_path), _Algorithm(), EpisodeStats(1),
                     is_chief=False)
    assert other.save(iteration=1, env_steps=32) is None
    assert not os.path.exists(tmp_path / "ckpt")


def test_best_checkpoint_follows_the_best_evaluation_across_resumes(
        tmp_path, monkeypatch):
    """best.pt is rewritten only when an evaluation beats every earlier
    one, including a resumed run's earlier ones; it is never one of the
    checkpoints that max_checkpoints deletes."""

    def run_state():
        r = _run_state(tmp_path, max_checkpoints=1,
                       best_metric="average_return")
        monkeypatch.setattr(r, "state",
                            lambda iteration, env_steps: {"at": env_steps})
        return r

    first = run_state()
    for steps, ret in [(100, 5.0), (200, 9.0), (300, 7.0)]:
        first.keep_best({"average_return": ret})
        first.save_best(steps // 100, steps)
        first.save(steps // 100, steps)
    best = first.checkpointer.best()
    assert (best["env_steps"], best["value"]) == (200, 9.0)
    assert torch.load(best["path"], weights_only=True) == {"at": 200}
    resumed = run_state()
    resumed.keep_best({"average_return": 8.0})  # below the earlier 9
    resumed.save_best(4, 400)
    assert resumed.checkpointer.best()["env_steps"] == 200
    resumed.keep_best({"average_return": float("nan")})
    resumed.save_best(4, 400)
    resumed.keep_best({"average_return": 9.5})
    resumed.save_best(5, 500)
    assert resumed.checkpointer.best()["env_steps"] == 500
    assert sorted(os.listdir(tmp_path / "ckpt")) == [
        "best.json", "best.pt", "ckpt-300.pt"]


def test_an_unknown_best_metric_is_refused(tmp_path):
    check_best_metric("route_completion", ("route_completion", ))
    check_best_metric(None, ())
    with pytest.raises(ConfigError, match="best_metric='sucess_rate' .*"
                       "valid: average_return, average_episode_length, "
                       "success_rate or None"):
        check_best_metric("sucess_rate", ("success_rate", ))
    with pytest.raises(ConfigError, match="best_metric='sucess_rate'"):
        _run_state(tmp_path, best_metric="sucess_rate",
                   episode_metrics=("success_rate", ))


def test_operative_config_is_never_overwritten(tmp_path):
    gin.clear_config()
    try:
        run_state = _run_state(tmp_path)
        run_state.save_operative_config(env_steps=0)
        text = (tmp_path / "config.gin").read_text()
        run_state.save_operative_config(env_steps=64)  # the same config
        assert sorted(os.listdir(tmp_path)) == ["config.gin"]
        gin.bind_parameter("TrainerConfig.seed", 3)
        # gin's operative config lists only what was used: use it.
        from alf.algorithms import PPOAlgorithm
        from alf.trainers.trainer_config import TrainerConfig
        TrainerConfig(algorithm_ctor=PPOAlgorithm)
        run_state.save_operative_config(env_steps=64)
        assert (tmp_path / "config.gin").read_text() == text
        assert "seed = 3" in (tmp_path / "config-resumed-64.gin").read_text()
    finally:
        gin.clear_config()


def test_an_older_runs_config_with_bare_selectors_is_the_same_config(tmp_path):
    """A gymnasium run saved where only suite_gym's ``load`` was known
    spells it ``load``; resumed with the same settings where both suites'
    are known, it is the same config and writes no config-resumed file."""
    import alf.environments.suite_metadrive  # noqa: F401  (a second load)
    from alf.environments import suite_gym
    gin.clear_config()
    try:
        gin.bind_parameter("suite_gym.load.max_episode_steps", 50)
        suite_gym.load("CartPole-v1").close()  # now in the operative config
        run_state = _run_state(tmp_path)
        run_state.save_operative_config(env_steps=0)
        text = (tmp_path / "config.gin").read_text()
        assert "suite_gym.load.max_episode_steps = 50" in text
        (tmp_path / "config.gin").write_text(
            text.replace("suite_gym.load.", "load."))
        run_state.save_operative_config(env_steps=64)
        assert sorted(os.listdir(tmp_path)) == ["config.gin"]
    finally:
        gin.clear_config()
