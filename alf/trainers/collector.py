"""Collection: environments -> experience stored in the algorithm.

Two collectors with one interface (`describe`, `start`, `collect`,
`publish`, `actor_report`, `close`); ``TrainerConfig.unroll_mode`` picks one:

* `SyncCollector` (``"sync"``, exact and reproducible): every iteration acts
  on all environments at once, waits for the slowest, and repeats
  ``unroll_length`` times; nothing steps while the learner trains.
* `AsyncCollector` (``"async"``): actor processes (`alf.trainers.actor`),
  each with a few environments and a CPU copy of the policy, step back to
  back: no environment waits for its siblings, for inference elsewhere, or
  for the learner, which trains on one unroll while the actors collect the
  next with the policy it last sent them (`publish`). Each actor fills its
  own columns of every unroll, or with ``segment_length`` the next free
  segment of any unroll (so no unroll waits for its slowest actor).
  Nothing of the actors shares the learner's interpreter (a thread there
  would fight the learner for the GIL and slow its many small torch
  calls; docs/benchmarks.md).

Policy versions: version ``v`` is the policy after ``v`` training
iterations, and the learner trains on unroll ``u`` at version ``u``. A step
of unroll ``u`` acted by version ``p`` has lag ``u - p``. The asynchronous
collector never acts on unroll ``u`` with a version below
``u - max_policy_lag`` (an environment that gets that far ahead waits for
the next version), and `collect` refuses an unroll holding a staler step.
So ``max_policy_lag = 0`` keeps the data exactly on-policy (environments
still do not wait for each other, but nothing steps during training), and
``1`` lets collection run one iteration ahead, as Cleanba's actor does.

Straggler preemption (`alf.trainers.preemption`, given to `start`): the
synchronous collector ends its unroll before the step at which enough other
ranks are done; the asynchronous one, while its learner waits for the
unroll, sends its actors a ``cut``, and each ends the unroll at its own step
(no earlier than the preemption's ``min_steps``), so the unroll's
environments may have different lengths (padded, and told to the algorithm
with `set_unroll_lengths`). Both say what they collected in ``last_steps``
and ``last_preempted``.

Only the learner's thread talks to the process group: actors have no
process group, and the receiving thread only queues their messages. Every
stored step carries the acting policy's ``rollout_info`` (PPO's
behaviour log-probability, used in the ratio) and its version.
"""
import multiprocessing as mp
import os
import queue
import signal
import threading
import time
from multiprocessing import connection
from typing import (TYPE_CHECKING, Callable, Dict, NamedTuple, NoReturn,
                    Optional, cast)

import gin
import gymnasium as gym
import torch

from alf import nest
from alf.environments.batched import BatchedEnvironment, check_time_step
from alf.environments.suite_gym import EnvironmentWorkerDied
from alf.trainers.actor import (actor_main, decode, encode,
                                raise_reported, transition)
from alf.trainers.episode_stats import EpisodeStats
from alf.trainers.inference_worker import inference_main
from alf.trainers.preemption import Preemption
from alf.trainers.seeds import actor_torch_seed
from alf.trainers.stall_watch import (STALL_SECONDS, StallWatch,
                                      WorkerWatch, held_back, stop_waited)
from alf.utils import distributed, process
# The collection errors are importable from here too (defined here first).
from alf.utils.errors import (CollectionError, CollectionStopped,
                              ConfigError, TrainingError)

if TYPE_CHECKING:
    from alf.algorithms.rl_algorithm import RLAlgorithm

UNROLL_MODES = ("sync", "async")
# How often a learner waiting for an unroll looks for actors that stopped
# sending (`StallWatch`), in seconds.
_STALL_POLL = 1.0


class ActorReport(NamedTuple):
    """Asynchronous collection's account of time, over the run so far.

    Attributes:
        actor_ms: the actors' CPU ms per env step (all of it).
        env_ms: the part of ``actor_ms`` inside the environments' step.
        actor_wait: the fraction of the actors' time spent waiting for a
            newer policy (the lag bound: collection is ahead of the learner).
        learner_wait: the fraction of the learner's time since its first
            `collect` spent waiting for an unroll (the learner is ahead of
            collection).
        inference_ms: the inference workers' CPU ms per env step (0
            without them).
        inference_batch: their mean batch, in requests (0 without them).
        actor_spread: the slowest actor's busy time over the fastest's
            (time not spent waiting for a version), per unroll, averaged:
            an unroll waits for its slowest actor, and at the lag bound the
            others wait for it (1.0: all alike). With
            ``segment_length``: the slowest segment's over the fastest's.
        busy_ms: the actors' wall ms per env step while not waiting for a
            version: more than ``actor_ms`` is time an actor was runnable
            without a core (or waited for its inference worker).
        segments: the actors collect segments (``segment_length``), so
            ``actor_spread`` compares segments, not actors.
    """
    actor_ms: float
    env_ms: float
    actor_wait: float
    learner_wait: float
    inference_ms: float = 0.0
    inference_batch: float = 0.0
    actor_spread: float = 1.0
    busy_ms: float = float("nan")
    segments: bool = False


class SyncCollector:
    """Lock-step collection in the learner's thread (the exact mode).

    Args:
        env: a `BatchedEnvironment` of this rank's environments.
        unroll_length: steps per environment per `collect`.
    """

    def __init__(self, env: BatchedEnvironment, unroll_length: int):
        self._env, self._unroll_length = env, unroll_length
        self._alg: Optional["RLAlgorithm"] = None
        self._episodes: Optional[EpisodeStats] = None
        self._obs: Optional[torch.Tensor] = None
        self._preemption: Optional[Preemption] = None
        self._version = 0
        self._owner = "training"  # whose workers (`start`)
        self.last_steps, self.last_preempted = 0, False

    def describe(self):
        """(observation_space, action_space, episode metric names)."""
        env = self._env
        return (env.observation_space, env.action_space,
                tuple(env.episode_info))

    def start(self, algorithm, episodes: EpisodeStats, env_seed: int,
              version: int, torch_seed: Optional[int] = None,
              preemption: Optional[Preemption] = None,
              stop_asked: Optional[Callable[[], bool]] = None) -> None:
        """Resets the environments (env ``i`` gets seed ``env_seed + i``)
        for ``algorithm`` to act in; ``version`` is the policy version of
        the first unroll. Acting draws from torch's global RNG, which the
        trainer seeds (``torch_seed`` is for `AsyncCollector`). With
        ``preemption``, an unroll ends early when it says so. Environments
        stepping in worker processes are watched (`WorkerWatch`), this
        first reset too: a hung worker is named, and once ``stop_asked()``
        a step waits for one only so long (`CollectionStopped`)."""
        self._alg, self._episodes, self._version = algorithm, episodes, version
        self._preemption = preemption
        pids = self._env.worker_pids
        rank = distributed.get_rank()
        multi = distributed.get_world_size() > 1
        # Whose workers, as their watch and their deaths name them.
        self._owner = f"rank {rank}'s training" if multi else "training"

        def name(i: int) -> str:
            return f"{self._owner} environment worker {i} of {len(pids)}"
        held = f"rank {rank}'s unroll cannot come" if multi else None
        asked = stop_asked or (lambda: False)
        if pids:
            # A watch of its own: the first reset (a simulator loading
            # its engine) must not set the steps' stop limit.
            self._env.watch(WorkerWatch(pids, name, asked, held))
        try:
            first = check_time_step(self._env, self._env.reset(seed=env_seed),
                                    "reset")
        except EnvironmentWorkerDied as e:
            raise e.whose(self._owner) from e
        self._obs = algorithm.observe(first.observation)
        if pids:
            self._env.watch(WorkerWatch(pids, name, asked, held))

    def collect(self) -> Dict[str, torch.Tensor]:
        """Collects one unroll into the algorithm; returns summaries."""
        alg, env, obs = self._alg, self._env, self._obs
        assert (alg is not None and self._episodes is not None and
                obs is not None), "start() was not called"
        alg.policy_version = self._version
        versions = torch.full((env.num_envs, ), self._version,
                              dtype=torch.int64)
        preemption, steps = self._preemption, self._unroll_length
        if preemption is not None:
            preemption.begin(self._version)
        # A dead environment worker fails the unroll; the trainer then
        # saves the last complete iteration, whose RNG this is.
        rng = torch.get_rng_state()
        with torch.inference_mode():
            for t in range(self._unroll_length):
                if preemption is not None and preemption.should_stop(t):
                    steps = t
                    break
                step = alg.rollout_step(obs)
                try:
                    ts = check_time_step(env, env.step(step.output))
                except EnvironmentWorkerDied as e:
                    torch.set_rng_state(rng)
                    raise e.whose(self._owner) from e
                except (CollectionError, CollectionStopped):
                    torch.set_rng_state(rng)  # the watch gave the step up
                    raise
                exp, obs = transition(alg, obs, step, ts, versions)
                alg.store(exp)
                self._episodes.update(ts.reward, ts.done, ts.episode_info)
        self._obs = obs
        self.last_preempted = steps < self._unroll_length
        self.last_steps = steps * env.num_envs
        if preemption is not None and not self.last_preempted:
            preemption.finished()
        return {}

    def publish(self, version: int) -> None:
        """The learner finished training to ``version``."""
        self._version = version

    def actor_report(self) -> None:
        """Not measured: acting is part of the learner's loop here, and
        environments may step in subprocesses."""
        return None

    def close(self) -> None:
        self._env.close()


class AsyncCollector:
    """Collection by actor processes that never wait for each other.

    Spawns, at construction, one actor process (`alf.trainers.actor`) per
    group of ``envs_per_actor`` environments. Each actor builds its
    environments and a copy of the algorithm from the same configuration,
    steps them back to back with the newest policy version it has, and sends
    each finished unroll back; a receiving thread in this process only
    moves those messages into a queue, so actors never wait on a learner
    that is training. `collect` assembles an unroll from all actors' columns
    and stores it in the algorithm in the learner's thread.

    With ``inference_workers`` W > 0 it also spawns W inference workers
    (`alf.trainers.inference_worker`), actor ``i`` served by worker
    ``i % W``: they act for the actors in batches.

    Args:
        config: the rank's `TrainerConfig` (uses ``local_num_envs``,
            ``envs_per_actor``, ``unroll_length``, ``max_policy_lag`` and
            ``inference_workers``).
    """

    def __init__(self, config):
        envs_per_actor = config.envs_per_actor
        if config.local_num_envs % envs_per_actor:
            raise ConfigError(
                f"TrainerConfig.envs_per_actor={envs_per_actor} does not "
                f"divide the {config.local_num_envs} environments of a "
                f"process; use a divisor of {config.local_num_envs}")
        self._T, self._lag = config.unroll_length, config.max_policy_lag
        self._alg = self._episodes = None
        self._queue: "queue.Queue" = queue.Queue()
        self._unrolls: Dict[int, dict] = {}  # unroll -> actor -> message
        self._error: Optional[BaseException] = None
        self._last_collect = None
        self._preemption: Optional[Preemption] = None
        self._stop_asked: Optional[Callable[[], bool]] = None
        self._others_wait = False
        self.last_steps, self.last_preempted = 0, False
        self._started = False  # `start` sent the actors their policy
        # Actors' CPU seconds (all of it, and in the environments' step)
        # over ``actor_steps`` env steps, their wall seconds and those spent
        # waiting for a version, and the learner's seconds since its first
        # `collect` and those spent waiting in it: for `actor_report`.
        self.actor_cpu = self.env_cpu = self.inference_cpu = 0.0
        self.actor_steps = self.inference_requests = 0
        self.inference_batches = 0.0
        self.spread_sum, self.unrolls = 0.0, 0
        self.actor_seconds = self.actor_blocked = 0.0
        self.learner_waited, self._first_collect = 0.0, None
        ctx = mp.get_context("spawn")
        # The actors' pipes and processes, then the inference workers'.
        self._conns, self._procs = [], []
        n = config.local_num_envs // envs_per_actor
        workers = config.inference_workers
        if workers > n:
            raise ConfigError(
                f"TrainerConfig.inference_workers={workers} is more than "
                f"the {n} actors of a process; use at most {n}")
        self._n_actors, self._n_workers = n, workers
        served: list = [[] for _ in range(workers)]  # workers' actor pipes
        self._envs_per_actor = envs_per_actor
        self._cols = [i * envs_per_actor for i in range(n)]
        # With segments: segments per unroll, and how many the actors have
        # claimed (a shared count: any actor takes the next free one).
        self._seg = config.segment_length
        self._parts, slots, length = n, None, self._T
        if self._seg is not None:
            self._parts = n * (self._T // self._seg)
            self._claimed = ctx.Value("q", 0)
            slots, length = (self._claimed, self._parts), self._seg
        try:
            gin_config = gin.config_str()
            # Imported here: trainer_config imports this module.
            from alf.trainers.trainer_config import without_evaluation_envs
            config = without_evaluation_envs(config)
            spec = (gym.spec(config.env_name) if config.env_name in gym.registry
                    else None)
            for i in range(n):
                mine, theirs = ctx.Pipe()
                policy = None
                if workers:
                    policy, worker_end = ctx.Pipe()
                    served[i % workers].append(worker_end)
                proc = ctx.Process(target=actor_main, daemon=True,
                                   name=f"alf-actor-{i}", args=(
                                       theirs, gin_config, config, spec,
                                       envs_per_actor, length, self._lag,
                                       distributed.get_rank(), policy, slots))
                with process.run_signals_held():  # its start-up: no traceback
                    proc.start()
                theirs.close()
                if policy is not None:
                    policy.close()  # the actor's now
                self._conns.append(mine)
                self._procs.append(proc)
            for j in range(workers):
                mine, theirs = ctx.Pipe()
                proc = ctx.Process(target=inference_main, daemon=True,
                                   name=f"alf-inference-{j}", args=(
                                       theirs, served[j], gin_config, config,
                                       spec))
                with process.run_signals_held():  # its start-up: no traceback
                    proc.start()
                theirs.close()
                for c in served[j]:
                    c.close()
                self._conns.append(mine)
                self._procs.append(proc)
            self._watch = StallWatch(
                [p.pid for p in self._procs[:n]], self._name, STALL_SECONDS,
                servers=[p.pid for p in self._procs[n:]])
            self._receiver = threading.Thread(target=self._receive, daemon=True,
                                              name="alf-actor-receiver")
            self._receiver.start()
        except BaseException:
            # Interrupted (a Ctrl-C while they start): the trainer never
            # gets this collector to close, and an actor ignores the
            # signals multiprocessing's exit would end it with.
            for proc in self._procs:
                proc.kill()
                proc.join()
            for conn in self._conns:
                conn.close()
            raise

    # ---- set-up -----------------------------------------------------------
    def describe(self):
        """(observation_space, action_space, episode metric names) of the
        environments, from the first actor that is ready (waits for it)."""
        while True:
            actor, message = self._get()
            if message[0] == "ready":
                return message[1:]

    def check_algorithm(self, algorithm) -> None:
        """Refuses an algorithm this collection cannot feed (the trainer
        asks before anything is written).

        Raises:
            ConfigError: segments (``segment_length``) for an off-policy
                algorithm; inference workers for a policy exploring with
                gSDE.
        """
        from alf.algorithms.rl_algorithm import OnPolicyAlgorithm
        gsde = [m for m in algorithm.modules()
                if getattr(m, "gsde_interval", None) is not None]
        if self._n_workers and gsde:
            # gSDE holds its noise per row of the acting batch; a worker's
            # batch joins whichever actors asked, in any order and number.
            raise ConfigError(
                f"TrainerConfig.inference_workers={self._n_workers} acts "
                "for several actors' environments in one batch whose rows "
                "change from step to step, and gSDE (ActorDistributionNetwork"
                f".gsde_interval={gsde[0].gsde_interval}) holds its noise "
                "per environment: use inference_workers=0 or drop "
                "gsde_interval")
        if self._seg is not None and not isinstance(algorithm,
                                                    OnPolicyAlgorithm):
            raise ConfigError(
                f"TrainerConfig.segment_length={self._seg} is for "
                f"on-policy algorithms; {type(algorithm).__name__} keeps "
                "each environment's steps in one replay column: drop "
                "segment_length")

    def start(self, algorithm, episodes: EpisodeStats, env_seed: int,
              version: int, torch_seed: int,
              preemption: Optional[Preemption] = None,
              stop_asked: Optional[Callable[[], bool]] = None) -> None:
        """Sends every actor ``algorithm``'s policy at ``version`` (also the
        index of the first unroll) and its seeds; env ``i`` of this rank
        gets seed ``env_seed + i``. Finished episodes go to ``episodes``.
        With ``preemption``, `collect` cuts an unroll short when it says
        so; once ``stop_asked()``, it waits for an unroll only
        `StallWatch.stop_limit` longer (`CollectionStopped`)."""
        self._alg, self._episodes, self._next = algorithm, episodes, version
        self._preemption, self._stop_asked = preemption, stop_asked
        # Other ranks wait for this one's unroll in their next collective.
        self._others_wait = distributed.get_world_size() > 1
        self._watch.restart()  # the actors waited for "start" until now
        self.check_algorithm(algorithm)
        if self._seg is not None:
            with self._claimed.get_lock():
                self._claimed.value = version * self._parts
        state = algorithm.acting_state()
        # The workers first (they draw the actions: seeds after the
        # actors'), ready before any actor steps, so that their start-up
        # does not count as the actors' acting time.
        workers = self._conns[self._n_actors:]
        for j, conn in enumerate(workers):
            self._send(conn, ("start", algorithm.observation_space,
                              algorithm.action_space,
                              actor_torch_seed(torch_seed,
                                               self._n_actors + j),
                              version, state))
        ready: set = set()
        while len(ready) < len(workers):
            sender, message = self._get()
            if sender >= self._n_actors and message[0] == "ready":
                ready.add(sender)
        state = self._actor_state(state)
        for i, (conn, col) in enumerate(zip(self._conns, self._cols)):
            self._send(conn, ("start", env_seed + col,
                              actor_torch_seed(torch_seed, i), version,
                              state))
        self._started = True

    # ---- the learner's side -----------------------------------------------
    def collect(self) -> Dict[str, torch.Tensor]:
        """Waits for every actor's part of the next unroll and stores it in
        the algorithm; returns lag and waiting summaries.

        Raises:
            CollectionError: an actor failed or died.
            TrainingError: a step staler than ``max_policy_lag``.
        """
        u, start = self._next, time.perf_counter()
        if self._first_collect is None:
            self._first_collect = start
        received = self._unrolls.setdefault(u, {})
        preemption, cut = self._preemption, False
        stop_seen: Optional[float] = None  # when a stop was first seen
        if preemption is not None:
            preemption.begin(u)
        while len(received) < self._parts:
            if preemption is not None and not cut and preemption.poll():
                # Actors that already sent theirs ignore it.
                message = encode(("cut", u, preemption.min_steps))
                for i, conn in enumerate(self._conns[:self._n_actors]):
                    if i not in received:
                        self._send(conn, message)
                cut = True
            wait = (_STALL_POLL if preemption is None or cut else
                    min(preemption.poll_seconds, _STALL_POLL))
            actor, message = self._get(wait)
            if (actor is None and self._others_wait and
                    time.perf_counter() - start > self._watch.stop_limit):
                self._give_up_if_stopped(received)
            if self._stop_asked is not None and self._stop_asked():
                stop_seen = stop_seen or time.perf_counter()
                if time.perf_counter() - stop_seen > self._watch.stop_limit:
                    self._stopped_waiting(received)
            if actor is None:
                self._watch.check(self._waiting_for(received))
            elif message[0] == "unroll":
                # Keyed by the segment filled, or by the actor (its columns).
                key = actor if self._seg is None else message[6]
                self._unrolls.setdefault(message[1], {})[key] = (actor,
                                                                 message)
        del self._unrolls[u]
        waited = time.perf_counter() - start
        senders, parts = zip(*(received[i] for i in range(self._parts)))
        # Each part's episodes, per sending actor's environments, in the
        # order collected (a part holds only real steps: no padding).
        E = self._envs_per_actor
        for (_, _, part, info, *_), actor in zip(parts, senders):
            first = self._cols[actor]
            self._episodes.update_segment(
                part.reward, part.terminated | part.truncated, info,
                range(first, first + E))
        exp, lengths = (self._columns(parts) if self._seg is None else
                        self._segments(parts))
        T = int(lengths.max())
        lag = u - exp.policy_version
        if int(lag.max()) > self._lag:
            raise TrainingError(
                f"unroll {u} holds a step of policy version "
                f"{int(exp.policy_version.min())}, {int(lag.max())} behind "
                f"(max_policy_lag={self._lag})")
        alg = self._alg
        alg.policy_version = u
        if alg.observation_normalizer is not None:
            for p in parts:
                alg.observation_normalizer.add_pending(p[4])
        ragged = bool((lengths < T).any())
        if ragged:
            alg.set_unroll_lengths(lengths)
        exp = nest.map_structure(lambda x: x.to(alg.device), exp)
        for t in range(T):
            row = nest.map_structure(lambda x: x[t], exp)
            alg.store(row)
        self.last_steps = int(lengths.sum())
        self.last_preempted = T < self._T or ragged
        if preemption is not None and not self.last_preempted:
            preemption.finished()
        self._next = u + 1
        now = time.perf_counter()
        period, self._last_collect = now - (self._last_collect or start), now
        self._watch.unroll_took(period)
        lag = lag.double()
        # Where the actors' time went during this unroll (mean over actors):
        # waiting for a newer policy (the lag bound), stepping environments,
        # and the rest (inference, bookkeeping, sending).
        seconds, blocked, stepping, cpu, env_cpu, batch, inference_cpu = (
            torch.tensor([p[5][i] for p in parts], dtype=torch.float64)
            for i in range(7))
        seconds = seconds.clamp(min=1e-9)
        self.actor_cpu += float(cpu.sum())
        self.env_cpu += float(env_cpu.sum())
        self.actor_steps += self.last_steps
        self.actor_seconds += float(seconds.sum())
        self.actor_blocked += float(blocked.sum())
        self.learner_waited += waited
        busy = (seconds - blocked).clamp(min=1e-9)
        spread = busy.max() / busy.min()
        self.spread_sum += float(spread)
        self.unrolls += 1
        summaries = {
            "collect/policy_lag_mean": lag.mean(),
            "collect/policy_lag_max": lag.max(),
            "collect/learner_wait_fraction": torch.tensor(
                min(waited / max(period, 1e-9), 1.0)),
            "collect/actor_wait_fraction": (blocked / seconds).mean(),
            "collect/actor_busy_spread": spread,
            "collect/actor_env_fraction": (stepping / seconds).mean()}
        if self._n_workers:
            self.inference_cpu += float(inference_cpu.sum())
            # batch is each actor's mean over its steps: weigh by steps.
            steps = torch.tensor([p[2].reward.shape[0] for p in parts],
                                 dtype=torch.float64)
            self.inference_batches += float((batch * steps).sum())
            self.inference_requests += int(steps.sum())
            summaries["collect/inference_batch_mean"] = torch.tensor(
                self.inference_batches / max(self.inference_requests, 1))
        return summaries

    def _give_up_if_stopped(self, received: dict) -> None:
        """Fails an unroll that an actor stopped (SIGSTOP, a debugger)
        holds back: the other ranks would wait for this one in their next
        collective until it timed out, blaming the rank, unsaved; failing
        now, it joins them to save the last complete iteration."""
        stopped = self._watch.stopped(self._waiting_for(received),
                                      self._watch.stop_limit)
        if stopped:
            raise CollectionError(held_back(
                "; ".join(stopped),
                f"rank {distributed.get_rank()}'s unroll cannot come"))

    def _stopped_waiting(self, received: dict) -> NoReturn:
        """Ends the wait for an unroll that a stop has waited for long
        enough: the actors that hold it back are named."""
        limit = self._watch.stop_limit
        silent = self._watch.silent(self._waiting_for(received), limit)
        raise CollectionStopped("; ".join([stop_waited("the unroll", limit)]
                                          + silent))

    def _waiting_for(self, received: dict) -> range | list:
        """The actors whose part of the unroll has not come: those without
        their columns in ``received``, or with segments (which any actor
        fills) every actor."""
        if self._seg is not None:
            return range(self._n_actors)
        return [i for i in range(self._n_actors) if i not in received]

    def _columns(self, parts):
        """(experience [T, B], lengths [B]) of an unroll from each actor's
        columns, in environment order; a column that ended early repeats
        its last step (padding, left out of training by
        `set_unroll_lengths`)."""
        lengths = torch.cat([torch.full((p[2].reward.shape[1], ),
                                        p[2].reward.shape[0])
                             for p in parts])
        T = int(lengths.max())
        pad = lambda x: x if x.shape[0] == T else torch.cat(  # noqa: E731
            [x, x[-1:].expand((T - x.shape[0], ) + x.shape[1:])])
        exp = nest.map_structure(
            lambda *xs: torch.cat([pad(x) for x in xs], 1),
            *[p[2] for p in parts])
        return exp, lengths

    def _segments(self, parts):
        """(experience [T, B], lengths [B]) of an unroll from its segments
        (``segment_length``): segment ``k`` of the ``S x n`` (``S``
        segments per column, ``n`` actors' worth of columns) fills rows
        ``(k // n) x segment_length`` on, columns ``(k % n) x E`` on, and
        every segment's last step is marked ``truncated``: the column's
        next row is another environment's, so GAE bootstraps there from
        the stored next observation, as at a time limit."""
        E = self._envs_per_actor
        S, n = self._T // self._seg, self._n_actors

        def fold(*xs):
            x = torch.stack(xs)  # [S * n, seg, E, ...]
            x = x.view((S, n) + x.shape[1:]).transpose(1, 2)
            return x.reshape((self._T, n * E) + x.shape[4:])

        exp = nest.map_structure(fold, *[p[2] for p in parts])
        ends = torch.zeros(self._T, 1, dtype=torch.bool)
        ends[self._seg - 1::self._seg] = True
        exp = exp._replace(truncated=exp.truncated | ends)
        return exp, torch.full((n * E, ), self._T)

    def actor_report(self) -> Optional[ActorReport]:
        """Where the actors' and the learner's time went so far (see
        `ActorReport`); None before the first unroll."""
        if not self.actor_steps:
            return None
        elapsed = time.perf_counter() - cast(float, self._first_collect)
        return ActorReport(
            1000 * self.actor_cpu / self.actor_steps,
            1000 * self.env_cpu / self.actor_steps,
            self.actor_blocked / max(self.actor_seconds, 1e-9),
            min(self.learner_waited / max(elapsed, 1e-9), 1.0),
            1000 * self.inference_cpu / self.actor_steps,
            self.inference_batches / max(self.inference_requests, 1),
            self.spread_sum / self.unrolls,
            1000 * (self.actor_seconds - self.actor_blocked) /
            self.actor_steps, self._seg is not None)

    def publish(self, version: int) -> None:
        """Sends the learner's policy at ``version`` to every inference
        worker and actor."""
        state = self._alg.acting_state()
        data = encode(("state", version, state))
        # The workers first: an actor waiting for a worker's answer reads
        # nothing from the learner until the worker has the version it
        # waits for.
        for conn in self._conns[self._n_actors:]:
            self._send(conn, data, dead_ok=True)
        if self._n_workers:
            data = encode(("state", version, self._actor_state(state)))
        for conn in self._conns[:self._n_actors]:
            self._send(conn, data, dead_ok=True)

    def _actor_state(self, state: dict) -> dict:
        """What the actors need of an ``acting_state``: all of it, or with
        inference workers (who act for them) the observation normaliser's
        statistics alone, a message small enough for a pipe's buffer."""
        if not self._n_workers:
            return state
        return {"tensors": {k: v for k, v in state["tensors"].items()
                            if k.startswith("observation_normalizer.")},
                "scalars": state["scalars"]}

    def close(self) -> None:
        """Stops the actors and inference workers (killing any that do not
        stop in time)."""
        stop = encode(("stop", ))
        for conn, proc in zip(self._conns, self._procs):
            try:
                conn.send_bytes(stop)
            except OSError:
                pass  # already gone
            # One stopped (SIGSTOP) reads "stop" only once resumed.
            if proc.pid is not None and proc.is_alive():
                try:
                    os.kill(proc.pid, signal.SIGCONT)
                except OSError:
                    pass
        # Before `start` no actor holds anything to finish, and one still
        # importing torch or building its simulator reads "stop" only once
        # ready: a stop during the start-up waited 10 s for it.
        deadline = time.time() + (10 if self._started else 1)
        for proc in self._procs:
            proc.join(timeout=max(deadline - time.time(), 0.1))
            if proc.is_alive():
                proc.kill()
                proc.join()
        # Every process is gone, so the receiver meets the end of every
        # pipe and returns; only then are the pipes closed. A pipe closed
        # under the receiver's read frees its descriptor for the next pipe
        # opened (the next collector's), whose messages the old receiver
        # would then read from the middle.
        receiver = getattr(self, "_receiver", None)
        if receiver is not None:
            receiver.join(timeout=10)
        for conn in self._conns:
            conn.close()

    # ---- messages -----------------------------------------------------------
    def _send(self, conn, message, dead_ok: bool = False) -> None:
        """Sends ``message``; a process that is gone raises
        `CollectionError`, or with ``dead_ok`` is left to the next
        `collect` (its receiver meets the closed pipe): `publish` comes in
        the middle of an iteration, whose training is done, and the
        trainer saves only iterations that are complete."""
        if not isinstance(message, bytes):
            message = encode(message)
        try:
            conn.send_bytes(message)
        except OSError:
            if not dead_ok:
                self._raise_dead()

    def _get(self, wait: Optional[float] = None):
        """The next (actor, message) from any actor, or (None, None) after
        ``wait`` seconds without one (None: waits); raises for errors."""
        while True:
            try:
                actor, data = self._queue.get(timeout=wait or 1.0)
            except queue.Empty:
                if wait is not None:
                    return None, None
                continue  # lets a second Ctrl-C through
            if data is None:
                self._raise_dead(actor)
            if actor < self._n_actors:
                self._watch.heard(actor)
            message = decode(data)
            if message[0] == "error":
                if message[2] == "InferenceWorkerDied":
                    # Name the cause, not the actor that saw it: a worker
                    # that died, or one whose own error message follows.
                    worker = self._n_actors + actor % self._n_workers
                    self._procs[worker].join(timeout=5)
                    if self._procs[worker].exitcode != 0:
                        self._raise_dead(worker)
                    continue
                raise_reported(message, self._name(actor), CollectionError)
            return actor, message

    def _raise_dead(self, actor: Optional[int] = None):
        if actor is None:
            actor = next((i for i, p in enumerate(self._procs)
                          if not p.is_alive()), 0)
        proc = self._procs[actor]
        proc.join(timeout=5)
        # Worded as every other process's death (the evaluator's, an
        # environment worker's, a rank's).
        raise CollectionError(
            f"{self._name(actor)} {process.describe_exit(proc.exitcode)}")

    def _name(self, index: int) -> str:
        """Names process ``index`` of ``_procs`` for an error message."""
        n, workers = self._n_actors, self._n_workers
        if index >= n:
            j = index - n
            return (f"inference worker {j} (of actors "
                    f"{', '.join(map(str, range(j, n, workers)))})")
        first = self._cols[index]
        last = first + self._envs_per_actor - 1
        # Every rank has an actor 0: name the rank where there are several.
        whose = (f"rank {distributed.get_rank()}"
                 if distributed.get_world_size() > 1 else "this process")
        return f"actor {index} (" + (
            f"environment {first}" if first == last else
            f"environments {first}-{last}") + f" of {whose})"

    def _receive(self) -> None:
        """The receiving thread: actors' messages into the queue (``None``
        when an actor's pipe closes)."""
        open_conns = dict(enumerate(self._conns))
        try:
            while open_conns:
                for conn in connection.wait(list(open_conns.values())):
                    actor = self._conns.index(conn)
                    # wait() returns the objects it was given: Pipe ends.
                    conn = cast(connection.Connection, conn)
                    try:
                        self._queue.put((actor, conn.recv_bytes()))
                    except (EOFError, OSError):
                        self._queue.put((actor, None))
                        del open_conns[actor]
        except (OSError, ValueError):
            pass  # `close` closed the pipes
