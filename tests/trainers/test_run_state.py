"""Tests of alf/trainers/run_state.py: what a checkpoint holds, the best
checkpoint across resumes, the best metric's check, the operative config
(restoring a whole run is tested through the trainer, test_trainer.py)."""
import os

import gin
import pytest
import torch

from alf.trainers.checkpointer import Checkpointer, check_layout
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

    def local_state(self):  # nothing of its own per rank
        return {}


def _run_state(root, **kw) -> RunState:
    episodes = EpisodeStats(num_envs=1)
    episodes.total_episodes = 7
    return RunState(str(root), _Algorithm(), episodes, is_chief=True, **kw)


def test_a_checkpoint_has_the_layout_earlier_runs_wrote(tmp_path):
    """Checkpoints stay loadable across versions: the keys are those of
    ``format`` 1, checked by the layout that resuming applies, and
    ``evaluation_due``, which the layout leaves out (earlier checkpoints
    lack it)."""
    state = _run_state(tmp_path).state(iteration=3, env_steps=96)
    assert set(state) == {"format", "algorithm", "optimizers", "counters",
                          "rng", "evaluation_due"}
    assert state["evaluation_due"] is False
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


def test_an_iterations_checkpoint_is_written_once_unless_acting_changed(
        tmp_path, monkeypatch):
    """The trainer saves the checkpoint due with an evaluation before it,
    and again after it (and on a stop): written again only where the
    evaluation changed the acting weights (a calibrated offset), and then
    without each rank's own state (a replay buffer is large)."""
    run = _run_state(tmp_path)
    writes = []
    for name in ("save", "save_local"):
        real = getattr(run.checkpointer, name)
        monkeypatch.setattr(
            run.checkpointer, name,
            lambda *a, _real=real, _name=name: (writes.append(_name),
                                                _real(*a))[1])
    monkeypatch.setattr(run._algorithm, "local_state",
                        lambda: {"replay": torch.zeros(2)}, raising=False)
    path = run.save(iteration=3, env_steps=96, evaluation_due=True)
    assert run.save(iteration=3, env_steps=96, evaluation_due=True) == path
    assert writes == ["save_local", "save"]
    with torch.no_grad():
        run._algorithm.w.add_(1.0)
    run.changed()
    assert run.save(iteration=3, env_steps=96, evaluation_due=True) == path
    assert writes == ["save_local", "save", "save"]
    resumed = _run_state(tmp_path, restore_local=False).restore()
    assert resumed.evaluation_due is True
    assert torch.equal(Checkpointer.load(path)["algorithm"]["w"],
                       run._algorithm.w)
    run.save(iteration=4, env_steps=128)
    assert writes[-2:] == ["save_local", "save"]


def test_a_checkpoint_without_evaluation_due_resumes(tmp_path):
    """Checkpoints written before alf recorded whether an evaluation was
    due at them resume with it unknown (the trainer then goes by
    ``eval_interval``)."""
    run = _run_state(tmp_path)
    path = run.save(iteration=3, env_steps=96)
    state = Checkpointer.load(path)
    del state["evaluation_due"]
    torch.save(state, path)
    resumed = _run_state(tmp_path).restore()
    assert resumed.env_steps == 96 and resumed.evaluation_due is None


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
                            lambda iteration, env_steps, *_: {"at": env_steps})
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


def _save_config(run_state, monkeypatch, text, env_steps):
    """``save_operative_config`` where gin's operative config is ``text``."""
    monkeypatch.setattr(gin, "operative_config_str", lambda: text)
    run_state.save_operative_config(env_steps)


def _read(root, name):
    return (root / name).read_text()


def test_a_second_resume_from_the_same_step_supersedes_the_first(
        tmp_path, monkeypatch):
    """Two resumes from one checkpoint with other configs: the first one's
    record is moved aside, never overwritten, and alf.bin.play rebuilds the
    checkpoints after it with the last resume's config."""
    from alf.bin.play import run_config
    run_state = _run_state(tmp_path)
    _save_config(run_state, monkeypatch, "lr = 0.001\n", 0)
    _save_config(run_state, monkeypatch, "lr = 0.0003\n", 12032)
    _save_config(run_state, monkeypatch, "lr = 0.0003\n", 12032)  # again
    assert sorted(os.listdir(tmp_path)) == ["config-resumed-12032.gin",
                                            "config.gin"]
    _save_config(run_state, monkeypatch, "lr = 0.002\n", 12032)
    superseded = [n for n in os.listdir(tmp_path) if "superseded" in n]
    assert len(superseded) == 1
    assert superseded[0].startswith("config-resumed-12032-superseded-")
    assert _read(tmp_path, superseded[0]) == "lr = 0.0003\n"
    assert _read(tmp_path, "config-resumed-12032.gin") == "lr = 0.002\n"
    assert _read(tmp_path, "config.gin") == "lr = 0.001\n"
    assert open(run_config(str(tmp_path), 12064)).read() == "lr = 0.002\n"
    assert open(run_config(str(tmp_path), 12032)).read() == "lr = 0.001\n"
    # A third resume from there with config.gin's config: the record of
    # the second moves aside too (under another name), and play finds
    # config.gin again.
    _save_config(run_state, monkeypatch, "lr = 0.001\n", 12032)
    superseded = sorted(n for n in os.listdir(tmp_path) if "superseded" in n)
    assert sorted(_read(tmp_path, n) for n in superseded) == [
        "lr = 0.0003\n", "lr = 0.002\n"]
    assert not (tmp_path / "config-resumed-12032.gin").exists()
    assert run_config(str(tmp_path), 12064) == str(tmp_path / "config.gin")


def test_a_resume_before_a_later_resume_supersedes_its_record(
        tmp_path, monkeypatch):
    """A run resumed at 100 with another config (record 100), resumed at
    200 with a third (record 200), then resumed from 150 (newer checkpoints
    gone): the record at 200 describes discarded training and moves aside;
    the new run's config is compared with the one it resumes (record 100).
    """
    from alf.bin.play import run_config
    run_state = _run_state(tmp_path)
    _save_config(run_state, monkeypatch, "a\n", 0)
    _save_config(run_state, monkeypatch, "b\n", 100)
    _save_config(run_state, monkeypatch, "c\n", 200)
    _save_config(run_state, monkeypatch, "b\n", 150)  # record 100's config
    names = sorted(os.listdir(tmp_path))
    assert names[:2] == ["config-resumed-100.gin",
                         "config-resumed-200-superseded-" + names[1][30:]]
    assert names[2:] == ["config.gin"]
    assert _read(tmp_path, names[1]) == "c\n"
    assert open(run_config(str(tmp_path), 300)).read() == "b\n"
    # Resumed from 150 with config.gin's config: play must not find b.
    _save_config(run_state, monkeypatch, "a\n", 150)
    assert _read(tmp_path, "config-resumed-150.gin") == "a\n"
    assert open(run_config(str(tmp_path), 300)).read() == "a\n"


def _best_run_state(root, monkeypatch):
    r = _run_state(root, best_metric="average_return")
    monkeypatch.setattr(r, "state",
                        lambda iteration, env_steps, *_: {"at": env_steps})
    return r


def test_a_resume_sets_aside_a_best_from_the_discarded_training(
        tmp_path, monkeypatch):
    """best.pt evaluated after the checkpoint resumed from comes from
    training the resumed run discards: it moves aside with its record (as
    eval.csv's later rows do) and the resumed run's best starts afresh."""
    ckpt = tmp_path / "ckpt"
    first = _run_state(tmp_path, best_metric="average_return")
    first.save(iteration=3, env_steps=300)
    monkeypatch.setattr(first, "state",
                        lambda iteration, env_steps, *_: {"at": env_steps})
    first.keep_best({"average_return": 9.0})
    first.save_best(4, 400)  # killed before the checkpoint at 500
    resumed = _best_run_state(tmp_path, monkeypatch)
    assert resumed.restore().env_steps == 300
    assert resumed.checkpointer.best() is None
    aside = sorted(n for n in os.listdir(ckpt) if n.startswith("best"))
    assert len(aside) == 2 and aside[0].startswith("best-discarded-")
    assert aside == [aside[0], aside[0][:-5] + ".pt"]
    assert torch.load(ckpt / aside[1], weights_only=True) == {"at": 400}
    assert '"env_steps": 400' in (ckpt / aside[0]).read_text()
    resumed.keep_best({"average_return": 5.0})  # below the discarded 9
    resumed.save_best(4, 400)
    best = resumed.checkpointer.best()
    assert (best["env_steps"], best["value"]) == (400, 5.0)
    # The same once more: a second set of names, the first one kept.
    assert _best_run_state(tmp_path, monkeypatch).restore().env_steps == 300
    assert len([n for n in os.listdir(ckpt) if n.startswith("best")]) == 4
    assert resumed.checkpointer.best() is None


@pytest.mark.parametrize("checkpointed", [True, False])
def test_after_the_best_is_set_aside_the_kept_evaluations_count(
        tmp_path, monkeypatch, checkpointed):
    """The best of the evaluations the resumed run keeps is the one to
    beat: its checkpoint becomes best.pt where one is left, else the next
    evaluation must beat it. Before, the best started from nothing, and a
    worse policy became best.pt below a score eval.csv still held."""
    from alf.trainers.evaluator import append_eval_csv
    first = _run_state(tmp_path, best_metric="average_return")
    for steps, value in ((100, 41.5), (200, 20.0), (400, 60.0)):
        append_eval_csv(str(tmp_path), steps, {"average_return": value})
    first.save(iteration=1, env_steps=100)
    first.save(iteration=3, env_steps=300)
    if not checkpointed:
        os.remove(tmp_path / "ckpt" / "ckpt-100.pt")
    first.keep_best({"average_return": 60.0})
    first.save_best(4, 400)  # killed before the checkpoint at 500
    resumed = _best_run_state(tmp_path, monkeypatch)
    assert resumed.restore().env_steps == 300
    best = resumed.checkpointer.best()
    if checkpointed:
        assert (best["env_steps"], best["value"]) == (100, 41.5)
        state = Checkpointer.load(best["path"])
        assert state["counters"]["env_steps"] == 100
    else:
        assert best is None
    resumed.keep_best({"average_return": 30.0})  # below the kept 41.5
    resumed.save_best(4, 400)
    assert resumed.checkpointer.best() == best
    resumed.keep_best({"average_return": 50.0})
    resumed.save_best(5, 500)
    assert resumed.checkpointer.best()["value"] == 50.0


def test_a_resume_keeps_a_best_from_the_kept_training(tmp_path, monkeypatch):
    """best.pt evaluated at or before the checkpoint stays the run's best."""
    first = _run_state(tmp_path, best_metric="average_return")
    first.keep_best({"average_return": 9.0})
    first.save_best(3, 300)
    first.save(3, 300)
    resumed = _best_run_state(tmp_path, monkeypatch)
    assert resumed.restore().env_steps == 300
    assert resumed.checkpointer.best()["env_steps"] == 300
    resumed.keep_best({"average_return": 8.0})
    resumed.save_best(4, 400)
    assert resumed.checkpointer.best()["value"] == 9.0
    assert sorted(os.listdir(tmp_path / "ckpt")) == [
        "best.json", "best.pt", "ckpt-300.pt"]


def test_a_start_without_checkpoint_sets_aside_an_earlier_best(
        tmp_path, monkeypatch):
    """A run that failed before its first checkpoint is trained again from
    the start: its best.pt is from discarded training."""
    first = _best_run_state(tmp_path, monkeypatch)
    first.keep_best({"average_return": 9.0})
    first.save_best(1, 100)
    assert _best_run_state(tmp_path, monkeypatch).restore() is None
    names = sorted(os.listdir(tmp_path / "ckpt"))
    assert [n.rsplit(".", 1)[1] for n in names] == ["json", "pt"]
    assert all(n.startswith("best-discarded-") for n in names)


@pytest.mark.parametrize("record", ["missing", "garbage"])
def test_a_best_without_its_record_is_beaten_only_by_a_better_evaluation(
        tmp_path, monkeypatch, record):
    """best.json lost (a kill between the two writes of a run's first
    best, an edit): eval.csv's other rows say what best.pt must beat.
    Before, the next evaluation, however bad, replaced best.pt."""
    from alf.trainers.evaluator import append_eval_csv
    first = _best_run_state(tmp_path, monkeypatch)
    for steps, value in ((100, 5.0), (200, 9.0)):
        append_eval_csv(str(tmp_path), steps, {"average_return": value})
        first.keep_best({"average_return": value}, env_steps=steps)
        first.save_best(steps // 100, steps)
    info = tmp_path / "ckpt" / "best.json"
    if record == "missing":
        info.unlink()
    else:
        info.write_text("{not json")
    resumed = _best_run_state(tmp_path, monkeypatch)
    append_eval_csv(str(tmp_path), 300, {"average_return": 7.0})
    resumed.keep_best({"average_return": 7.0}, env_steps=300)
    resumed.save_best(3, 300)
    best = tmp_path / "ckpt" / "best.pt"
    assert torch.load(best, weights_only=True) == {"at": 200}
    append_eval_csv(str(tmp_path), 400, {"average_return": 9.5})
    resumed.keep_best({"average_return": 9.5}, env_steps=400)
    resumed.save_best(4, 400)
    assert torch.load(best, weights_only=True) == {"at": 400}
    assert resumed.checkpointer.best()["value"] == 9.5
