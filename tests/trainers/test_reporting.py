"""Tests of alf/trainers/reporting.py: summary names and steps, the
evaluation's TensorBoard scalars and CSV row, the console lines."""
import csv
import os
import re

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import \
    EventAccumulator

from alf.trainers import reporting
from alf.trainers.collection_counts import CollectionCounts
from alf.trainers.collector import ActorReport
from alf.trainers.episode_stats import EpisodeStats


def _reporter(root, is_chief=True, actors=None, preempting=False,
              **kw):
    episodes = EpisodeStats(num_envs=2)
    episodes.update(torch.tensor([1.0, 2.0]), torch.tensor([True, True]))
    counts = CollectionCounts(32, 0, 1, preempting)
    args = dict(device=torch.device("cpu"), num_env_steps=128,
                log_interval_seconds=1000.0, is_chief=is_chief,
                world_size=1)
    args.update(kw)
    return reporting.Reporter(str(root), episodes, counts,
                              lambda: actors, **args)


def _scalars(folder):
    ea = EventAccumulator(str(folder))
    ea.Reload()
    return {tag: [(e.step, e.value) for e in ea.Scalars(tag)]
            for tag in ea.Tags()["scalars"]}


@pytest.fixture
def lines(monkeypatch):
    """The console lines logged through absl's ``logging.info``."""
    logged = []
    monkeypatch.setattr(reporting.logging, "info",
                        lambda fmt, *args: logged.append(fmt % args))
    return logged


def test_summaries_have_their_names_and_the_env_step(tmp_path):
    r = _reporter(tmp_path, preempting=True)
    r.open(env_steps_at_start=0)
    r.start_clock(iteration=0, env_steps=0)
    r._counts.agree(steps=32, preempted=False)
    r.summarize(32, {"loss": torch.tensor(0.5)})
    r.close()
    scalars = _scalars(tmp_path / "train")
    assert scalars.pop("train/loss") == [(32, 0.5)]
    assert scalars.pop("rollout/average_return") == [(32, 1.5)]
    assert scalars.pop("rollout/average_episode_length") == [(32, 1.0)]
    assert scalars.pop("rollout/episodes") == [(32, 2.0)]
    assert scalars.pop("collect/steps_per_iteration_rank0") == [(32, 32.0)]
    assert scalars.pop("collect/preempted_fraction_rank0") == [(32, 0.0)]
    assert [s for s, _ in scalars.pop("time/steps_per_second")] == [32]
    assert scalars == {}


def test_other_ranks_write_nothing(tmp_path):
    r = _reporter(tmp_path, is_chief=False)
    r.open(env_steps_at_start=0)
    r.summarize(32, {"loss": torch.tensor(0.5)})
    assert r._episodes.total_episodes == 2  # it joined the collective
    r.close()
    assert os.listdir(tmp_path) == []


def test_an_evaluation_goes_to_tensorboard_and_its_csv(tmp_path, lines):
    r = _reporter(tmp_path)
    r.open(env_steps_at_start=0)
    metrics = {"average_return": 1.0, "average_episode_length": 2.0,
               "success_rate": 0.5}
    r.record_evaluation("eval", metrics, 64)
    r.record_evaluation("eval_held_out", dict(metrics, average_return=3.0),
                        64)
    r.log_evaluation(64, metrics, dict(metrics, average_return=3.0,
                                       average_episode_length=4.0))
    r.close()
    assert _scalars(tmp_path / "eval") == {
        f"eval/{k}": [(64, v)] for k, v in metrics.items()}
    assert _scalars(tmp_path / "eval_held_out")[
        "eval_held_out/average_return"] == [(64, 3.0)]
    with open(tmp_path / "eval.csv", newline="") as f:
        assert list(csv.reader(f)) == [
            ["env_steps", "average_return", "average_episode_length",
             "success_rate"], ["64", "1.0", "2.0", "0.5"]]
    assert os.path.exists(tmp_path / "eval_held_out.csv")
    assert lines == ["eval at 64 env steps: return 1.00, episode length "
                     "2.0; held-out: return 3.00, episode length 4.0"]


def test_the_progress_line(tmp_path, lines):
    r = _reporter(tmp_path)
    r.start_clock(iteration=2, env_steps=64)
    r.add_learner_cpu(0.032, wall=0.048)
    r.log_progress(3, 96, final=False)  # within log_interval_seconds
    assert lines == []
    r.log_progress(3, 96, final=True)
    assert len(lines) == 1
    assert re.fullmatch(
        r"iter 3 \| env steps 96/128 \| \d+ steps/s \| recent return 1\.50 "
        r"\| time left \d\d:\d\d:\d\d \| learner 1\.000 ms CPU/step "
        r"\(wall 1\.500\)", lines[0]), lines[0]


def test_the_progress_line_says_when_the_spread_is_of_segments(tmp_path,
                                                               lines):
    r = _reporter(tmp_path, actors=ActorReport(0.25, 0.125, 0.3, 0.05,
                                               actor_spread=31.5,
                                               segments=True))
    r.start_clock(iteration=0, env_steps=0)
    r.log_progress(1, 32, final=True)
    assert "slowest segment 31.50x the fastest" in lines[0], lines[0]


def test_the_progress_line_before_any_episode_ended(tmp_path, lines):
    r = _reporter(tmp_path)
    r._episodes = EpisodeStats(num_envs=2)  # nothing ended yet
    r.start_clock(iteration=0, env_steps=0)
    r.log_progress(1, 32, final=True)
    assert "| recent return none yet |" in lines[0], lines[0]


def test_the_progress_line_of_actors_and_preemption(tmp_path, lines):
    r = _reporter(tmp_path, actors=ActorReport(0.25, 0.125, 0.3, 0.05,
                                               actor_spread=1.25,
                                               busy_ms=0.375),
                  preempting=True,
                  log_interval_seconds=0.0)
    r.start_clock(iteration=0, env_steps=0)
    r._counts.agree(steps=16, preempted=True)
    r._counts.agree(steps=32, preempted=False)
    r.log_progress(2, 48, final=False)
    assert lines[0].endswith(
        " | actors 0.250 ms CPU/step (env step 0.125; busy wall 0.375), "
        "waiting 30% for a policy, slowest 1.25x the fastest | learner "
        "waiting 5% for unrolls "
        "| preempted rank0 50%"), \
        lines[0]


def test_the_progress_line_of_inference_workers(tmp_path, lines):
    r = _reporter(tmp_path, actors=ActorReport(0.25, 0.125, 0.3, 0.05,
                                               0.0625, 7.5, 1.5),
                  log_interval_seconds=0.0)
    r.start_clock(iteration=0, env_steps=0)
    r.log_progress(2, 48, final=False)
    assert lines[0].endswith(
        " | actors 0.250 ms CPU/step (env step 0.125; busy wall nan), "
        "waiting 30% for a policy, slowest 1.50x the fastest | inference "
        "0.062 ms CPU/step "
        "(batch 7.5) | learner waiting 5% for unrolls"), lines[0]


def test_evaluation_time_is_left_out_of_the_throughput(tmp_path,
                                                       monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(reporting.time, "time", lambda: clock[0])
    r = _reporter(tmp_path)
    r.start_clock(iteration=0, env_steps=0)
    clock[0] += 1.0
    with r.evaluation_time():
        clock[0] += 3.0
    assert r.steps_per_second(64) == pytest.approx(64.0)


def test_a_resume_hides_the_discarded_evaluations_before_it_evaluates(
        tmp_path):
    """Before, only `train` was opened at the start: a resumed run that
    checkpointed past a discarded evaluation before its own first one
    left that evaluation in TensorBoard for good (eval.csv had set it
    aside)."""
    first = _reporter(tmp_path)
    first.open(env_steps_at_start=0)
    first.record_evaluation("eval", {"average_return": 10.9}, 1024)
    first.close()
    resumed = _reporter(tmp_path)
    resumed.open(env_steps_at_start=768)  # the checkpoint before 1024
    resumed.close()
    later = _reporter(tmp_path)
    later.open(env_steps_at_start=2048)  # checkpointed past 1024 since
    later.record_evaluation("eval", {"average_return": 20.0}, 2560)
    later.close()
    assert _scalars(tmp_path / "eval")["eval/average_return"] == [
        (2560, 20.0)]
    assert not os.path.exists(tmp_path / "eval_held_out")  # none written
