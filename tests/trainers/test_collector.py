"""Asynchronous collection: exact trajectories, versions, lag bound, faults.

The environments are scripted: an observation is (environment tag, episode,
step), episode lengths and ends (terminated or truncated) follow a formula,
and each environment sleeps its own, varying time per step, so that the
actors run at different paces.
"""
import copy
import functools
import os
import pickle
import time

import gymnasium as gym
import numpy as np
import pytest
import torch

from alf import nest
from alf.algorithms.ppo_algorithm import PPOAlgorithm
from alf.networks.actor import ActorDistributionNetwork
from alf.trainers.collector import AsyncCollector, CollectionError
from alf.trainers.episode_stats import EpisodeStats
from alf.trainers.preemption import Preemption
from alf.trainers.trainer_config import TrainerConfig
from alf.utils import distributed
from alf.utils.distributed import activate_ddp
from alf.utils.errors import AlfError, TrainingError, one_line
from distributed_harness import run_ranks, values

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.usefixtures("fast_processes")]

SCRIPTED_ID = "AlfScriptedPace-v0"


def episode_length(tag: int, episode: int) -> int:
    return 2 + (3 * episode + tag) % 5


def ends_terminated(tag: int, episode: int) -> bool:
    return (episode + tag) % 2 == 0


class ScriptedPace(gym.Env):
    """Observation (tag, episode, step); tag = the first reset's seed."""

    def __init__(self):
        self.observation_space = gym.spaces.Box(0, 1e6, (3, ), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._tag = self._episode = self._step = None

    def _obs(self):
        return np.array([self._tag, self._episode, self._step], np.float32)

    def reset(self, *, seed=None, options=None):
        if self._tag is None:
            self._tag, self._episode = seed, 0
        else:
            self._episode += 1
        self._step = 0
        return self._obs(), {}

    def step(self, action):
        # Env k sleeps up to k ms, varying with the step: different paces.
        time.sleep(((self._tag % 3) * (self._step + 1) % 4) * 5e-4)
        self._step += 1
        done = self._step == episode_length(self._tag, self._episode)
        term = done and ends_terminated(self._tag, self._episode)
        return self._obs(), 1.0, term, done and not term, {}


if SCRIPTED_ID not in gym.registry:
    gym.register(SCRIPTED_ID, entry_point=ScriptedPace)

# Seconds of this thread's CPU per step. Large against the wrapper's own
# CPU per step (up to 0.3 ms on a loaded 2-core machine), which the report
# rightly counts as the environment's too.
BUSY_STEP_CPU = 2e-3


class BusyStep(ScriptedPace):
    """`ScriptedPace` whose step burns `BUSY_STEP_CPU` of thread CPU."""

    def step(self, action):
        start = time.thread_time()
        while time.thread_time() - start < BUSY_STEP_CPU:
            pass
        return super().step(action)  # its sleep costs no CPU


UNEVEN_ID = "AlfUnevenBusyStep-v0"


class UnevenBusyStep(BusyStep):
    """`BusyStep` whose odd-tagged environments also sleep 15 ms a step (no
    CPU): an actor several times slower than its siblings, even where the
    machine is so busy that the others' 2 ms of CPU take 10 ms of wall
    (5 ms made it only 1.5x the slowest there)."""

    def step(self, action):
        if self._tag % 2:
            time.sleep(15e-3)
        return super().step(action)


if UNEVEN_ID not in gym.registry:
    gym.register(UNEVEN_ID, entry_point=UnevenBusyStep)


PACED_ID = "AlfPacedStep-v0"


class PacedStep(ScriptedPace):
    """`ScriptedPace` whose steps also sleep 10 ms: an unroll of 8 steps
    takes an actor at least 80 ms, however fast its machine."""

    def step(self, action):
        time.sleep(10e-3)
        return super().step(action)


if PACED_ID not in gym.registry:
    gym.register(PACED_ID, entry_point=PacedStep)


def _config(**kw):
    # Actors at the tests' own priority: below it (the default), the paces
    # these tests set up depend on what else loads the machine (CI runs
    # two workers: the spread test once read 1.18 for its 1.8).
    kw = dict(dict(algorithm_ctor=PPOAlgorithm, env_name=SCRIPTED_ID,
                   num_envs=3, unroll_length=6, minibatch_size=18,
                   num_epochs=1, unroll_mode="async", actor_niceness=0),
              **kw)
    return TrainerConfig(**kw)


def _started(cfg, env_seed=100, torch_seed=1, all_ready=False):
    """A started collector and its algorithm; with ``all_ready``, started
    once every actor is ready (not only the first), so that they all begin
    stepping together."""
    collector = AsyncCollector(cfg)
    obs_space, action_space, names = collector.describe()
    ready = 1  # the one `describe` read
    while all_ready and ready < collector._n_actors:
        ready += collector._get()[1][0] == "ready"
    torch.manual_seed(0)
    alg = PPOAlgorithm(obs_space, action_space, cfg)
    collector.start(alg, EpisodeStats(cfg.local_num_envs, names), env_seed, 0,
                    torch_seed)
    return collector, alg


def _take(alg):
    exp = nest.map_structure(torch.clone, alg.replay_buffer.gather_all())
    alg.replay_buffer.clear()
    return exp


@pytest.mark.parametrize("workers", [0, 2])
def test_async_unrolls_are_exact_trajectories_with_acting_log_probs(workers):
    # With inference workers (2 for 3 actors: one serves two) the acting
    # version is the worker's, and the check below holds it to that.
    cfg = _config(max_policy_lag=1, inference_workers=workers)
    collector, alg = _started(cfg)
    try:
        unrolls, policies = _collect_with_new_policies(collector, alg, 5)
        # A learner that trains in no time spends much of its time waiting
        # for unrolls (its actors may wait too: fast ones for the version
        # that follows the slowest one's unroll). Not most of it on a
        # loaded 2-core machine: gathering and publishing compete there
        # with three actors and the inference workers (0.48 measured, below
        # 0.3 once beside another test run): the bound only says the
        # report measures the learner's waiting at all.
        report = collector.actor_report()
    finally:
        collector.close()
    assert report.learner_wait > 0.1, report
    lags = []
    for u, exp in enumerate(unrolls):
        lags += _assert_acted_within_the_bound(u, exp, policies)
    # Both fresh and one-version-old steps occurred: the check above
    # compared against more than one policy.
    assert 0 in lags and 1 in lags, lags
    # Each environment's column, across unroll boundaries, is its exact
    # trajectory: consecutive steps, scripted ends, nothing lost or doubled.
    whole = nest.map_structure(lambda *xs: torch.cat(xs), *unrolls)
    for b in range(cfg.local_num_envs):
        _assert_exact_trajectory(nest.map_structure(lambda x: x[:, b], whole),
                                 tag=100 + b)


def _collect_with_new_policies(collector, alg, n):
    """``n`` unrolls, each followed by a new policy (as training would
    make) published as the next version; (unrolls, {version: actor})."""
    policies = {0: copy.deepcopy(alg.actor)}
    unrolls = []
    for u in range(n):
        collector.collect()
        unrolls.append(_take(alg))
        with torch.no_grad():
            for p in alg.actor.parameters():
                p.add_(0.3 * torch.randn_like(p))
        policies[u + 1] = copy.deepcopy(alg.actor)
        collector.publish(u + 1)
    return unrolls, policies


def _assert_acted_within_the_bound(u, exp, policies, bound=1):
    """Unroll ``u``'s steps were acted at most ``bound`` versions behind,
    each storing its acting version's log-probability; returns the lags."""
    lag = u - exp.policy_version
    assert int(lag.min()) >= 0 and int(lag.max()) <= bound, \
        exp.policy_version
    for v in exp.policy_version.unique().tolist():
        rows = exp.policy_version == v
        with torch.no_grad():
            expect = policies[v](exp.observation[rows]).log_prob(
                exp.action[rows])
        torch.testing.assert_close(exp.rollout_info[rows], expect)
    return lag.flatten().tolist()


def _assert_exact_trajectory(column, tag):
    """``column`` (leaves [T]) is environment ``tag``'s scripted trajectory
    from its first reset."""
    obs, nxt = column.observation.long(), column.next_observation.long()
    assert obs[0].tolist() == [tag, 0, 0]
    for t in range(obs.shape[0]):
        _, ep, st = obs[t].tolist()
        assert nxt[t].tolist() == [tag, ep, st + 1], t
        last = st + 1 == episode_length(tag, ep)
        term = last and ends_terminated(tag, ep)
        assert bool(column.terminated[t]) == term, t
        assert bool(column.truncated[t]) == (last and not term), t
        if t + 1 < obs.shape[0]:
            expect = [tag, ep + 1, 0] if last else [tag, ep, st + 1]
            assert obs[t + 1].tolist() == expect, t


def test_segments_are_exact_pieces_of_each_trajectory_fast_ones_doing_more():
    """``segment_length``: any actor fills an unroll's next free segment.
    Every segment holds one environment's consecutive steps acted within
    the lag bound with the stored log-probability, ends marked truncated;
    each environment's segments, over all unrolls, chain into its exact
    trajectory; the episode statistics see each episode once, whole; and
    the fast environments fill more segments than the slow ones."""
    cfg = _config(env_name=UNEVEN_ID, unroll_length=8, minibatch_size=24,
                  segment_length=2, max_policy_lag=1)
    # All stepping from the start: an actor still starting would fill few
    # segments whatever its pace.
    collector, alg = _started(cfg, all_ready=True)
    try:
        unrolls, policies = _collect_with_new_policies(collector, alg, 6)
        episodes = collector._episodes
    finally:
        collector.close()
    pieces: dict = {}  # tag -> [(episode, step) of its first row, piece]
    for u, exp in enumerate(unrolls):
        assert exp.reward.shape == (8, 3)
        _assert_acted_within_the_bound(u, exp, policies)
        assert exp.truncated[1::2].all()  # every segment's last step
        for row in range(0, 8, 2):
            for b in range(3):
                piece = nest.map_structure(lambda x: x[row:row + 2, b], exp)
                tag, ep, st = piece.observation[0].long().tolist()
                assert (piece.observation[:, 0] == tag).all()
                pieces.setdefault(tag, []).append(((ep, st), piece))
    assert sorted(pieces) == [100, 101, 102]
    ended = []
    for tag, parts in pieces.items():
        parts.sort(key=lambda p: p[0])
        column = nest.map_structure(lambda *xs: torch.cat(xs),
                                    *[p for _, p in parts])
        # The segment ends' marks are the learner's: the script's there.
        ends = torch.zeros_like(column.truncated)
        ends[1::2] = True
        obs = column.observation.long()
        last = torch.tensor([st + 1 == episode_length(tag, ep)
                             for _, ep, st in obs.tolist()])
        script = torch.tensor([not ends_terminated(tag, ep)
                               for _, ep, _ in obs.tolist()]) & last
        _assert_exact_trajectory(column._replace(
            truncated=torch.where(ends, script, column.truncated)), tag)
        ended += [episode_length(tag, ep) for (_, ep, st), end in
                  zip(obs.tolist(), last.tolist()) if end]
    # Tag 101 (odd) steps 15 ms slower: the others fill more segments
    # (with its own columns each would fill 24; 1.5x and 2.4x as many in
    # two runs beside a training run, where 5 ms gave 1.4x).
    assert min(len(pieces[100]), len(pieces[102])) > 1.2 * len(pieces[101])
    # Every episode once, whole (reward 1 a step: return = length).
    assert sorted(length for _, length in episodes.recent) == sorted(ended)
    assert all(r == length for r, length in episodes.recent)


def test_segments_are_for_on_policy_algorithms():
    from alf.algorithms.dqn_algorithm import DQNAlgorithm
    cfg = _config(algorithm_ctor=DQNAlgorithm, segment_length=3, num_envs=1)
    collector = AsyncCollector(cfg)
    try:
        obs_space, action_space, names = collector.describe()
        alg = DQNAlgorithm(obs_space, action_space, cfg)
        with pytest.raises(AlfError, match="segment_length=3 is for "
                           "on-policy algorithms; DQNAlgorithm"):
            collector.start(alg, EpisodeStats(1, names), 0, 0, 1)
    finally:
        collector.close()


def test_the_actors_report_their_cpu_per_step_and_their_spread():
    # The environments' CPU is read on one step in CPU_SAMPLE_EVERY and
    # scaled to the unroll: with a step that costs a known CPU time the
    # report must give it (an unscaled sample would read 1/8 of it).
    # Actor 1 (env 101) also sleeps 15 ms a step, which costs no CPU but
    # makes it the slowest by far: about 17.5 ms a step against 2.75-3.
    cfg = _config(env_name=UNEVEN_ID, unroll_length=40, minibatch_size=120,
                  max_policy_lag=1)
    collector, _ = _started(cfg)
    try:
        for u in range(3):
            stats = collector.collect()
            collector.publish(u + 1)
        report = collector.actor_report()
    finally:
        collector.close()
    expect = 1000 * BUSY_STEP_CPU
    assert expect <= report.env_ms < 1.3 * expect, report
    assert report.actor_ms > report.env_ms, report
    # About 6 on an idle machine; at least 1.78 with the 2 cores three
    # times oversubscribed (which stretches the fast actors' CPU-bound
    # steps, not the slow one's sleep).
    assert report.actor_spread > 1.5, report
    assert float(stats["collect/actor_busy_spread"]) > 1.5, stats


NICE_ID = "AlfNiceProbe-v0"


class NiceProbe(ScriptedPace):
    """`ScriptedPace` whose observation's middle is its process's
    niceness."""

    def _obs(self):
        return np.array([self._tag, os.nice(0), self._step], np.float32)


if NICE_ID not in gym.registry:
    gym.register(NICE_ID, entry_point=NiceProbe)


@pytest.mark.parametrize("niceness", [0, 7])
def test_actors_run_at_the_niceness_asked_for_and_the_learner_does_not(
        niceness):
    learner = os.nice(0)
    collector, alg = _started(_config(env_name=NICE_ID,
                                      actor_niceness=niceness))
    try:
        collector.collect()
        seen = _take(alg).observation[..., 1]
    finally:
        collector.close()
    assert os.nice(0) == learner
    assert set(seen.flatten().tolist()) == {min(19, learner + niceness)}


def test_a_cut_ends_each_environment_at_its_own_step_losing_nothing(
        tmp_path):
    """Straggler preemption in asynchronous collection: the learner cuts
    unrolls 0 and 1 (another rank is done); each actor ends them at its own
    step, no earlier than min_steps; unroll 2 is whole. The real steps of
    every column, unroll after unroll, are still its exact trajectory."""
    store = torch.distributed.FileStore(str(tmp_path / "store"), 1)
    # Steps of 10 ms or more: the cut, sent as unroll 0 begins, reaches the
    # actors long before they can step 8 times (with the scripted steps of
    # 0-1.5 ms alone, a learner held up 40 ms by the machine's load cut
    # no actor's unroll 0).
    cfg = _config(env_name=PACED_ID, unroll_length=8, max_policy_lag=1)
    collector = AsyncCollector(cfg)
    obs_space, action_space, names = collector.describe()
    alg = PPOAlgorithm(obs_space, action_space, cfg)
    episodes = EpisodeStats(cfg.local_num_envs, names)
    preemption = Preemption(store, 1, 2, sync_frac=0.5, min_fraction=0.5,
                            unroll_length=8)
    collector.start(alg, episodes, 100, 0, 1, preemption)
    store.add("preempt/0", 1)
    store.add("preempt/1", 1)
    columns, lengths = [[] for _ in range(cfg.local_num_envs)], []
    try:
        for u in range(3):
            collector.collect()
            exp = _take(alg)
            n = (alg.unroll_lengths if alg.unroll_lengths is not None else
                 torch.full((cfg.local_num_envs, ), exp.reward.shape[0]))
            alg.unroll_lengths = None
            assert collector.last_steps == int(n.sum())
            assert collector.last_preempted == bool((n < 8).any())
            lengths.append(n.tolist())
            for b in range(cfg.local_num_envs):
                columns[b].append(nest.map_structure(
                    lambda x: x[:int(n[b]), b], exp))
            collector.publish(u + 1)
    finally:
        collector.close()
    assert all(4 <= n <= 8 for n in lengths[0] + lengths[1]), lengths
    assert min(lengths[0]) < 8 and lengths[2] == [8, 8, 8], lengths
    assert int(store.get("preempt/2")) == 1  # unroll 2: counted as done
    for b in range(cfg.local_num_envs):
        _assert_exact_trajectory(
            nest.map_structure(lambda *xs: torch.cat(xs), *columns[b]),
            tag=100 + b)
    # Padding is not counted in the episode statistics: the steps of the
    # episodes under way are exactly the real steps since their start.
    for b in range(cfg.local_num_envs):
        last = columns[b][-1].observation[-1].long().tolist()
        done = bool(columns[b][-1].terminated[-1] |
                    columns[b][-1].truncated[-1])
        assert episodes._len[b] == (0 if done else last[2] + 1), b


def test_lag_zero_waits_for_every_version():
    """With max_policy_lag=0 no actor steps into unroll u+1 before the
    learner publishes version u+1; every stored step is exactly on-policy
    (with an inference worker: the next test, and
    test_inference_worker.py)."""
    cfg = _config(max_policy_lag=0)
    collector, alg = _started(cfg)
    try:
        for u in range(3):
            collector.collect()
            exp = _take(alg)
            assert (exp.policy_version == u).all(), exp.policy_version
            time.sleep(0.5)  # room for an actor that would run ahead
            assert collector._queue.empty()
            collector.publish(u + 1)
        report = collector.actor_report()
    finally:
        collector.close()
    # The actors' time went into waiting for versions (unrolls 1 and 2
    # waited out the learner's 0.5 s each: at least 1 s); the learner
    # waited only while an unroll was stepped (0.4 of its time with the
    # cores busy: no fixed bound), less than the actors did. Their 18 steps
    # and first inference took 0.04-0.17 s of each actor's time on a 2-core
    # machine loaded 6-10 deep (0.86-0.94): above 0.6 unless they take
    # 0.65 s; actors that do not wait, or a report that counts half their
    # waiting, read under it.
    assert report.actor_wait > 0.6, report
    assert report.learner_wait < report.actor_wait, report


def test_a_step_staler_than_the_bound_is_refused():
    """Negative control of the learner's check: actors allowed one version
    of lag, a learner that allows none sees a stale step and refuses it."""
    collector, alg = _started(_config(max_policy_lag=1))
    try:
        collector._lag = 0
        collector.collect()  # unroll 0: version 0, fresh
        _take(alg)
        with pytest.raises(TrainingError, match="behind"):
            collector.collect()  # unroll 1 without version 1 published
    finally:
        collector.close()


def test_unknown_environment_is_a_one_line_error_from_the_actor():
    collector = AsyncCollector(_config(env_name="NoSuchEnv-v0"))
    try:
        with pytest.raises(AlfError, match="unknown environment id") as e:
            collector.describe()
        assert "\n" not in str(e.value)
    finally:
        collector.close()


@pytest.mark.parametrize("kw, victim, named", [
    (dict(), 1, "actor 1 .* SIGKILL"),
    (dict(num_envs=1, minibatch_size=6, inference_workers=1), 1,
     "inference worker 0 .* SIGKILL"),  # after the one actor
])
def test_a_killed_process_is_named_with_its_signal(kw, victim, named):
    collector, alg = _started(_config(**kw))
    try:
        collector.collect()
        proc = collector._procs[victim]
        proc.kill()
        proc.join(10)
        with pytest.raises(CollectionError, match=named):
            for _ in range(20):
                collector.collect()
                _take(alg)
                collector.publish(collector._next)
    finally:
        collector.close()
    assert not any(p.is_alive() for p in collector._procs)


class FailingPPO(PPOAlgorithm):
    def rollout_step(self, observation):
        raise RuntimeError("no policy today")


def test_a_failing_inference_worker_is_named_with_its_error():
    # Its actors see it go first; the error names the worker and its cause.
    cfg = _config(algorithm_ctor=FailingPPO, inference_workers=1, num_envs=1,
                  minibatch_size=6)
    collector = AsyncCollector(cfg)
    obs_space, action_space, names = collector.describe()
    alg = FailingPPO(obs_space, action_space, cfg)
    collector.start(alg, EpisodeStats(cfg.local_num_envs, names), 100, 0, 1)
    try:
        with pytest.raises(CollectionError, match=r"inference worker 0 .*"
                           r"failed: RuntimeError: no policy today"):
            collector.collect()
    finally:
        collector.close()
    assert not any(p.is_alive() for p in collector._procs)


def test_a_policy_larger_than_a_pipe_is_published_to_waiting_actors():
    """Regression: with max_policy_lag=0 the actors wait inside their
    worker's answer while the learner publishes; a policy bigger than a
    pipe's buffer (64 KB) sent to an actor before its worker blocked the
    learner forever."""
    big = functools.partial(PPOAlgorithm, actor_network_ctor=functools.partial(
        ActorDistributionNetwork, hidden_sizes=(256, 256)),
        normalize_observations=True)
    cfg = _config(algorithm_ctor=big, max_policy_lag=0, inference_workers=1,
                  num_envs=1, minibatch_size=6)
    collector = AsyncCollector(cfg)
    obs_space, action_space, names = collector.describe()
    alg = big(obs_space, action_space, cfg)
    assert len(pickle.dumps(alg.acting_state())) > 2 ** 16
    collector.start(alg, EpisodeStats(cfg.local_num_envs, names), 100, 0, 1)
    try:
        for u in range(3):
            collector.collect()
            exp = _take(alg)
            assert (exp.policy_version == u).all()
            collector.publish(u + 1)
    finally:
        collector.close()


@pytest.mark.parametrize("kw, match", [
    (dict(inference_workers=1, unroll_mode="sync"),
     'inference_workers=1 needs unroll_mode="async"'),
    (dict(inference_workers=-1), "inference_workers=-1; it must be"),
])
def test_bad_inference_workers_is_a_one_line_error(kw, match):
    with pytest.raises(AlfError, match=match) as e:
        _config(**kw)
    assert "\n" not in one_line(e.value)  # what the CLI prints


def test_more_inference_workers_than_actors_is_refused():
    with pytest.raises(AlfError, match="inference_workers=4 is more than "
                       "the 3 actors of a process; use at most 3"):
        AsyncCollector(_config(inference_workers=4))


# ---- 2 ranks on asynchronously collected batches == 1 process ------------
def _async_ppo_update(rank, world_size):
    torch.set_num_threads(1)
    cfg = _config(num_envs=4, unroll_length=5, minibatch_size=20,
                  num_epochs=3).per_rank(world_size)
    collector, alg = _started(cfg, env_seed=100 + 2 * rank, torch_seed=rank)
    activate_ddp(alg)
    try:
        collector.collect()
    finally:
        collector.close()
    exp = nest.map_structure(torch.clone, alg.replay_buffer.gather_all())
    alg.train_iter(0.0)
    return exp, {n: t.clone() for n, t in distributed.synced_state(alg)}


def test_two_ranks_on_async_batches_equal_one_process_on_the_union():
    (exp0, state0), (exp1, state1) = values(run_ranks(_async_ppo_update, 2))
    union = nest.map_structure(lambda a, b: torch.cat([a, b], 1), exp0, exp1)
    cfg = _config(num_envs=4, unroll_length=5, minibatch_size=20,
                  num_epochs=3)
    torch.manual_seed(0)
    single = PPOAlgorithm(gym.spaces.Box(0, 1e6, (3, ), np.float32),
                          gym.spaces.Discrete(2), cfg)
    before = {n: t.clone() for n, t in single.state_dict().items()}
    for t in range(cfg.unroll_length):
        single.store(nest.map_structure(lambda x: x[t], union))
    single.train_iter(0.0)
    moved = 0
    for name, ref in single.state_dict().items():
        for state in (state0, state1):
            diff = (state[name].double() - ref.double()).abs().max().item()
            assert diff <= 1e-5, f"{name}: max abs diff {diff}"
        moved += not torch.equal(before[name], ref)
    assert moved > 0  # the update changed the weights


def test_a_stopped_actor_is_named_while_the_learner_waits(monkeypatch):
    """An actor that sends nothing (SIGSTOP here) leaves the learner
    waiting: a warning names it and its process state, and the unroll
    arrives once it is resumed."""
    import signal

    from alf.trainers import collector as collector_module
    from alf.trainers.stall_watch import StallWatch
    monkeypatch.setattr(collector_module, "_STALL_POLL", 0.1)
    monkeypatch.setattr(collector_module, "STALL_SECONDS", 0.5)
    warned = []
    check = StallWatch.check

    def resuming(self, waiting_for):
        lines = check(self, waiting_for)
        if lines:
            warned.extend(lines)
            os.kill(self._pids[1], signal.SIGCONT)
        return lines
    monkeypatch.setattr(StallWatch, "check", resuming)
    collector, alg = _started(_config(max_policy_lag=0), all_ready=True)
    try:
        collector.collect()
        _take(alg)
        os.kill(collector._procs[1].pid, signal.SIGSTOP)
        collector.publish(1)
        collector.collect()
        assert _take(alg).reward.shape[:2] == (6, 3)
    finally:
        os.kill(collector._procs[1].pid, signal.SIGCONT)
        collector.close()
    assert warned and all("actor 1 (environment 1 of this process)" in w
                          for w in warned), warned
    assert "is stopped (SIGSTOP" in warned[0], warned


def test_gsde_with_inference_workers_is_refused():
    """A worker's batch rows change owner from step to step: gSDE's noise,
    held per row, would hop between environments. (The trainer asks
    `check_algorithm` before anything is written.)"""
    from alf.utils.errors import ConfigError
    cfg = TrainerConfig(algorithm_ctor=PPOAlgorithm, num_envs=2,
                        unroll_length=4, minibatch_size=8).per_rank(1)
    box = gym.spaces.Box(-1, 1, (1, ))
    alg = PPOAlgorithm(
        gym.spaces.Box(-1, 1, (3, )), box, cfg,
        actor_network_ctor=functools.partial(ActorDistributionNetwork,
                                             gsde_interval=4))
    collector = AsyncCollector.__new__(AsyncCollector)  # no processes
    collector._n_workers, collector._seg = 1, None
    with pytest.raises(ConfigError, match=r"^TrainerConfig.inference_"
                       r"workers=1 acts for several actors' .*"
                       r"gsde_interval=4\) holds its noise per environment"):
        collector.check_algorithm(alg)
    collector._n_workers = 0
    collector.check_algorithm(alg)
