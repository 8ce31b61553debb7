"""Straggler preemption through the train CLI: 2 gloo processes, rank 1's
collection made slower by `straggler_load`."""
import os

import pytest
import torch

from alf.trainers.checkpointer import Checkpointer
from alf.trainers.evaluator import read_eval_csv
from test_train_distributed import _cmd, _run

STRAGGLER = ["TrainerConfig.env_load_fn=@straggler_load",
             "straggler_load.ranks=(1,)",
             "TrainerConfig.preempt_stragglers=True",
             "TrainerConfig.sync_frac=0.5",
             # DD-PPO's rule alone: CartPole's learner dominates, so the
             # default rule would (rightly) rarely preempt.
             "TrainerConfig.preempt_rule='always'",
             "TrainerConfig.num_eval_episodes=2",
             "TrainerConfig.log_interval_seconds=0"]


def _scalars(root, tag):
    from tensorboard.backend.event_processing.event_accumulator import \
        EventAccumulator
    acc = EventAccumulator(os.path.join(root, "train"))
    acc.Reload()
    return [e.value for e in acc.Scalars(tag)]


def _last_checkpoint_steps(root):
    steps, path = list(Checkpointer(os.path.join(root, "ckpt"))
                       .saved().items())[-1]
    state = torch.load(path, weights_only=True)
    assert state["counters"]["env_steps"] == steps
    return steps, state["counters"]["iteration"]


@pytest.mark.timeout(200)
def test_the_slow_rank_is_preempted_and_steps_are_counted(tmp_path):
    """PPO, synchronous collection, rank 1 four times slower: rank 1 ends
    most rollouts early with at least min_rollout_fraction of its steps,
    rank 0 almost never; training ends on the steps actually collected."""
    # No evaluation before the last iteration: while rank 0 evaluates,
    # rank 1 starts its next rollout, so rank 0 is that iteration's
    # straggler and is rightly preempted (an interval with an evaluation
    # once showed rank 0 at 117.6 steps per iteration).
    res = _run(_cmd(tmp_path, STRAGGLER + [
        "straggler_load.slowdown=4.0", "TrainerConfig.num_env_steps=6000",
        "TrainerConfig.eval_interval=1000", "TrainerConfig.summary_interval=5"
    ]))
    assert res.returncode == 0, res.stderr[-3000:]
    steps, iterations = _last_checkpoint_steps(str(tmp_path))
    # ppo_cart_pole: 8 envs x 32 steps; rank 1 keeps >= 25% of its 128.
    assert 6000 <= steps < 6000 + 256
    assert steps < iterations * 256  # fewer than whole rollouts
    rank0 = _scalars(tmp_path, "collect/steps_per_iteration_rank0")
    rank1 = _scalars(tmp_path, "collect/steps_per_iteration_rank1")
    assert all(32 <= s <= 128 for s in rank1)
    # Over the run, not per interval: moments of CPU contention on a busy
    # 2-core machine may still cut a few of rank 0's rollouts (a mean of
    # 119 with a 2-process MetaDrive run beside the tests).
    assert sum(rank0) / len(rank0) > 112
    assert sum(rank1) < 0.8 * sum(rank0)
    preempted = _scalars(tmp_path, "collect/preempted_fraction_rank1")
    assert sum(preempted) / len(preempted) > 0.5
    assert "| preempted rank0 " in res.stderr
    eval_steps = read_eval_csv(str(tmp_path / "eval.csv"))["env_steps"]
    assert eval_steps[-1] == steps


@pytest.mark.timeout(200)
def test_asynchronous_ppg_cuts_the_slow_ranks_actors(tmp_path):
    """PPG (its auxiliary phase on uneven, ragged batches) with actors:
    rank 1's actors are cut short; the run finishes and rank 1 collected
    less than rank 0."""
    # Actors collect while the learner trains, so rank 1 straggles only if
    # its unroll outlasts an iteration of training. A relative slowdown of
    # CartPole's fraction-of-a-millisecond step did not on a busy CI machine
    # (every unroll complete, no cut): a fixed 50 ms per step makes rank 1's
    # 32-step unroll take >= 1.6 s whatever the load.
    res = _run(_cmd(tmp_path, STRAGGLER + [
        "straggler_load.slowdown=1.0", "straggler_load.delay=0.05",
        # >= 10 iterations of <= 256 steps: an auxiliary phase (every 8).
        "TrainerConfig.num_env_steps=2560",
        "TrainerConfig.unroll_mode='async'",
        "TrainerConfig.envs_per_actor=2",
        "TrainerConfig.eval_interval=100", "TrainerConfig.summary_interval=2"
    ], gin_file="ppg_cart_pole.gin"))
    assert res.returncode == 0, res.stderr[-3000:]
    steps, _ = _last_checkpoint_steps(str(tmp_path))
    assert steps >= 2560
    assert _scalars(tmp_path, "train/aux/loss")  # the auxiliary phase ran
    rank0 = _scalars(tmp_path, "collect/steps_per_iteration_rank0")
    rank1 = _scalars(tmp_path, "collect/steps_per_iteration_rank1")
    # Each cut keeps >= 8 of 32 steps per environment.
    assert sum(rank1) < sum(rank0) and min(rank1) >= 32
    assert max(_scalars(tmp_path, "collect/preempted_fraction_rank1")) > 0


@pytest.mark.timeout(200)
def test_off_policy_training_agrees_when_to_start_updating(tmp_path):
    """DQN: ranks store different amounts, so whether the replay buffer is
    ready is agreed collectively (a rank-local answer would deadlock)."""
    res = _run(_cmd(tmp_path, STRAGGLER + [
        "straggler_load.slowdown=4.0", "TrainerConfig.num_env_steps=2048",
        "TrainerConfig.unroll_length=32", "TrainerConfig.eval_interval=100",
        "TrainerConfig.initial_collect_steps=512",
        # When updating starts is tested, not how much: the config's 128
        # updates per iteration made most of this test's time.
        "TrainerConfig.num_updates_per_iter=8"
    ], gin_file="dqn_cart_pole.gin"))
    assert res.returncode == 0, res.stderr[-3000:]
    steps, _ = _last_checkpoint_steps(str(tmp_path))
    assert steps >= 2048
    assert _scalars(tmp_path, "train/loss")
