"""The actor process of asynchronous collection (see `collector`).

An actor owns a few environments (one for MetaDrive) and its own copy of the
algorithm, on the CPU. It steps its environments back to back, acting with
the newest policy version it has received, and sends the learner one message
per finished unroll: its columns of the unroll, with the behaviour
``rollout_info`` and policy version of every step. So an environment never
waits for its siblings, for inference in another process, or for the
learner, except when it would act more than ``max_policy_lag`` versions
behind: then it waits for the next version. With an inference worker
(``TrainerConfig.inference_workers``) the actor's observations go to it,
which acts for many actors in one batch (`alf.trainers.inference_worker`),
and the actor keeps its copy of the algorithm only to normalise
observations. With ``TrainerConfig.segment_length`` an actor sends segments
of that many steps, each the next free one of its rank's unrolls (a count
shared by the rank's actors), instead of its own columns of every unroll.

Messages (`encode`d, over the actor's pipe):

* learner -> actor: ``("start", env_seed, torch_seed, version, state)``,
  ``("state", version, state)``, ``("cut", u, min_steps)`` (straggler
  preemption: end unroll ``u`` now, or once it has ``min_steps`` steps),
  ``("stop",)``;
* actor -> learner: ``("ready", observation_space, action_space,
  episode metric names)``,
  ``("unroll", u, experience, episode_info, normalizer_sums, (seconds,
  seconds waiting for a version, seconds in the environments' step, CPU
  seconds, CPU seconds in the environments' step, the inference worker's
  mean batch and CPU seconds for this actor, 0 without one), segment)``
  (``segment``: which of unroll ``u``'s segments this is, with
  ``TrainerConfig.segment_length``, else None) (the
  environments' CPU time counts this thread only: in-process environments,
  e.g. one MetaDrive engine per actor; an ``async_env`` subprocess is not
  counted; it is measured on every `CPU_SAMPLE_EVERY`-th step and scaled
  to the unroll),
  ``("error", kind, type name, one-line message, traceback)``, ``kind``
  one of `report_error`'s.
"""
import pickle
import time
import traceback
from typing import NoReturn, Optional, Tuple

import torch
from absl import logging

from alf import nest
from alf.data_structures import AlgStep, Experience
from alf.environments.batched import check_environment, check_time_step


def actor_main(conn, gin_config: str, config, env_spec, num_envs: int,
               unroll_length: int, max_policy_lag: int, rank: int = 0,
               policy_conn=None, slots=None) -> None:
    """Entry point of an actor process (spawned by `AsyncCollector`).

    Args:
        conn: the actor's end of its pipe to the learner.
        gin_config: the learner's ``gin.config_str()``: the actor builds its
            environments and algorithm with the same bindings.
        config: the rank's `TrainerConfig` (`TrainerConfig.per_rank`).
        env_spec: the learner's gymnasium registration of
            ``config.env_name``, if it has one: an environment registered
            at run time (by a script or a test) is registered here too.
        num_envs: environments of this actor.
        unroll_length: steps per environment per unroll.
        max_policy_lag: see `collector`.
        rank: the rank this actor collects for (`straggler.collecting_rank`).
        policy_conn: the actor's pipe to its inference worker
            (`alf.trainers.inference_worker`), which then acts for it;
            None: the actor acts with its own copy of the policy.
        slots: with ``TrainerConfig.segment_length``: the rank's shared
            count of segments claimed (a ``multiprocessing.Value``) and the
            segments per unroll; ``unroll_length`` is then the segment's.
            None: the actor fills its own columns of every unroll.
    """
    import os
    from alf.environments import env_fn, straggler
    os.environ[straggler.RANK_VARIABLE] = str(rank)
    env_fn.prepare_worker()
    env_fn.set_environment_process()
    torch.set_num_threads(1)
    if config.actor_niceness:
        os.nice(config.actor_niceness)
    env = None
    try:
        adopt_config(gin_config, env_spec)
        env = check_environment(config.env_load_fn(
            config.env_name, num_envs=num_envs, seed=None,
            asynchronous=False), config.env_load_fn)
        algorithm = config.algorithm_ctor(
            observation_space=env.observation_space,
            action_space=env.action_space, config=config)
        _send(conn, ("ready", env.observation_space, env.action_space,
                     tuple(env.episode_info)))
        remote = None
        if policy_conn is not None:
            from alf.trainers.inference_worker import RemotePolicy
            remote = RemotePolicy(policy_conn)
        _Actor(conn, env, algorithm, unroll_length, max_policy_lag,
               remote, slots).run()
    except BaseException as e:  # noqa: BLE001 - reported to the learner
        report_error(conn, e)
    finally:
        if env is not None:
            env.close()
    skip_shutdown()


def skip_shutdown() -> None:
    """Ends a helper process (actor, inference worker, evaluator) that is
    done, without the interpreter's shutdown: with torch loaded that takes
    ~0.75 s of CPU against ~0.15 (2-core machine, 2026-11-29), the trainer
    waits for every helper at its end, and a loaded machine (or actors
    below the learner's priority) stretches it to seconds. What it said is
    flushed first."""
    from alf.utils import process
    process.exit_now(0)


def adopt_config(gin_config: str, env_spec) -> None:
    """In a helper process (an actor, the evaluator): parses the learner's
    gin bindings and registers its gymnasium environment ``env_spec`` (an
    environment registered at run time, by a script or a test), if any."""
    from alf.trainers.config_parser import parse_config
    parse_config([], [gin_config])
    if env_spec is not None:
        import gymnasium as gym
        gym.registry.setdefault(env_spec.id, env_spec)


def report_error(conn, error: BaseException) -> None:
    """Sends the learner a helper process's ``("error", ...)`` message for
    ``error`` (see the module's doc); nothing if the learner is gone. Its
    kind: ``"input"`` (an `AlfError`: the user's mistake), ``"failure"``
    (a retryable `AlfError`: a process of the helper's own died) or
    ``"crash"`` (anything else)."""
    from alf.utils.errors import AlfError, one_line
    kind = ("crash" if not isinstance(error, AlfError) else
            "failure" if error.retryable else "input")
    try:
        _send(conn, ("error", kind, type(error).__name__, one_line(error),
                     traceback.format_exc()))
    except OSError:
        pass


def raise_reported(message, who: str, error_cls) -> NoReturn:
    """Raises what a helper's ``("error", ...)`` ``message`` reports: its
    one line as an `AlfError` for a user's mistake; ``error_cls`` (which a
    restart may get past) naming ``who`` for a failure, or for a crash
    after logging the helper's traceback (a user's mistake's or a
    failure's one line says all, and every actor reports the same
    mistake)."""
    from alf.utils.errors import AlfError
    _, kind, name, text, tb = message
    if kind == "input":
        raise AlfError(text)
    if kind == "failure":
        raise error_cls(f"{who}: {text}")
    logging.error("%s failed:\n%s", who, tb)
    raise error_cls(f"{who} failed: {name}: {text}")


def encode(message) -> bytes:
    """A message as bytes, its CPU tensors as numpy arrays: pickling a torch
    tensor costs many times a numpy array's, more than acting on one step
    (docs/benchmarks.md)."""
    return pickle.dumps(nest.map_structure(_to_numpy, message),
                        protocol=pickle.HIGHEST_PROTOCOL)


def decode(data: bytes):
    """The message that `encode` turned into ``data``."""
    return nest.map_structure(_from_numpy, pickle.loads(data))


def transition(algorithm, obs: torch.Tensor, step, ts,
               versions: torch.Tensor) -> Tuple[Experience, torch.Tensor]:
    """One step's stored `Experience` and the next observation to act on.

    Both collectors (lock-step and actors) store through here. Where an
    episode ended, the environment has already reset: the stored next
    observation is the episode's final one (observed without updating the
    normaliser), the returned one the new episode's first.

    Args:
        algorithm: the acting algorithm (its ``observe``).
        obs: the observed (normalised) input of ``step``.
        step: ``algorithm.rollout_step(obs)``.
        ts: the environments' answer to ``step.output``.
        versions: the acting policy version of each environment.
    """
    next_obs = algorithm.observe(ts.observation)
    stored_next = next_obs
    if ts.final_observation is not None:
        stored_next = algorithm.observe(ts.final_observation, update=False)
    return Experience(obs, step.output, ts.reward, ts.terminated,
                      ts.truncated, stored_next, step.info,
                      versions), next_obs


class _Wire:
    """A tensor in transit, as a numpy array (which keeps its dtype)."""
    __slots__ = ("array", )

    def __init__(self, array):
        self.array = array

    def __reduce__(self):
        return _Wire, (self.array, )


def _to_numpy(x):
    if isinstance(x, torch.Tensor) and x.device.type == "cpu" and \
            x.dtype != torch.bfloat16 and not x.requires_grad:
        return _Wire(x.numpy())
    return x


def _from_numpy(x):
    return torch.from_numpy(x.array) if isinstance(x, _Wire) else x


def _send(conn, message) -> None:
    conn.send_bytes(encode(message))


def _recv(conn):
    return decode(conn.recv_bytes())


# The environments' CPU time is measured on one step in this many and
# scaled to the unroll: reading a thread's CPU clock is a system call (~3 us
# on these machines), and two a step cost the actor as much as its
# observation normaliser.
CPU_SAMPLE_EVERY = 8


class _Stop(Exception):
    pass


class _Actor:
    """The actor's loop (see the module's doc)."""

    def __init__(self, conn, env, algorithm, unroll_length: int,
                 max_policy_lag: int, remote=None, slots=None):
        self._conn, self._env, self._alg = conn, env, algorithm
        self._remote, self._slots = remote, slots
        self._T, self._lag = unroll_length, max_policy_lag
        self._version = 0
        self._storage = None
        self._rows: list = []  # [step][leaf]: views of the storage
        self._cut = (-1, 0)  # (unroll, least steps) of the last "cut"

    def _handle(self, message) -> Optional[tuple]:
        kind = message[0]
        if kind == "stop":
            raise _Stop
        if kind == "cut":
            self._cut = message[1:]
            return None
        if kind == "state":
            self._version = message[1]
            self._alg.load_acting_state(message[2])
            return None
        return message

    def _poll(self, block: bool) -> Optional[tuple]:
        """Applies the learner's messages; with ``block``, waits for one."""
        out = None
        while block or self._conn.poll():
            out = self._handle(_recv(self._conn)) or out
            block = False
        return out

    def run(self) -> None:
        try:
            start = self._poll(block=True)
            while start is None or start[0] != "start":
                start = self._poll(block=True)
            _, env_seed, torch_seed, version, state = start
            torch.manual_seed(torch_seed)
            self._version = version
            self._alg.load_acting_state(state)
            with torch.inference_mode():
                self._loop(env_seed, version)
        except _Stop:
            return

    def _claim(self) -> Tuple[int, int, float]:
        """(unroll, segment, seconds waited for a version): the next free
        segment of the rank's unrolls (``slots``), once this actor has a
        version recent enough to act on its unroll."""
        count, per_unroll = self._slots
        since = time.perf_counter()
        while True:
            with count.get_lock():
                claimed = count.value
                unroll = claimed // per_unroll
                if unroll - self._version <= self._lag:
                    count.value = claimed + 1
                    return (unroll, claimed % per_unroll,
                            time.perf_counter() - since)
            self._poll(block=True)  # too far ahead: wait for a version

    def _act(self, obs: torch.Tensor, unroll: int):
        """(step, acting version, seconds waited for a version, the
        inference worker's batch, its CPU seconds) of acting on ``obs`` in
        ``unroll``."""
        if self._remote is not None:
            # The worker holds the request until it has a version no older
            # than the bound allows.
            output, info, version, batch, held, used = self._remote.act(
                obs, unroll - self._lag)
            return AlgStep(output=output, info=info), version, held, batch, \
                used
        waited = 0.0
        if unroll - self._version > self._lag:
            since = time.perf_counter()
            while unroll - self._version > self._lag:
                self._poll(block=True)  # too far ahead: wait for a version
            waited = time.perf_counter() - since
        return self._alg.rollout_step(obs), self._version, waited, 0, 0.0

    def _loop(self, env_seed: int, unroll: int) -> None:
        alg, env = self._alg, self._env
        obs = alg.observe(check_time_step(env, env.reset(seed=env_seed),
                                          "reset").observation)
        names = tuple(env.episode_info)
        nan = torch.full((env.num_envs, ), float("nan"))
        versions = (-1, nan)  # (version, its column of policy versions)
        t = 0
        clock, cpu = time.perf_counter, time.thread_time
        began, began_cpu = clock(), cpu()
        waited = stepping = stepping_cpu = 0.0
        batched = 0  # the inference worker's batch sizes, summed
        inference_cpu = 0.0  # its CPU seconds for this actor
        segment = None  # with ``slots``: the segment of ``unroll`` filled
        while True:
            self._poll(block=False)
            if t == 0 and self._slots is not None:
                unroll, segment, held = self._claim()
                waited += held
            step, version, held, batch, used = self._act(obs, unroll)
            waited += held
            batched += batch
            inference_cpu += used
            timed = t % CPU_SAMPLE_EVERY == 0
            if timed:
                since_cpu = cpu()
            since = clock()
            ts = env.step(step.output)
            stepping += clock() - since
            if timed:
                stepping_cpu += cpu() - since_cpu
            check_time_step(env, ts)  # not the environment's time
            if versions[0] != version:
                versions = (version, torch.full(
                    (env.num_envs, ), version, dtype=torch.int64))
            exp, next_obs = transition(alg, obs, step, ts, versions[1])
            self._write(t, (exp, {k: ts.episode_info.get(k, nan)
                                  for k in names}))
            obs, t = next_obs, t + 1
            if t == self._T or (self._cut[0] == unroll and
                                t >= self._cut[1]):
                norm = alg.observation_normalizer
                now, now_cpu = clock(), cpu()
                part = nest.map_structure(lambda x: x[:t], self._storage)
                _send(self._conn, ("unroll", unroll, *part,
                                   None if norm is None else
                                   norm.take_pending(),
                                   (now - began, waited, stepping,
                                    now_cpu - began_cpu,
                                    # steps 0, 8, ... of the t were timed
                                    stepping_cpu * t /
                                    -(-t // CPU_SAMPLE_EVERY),
                                    batched / t, inference_cpu),
                                   segment))
                unroll, t = unroll + 1, 0
                began, began_cpu = now, now_cpu
                waited = stepping = stepping_cpu = 0.0
                batched, inference_cpu = 0, 0.0

    def _write(self, t: int, record) -> None:
        leaves = nest.flatten(record)
        if self._storage is None:
            with torch.inference_mode(False):
                self._storage = nest.map_structure(
                    lambda x: torch.zeros((self._T, ) + tuple(x.shape),
                                          dtype=x.dtype), record)
                # Every step's row of every leaf, made once: a step then
                # costs one fused copy (a copy per leaf cost a tenth of
                # the policy's forward pass).
                stores = nest.flatten(self._storage)
                self._rows = [[store[i] for store in stores]
                              for i in range(self._T)]
        torch._foreach_copy_(self._rows[t], leaves)
