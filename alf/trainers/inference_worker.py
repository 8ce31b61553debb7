"""Inference workers: batched acting for many actors (Sample Factory's
policy workers).

With ``TrainerConfig.inference_workers = W > 0`` an asynchronous collector
spawns ``W`` of these processes besides its actors. Each serves a fixed
share of the actors: an actor sends it its (normalised) observations and
waits; the worker gathers the requests that are ready, acts on all of them
in one batched ``rollout_step``, and answers each actor with its rows.

Why: an actor that infers for itself runs the policy on a batch of one
right after its simulator step has evicted the policy's weights and the
interpreter's working set from the core's caches, so per step it costs
2.6-3.2x what it costs in a loop of its own (docs/benchmarks.md). A worker
runs nothing but the policy: its caches stay warm, and one forward pass
serves many environments. Measured on `ppg_metadrive.gin` with 2 cores it
loses (0.45 of bare MetaDrive against 0.57 without a worker,
docs/async_collection.md): with one engine per actor, a request per step
through pipes costs the worker and the actor more CPU than the actor's
own batch-of-one forward pass.

The policy version that acted comes back with each answer (it is the
worker's, which the learner refreshes after every iteration, as it does the
actors'); an actor's request names the oldest version it may act with
(``unroll - max_policy_lag``) and the worker holds it until it has that
version, so the lag bound is kept exactly as without workers.

Messages (`encode`d): learner -> worker ``("start", observation_space,
action_space, torch_seed, version, state)``, ``("state", version, state)``,
``("stop",)``; worker -> learner ``("ready",)`` once it can act,
``("error", ...)`` (`actor.report_error`); actor -> worker ``("act", min_version,
observation)``; worker -> actor ``(version, output, info, batch size,
seconds held for a version, CPU seconds)`` (the worker's CPU since its last
batch, shared out over the batch's requests).
"""
import time
from multiprocessing import connection
from typing import List, cast

import torch

from alf import nest
from alf.trainers.actor import (adopt_config, decode, encode, report_error,
                                skip_shutdown)


class InferenceWorkerDied(Exception):
    """Raised in an actor whose inference worker closed its pipe."""


class RemotePolicy:
    """An actor's end of its inference worker: `act` in place of the
    algorithm's ``rollout_step``.

    Args:
        conn: the actor's pipe to its worker.
    """

    def __init__(self, conn):
        self._conn = conn

    def act(self, observation: torch.Tensor, min_version: int):
        """(output, info, version, batch size, seconds held for a version,
        the worker's CPU seconds for it) of the worker's ``rollout_step``
        on ``observation``, acted by a policy no older than
        ``min_version``."""
        try:
            self._conn.send_bytes(encode(("act", min_version, observation)))
            version, output, info, batch, held, cpu = decode(
                self._conn.recv_bytes())
        except (EOFError, OSError) as e:
            raise InferenceWorkerDied(
                "its inference worker is gone (see the learner's log for "
                "why)") from e
        return output, info, version, batch, held, cpu


def inference_main(conn, actor_conns: List, gin_config: str, config,
                   env_spec) -> None:
    """Entry point of an inference worker (spawned by `AsyncCollector`).

    Args:
        conn: the worker's end of its pipe to the learner.
        actor_conns: its ends of the pipes to the actors it serves.
        gin_config, config, env_spec: as for `actor.actor_main` (the worker
            builds the algorithm from the learner's configuration; it
            builds no environment: the learner's ``"start"`` gives it the
            spaces).
    """
    from alf.environments import env_fn
    env_fn.prepare_worker()
    torch.set_num_threads(1)
    try:
        adopt_config(gin_config, env_spec)
        message = decode(conn.recv_bytes())
        if message[0] == "start":  # else stopped before it started
            _start_serving(conn, actor_conns, config, message[1:])
    except BaseException as e:  # noqa: BLE001 - reported to the learner
        report_error(conn, e)
    skip_shutdown()


def _start_serving(conn, actor_conns, config, start: tuple) -> None:
    obs_space, action_space, torch_seed, version, state = start
    torch.manual_seed(torch_seed)
    algorithm = config.algorithm_ctor(observation_space=obs_space,
                                      action_space=action_space,
                                      config=config)
    algorithm.load_acting_state(state)
    conn.send_bytes(encode(("ready", )))
    with torch.inference_mode():
        _serve(conn, actor_conns, algorithm, version)


def _serve(conn, actor_conns, algorithm, version: int) -> None:
    open_conns = list(actor_conns)
    # (actor's pipe, min version, observation, when it came, the version
    # this worker had then)
    pending: list = []
    last_cpu = time.thread_time()
    while open_conns:
        for ready_conn in connection.wait([conn] + open_conns):
            # wait() returns the objects it was given: Pipe ends.
            c = cast(connection.Connection, ready_conn)
            if c is conn:
                message = decode(conn.recv_bytes())
                if message[0] == "stop":
                    return
                version = message[1]
                algorithm.load_acting_state(message[2])
                continue
            try:
                _, min_version, obs = decode(c.recv_bytes())
            except (EOFError, OSError):
                open_conns.remove(c)  # the actor stopped
                continue
            pending.append((c, min_version, obs, time.perf_counter(), version))
        ready = [p for p in pending if p[1] <= version]
        if not ready:
            continue
        pending = [p for p in pending if p[1] > version]
        sizes = [p[2].shape[0] for p in ready]
        step = algorithm.rollout_step(torch.cat([p[2] for p in ready]))
        now, begin, cpu = time.perf_counter(), 0, time.thread_time()
        share, last_cpu = (cpu - last_cpu) / len(ready), cpu
        for (c, min_version, _, came, had), n in zip(ready, sizes):
            rows = nest.map_structure(
                lambda x, b=begin, n=n: x[b:b + n], (step.output, step.info))
            held = now - came if min_version > had else 0.0
            try:
                c.send_bytes(encode((version, *rows, len(ready), held,
                                     share)))
            except OSError:
                open_conns.remove(c)
            begin += n
