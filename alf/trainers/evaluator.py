"""Evaluation episodes and the ``eval.csv`` log."""
import concurrent.futures
import contextlib
import csv
import math
import os
import time
from typing import (Any, Callable, Dict, List, NamedTuple, Optional,
                    Sequence, Tuple, Union, cast)

import numpy as np
import torch

from alf import nest
from alf.algorithms.rl_algorithm import RLAlgorithm
from alf.environments import env_fn
from alf.environments.batched import BatchedEnvironment, check_environment
from alf.environments.suite_gym import EnvironmentWorkerDied
from alf.trainers import seeds
from alf.trainers.stall_watch import WorkerWatch
from alf.utils.errors import EvaluationError

EVAL_CSV_COLUMNS = ("env_steps", "average_return", "average_episode_length")
#: How the evaluation CSV files are read: a file saved by a spreadsheet may
#: start with a byte-order mark, which would hide the header's first column.
CSV_ENCODING = "utf-8-sig"
#: Evaluations on the training environments' settings, and on held-out ones
#: (``TrainerConfig.held_out_env_load_fn``).
EVAL_CSV, HELD_OUT_CSV = "eval.csv", "eval_held_out.csv"
# How often (seconds) an evaluation whose steps all wait looks for a stop.
_STOP_POLL = 1.0


class EvaluationStopped(Exception):
    """An evaluation abandoned because training was asked to stop
    (``should_stop``): between steps, or during a step that a hung worker
    held past the stop (its message then names the worker); nothing of it
    is recorded."""


def make_evaluator(cfg, load_fn,
                   num_episodes: Optional[int] = None) -> "Evaluator":
    """An `Evaluator` of ``num_episodes`` episodes (default
    ``cfg.num_eval_episodes``) in environments made by ``load_fn`` (the
    training environments' or the held-out ones'), for the `TrainerConfig`
    ``cfg``.

    It loads ``min(num_episodes, cfg.num_eval_episodes)`` environments;
    more episodes than that queue for them (`Evaluator`), so a
    held-out set judged on many scenarios costs time, not a simulator
    process per episode.

    Each environment is loaded on its own (``num_envs=1``), so that one
    whose episode has ended stops stepping while the others play on. The
    first is loaded alone (a bad configuration fails once, and a suite
    that caches what it learns from its first environment fills its cache);
    the others load concurrently, since a simulator's worker can take
    seconds to start. They load on the threads that later step them, which
    live as long as the environments: a worker that dies with its parent
    (`env_fn.prepare_worker`) is tied to the thread that started it.
    """
    def load() -> BatchedEnvironment:
        return check_environment(load_fn(
            cfg.env_name, num_envs=1, seed=None, asynchronous=cfg.async_env),
            load_fn)

    episodes = num_episodes or cfg.num_eval_episodes
    n = min(episodes, cfg.num_eval_episodes)
    pool = concurrent.futures.ThreadPoolExecutor(n)
    envs: List[BatchedEnvironment] = []
    futures: List[concurrent.futures.Future] = []
    try:
        with env_fn.evaluation_environments():
            envs.append(load())
            futures = [pool.submit(load) for _ in range(n - 1)]
            concurrent.futures.wait(futures)
        envs += [f.result() for f in futures]  # the first failure raises
    except BaseException:
        _close_all(envs + [f.result() for f in futures
                           if f.done() and not f.cancelled()
                           and f.exception() is None])
        pool.shutdown(cancel_futures=True)
        raise
    return Evaluator(envs, seed=seeds.eval_seed(cfg.seed),
                     deterministic=cfg.eval_deterministic, pool=pool,
                     num_episodes=episodes)


def _close_all(envs: Sequence[BatchedEnvironment]) -> None:
    """Closes every one of ``envs`` at once, then raises the first failure.

    At once: a MetaDrive environment takes ~1 s to close (two of them
    from two threads as long as one), and a calibrating run's rank 0
    holds 30 of them (a 31 s teardown one after another).
    """
    if not envs:
        return
    with concurrent.futures.ThreadPoolExecutor(len(envs)) as pool:
        futures = [pool.submit(env.close) for env in envs]
    for f in futures:
        f.result()  # the first failure raises


class Evaluator:
    """Plays ``num_episodes`` episodes in its environments, with the
    policy's `predict_step` (deterministic) or its `rollout_step` (the
    sampling policy that collects training data).

    The environments come in groups (`BatchedEnvironment`\\ s). A group
    steps until all of its episodes have ended and then stops: an
    environment whose episode is over would otherwise go on stepping (and
    reset, which costs a MetaDrive worker a new scenario) until the longest
    episode ends. With groups of one environment each (`make_evaluator`),
    no environment takes a step beyond its episode. The groups still
    running step concurrently (threads waiting on their workers), each at
    its own pace: the policy acts for those whose step has come back
    (each episode's action computed alone, `act_per_episode`) while the
    others still step.

    Evaluation never calls a collective, so in distributed training it runs
    on rank 0 alone.

    More episodes than environments are played as a queue: a group whose
    episodes have all ended starts the next ones (as many as it has
    environments), so no environment waits for another's long episode.

    Args:
        envs: the groups of environments, or one `BatchedEnvironment`.
        seed: episode ``e`` of every evaluation starts from ``seed +
            e`` (whichever environment plays it), so all evaluations of a
            run play the same episode starts (the same scenarios in
            MetaDrive) and differ only by the policy.
        deterministic: act with `predict_step`; else with `rollout_step`.
        pool: the threads that step the groups (at least one per group),
            shut down by `close` after the environments; by default a
            pool of its own.
        num_episodes: episodes per evaluation; by default one per
            environment.

    Raises:
        ValueError: ``num_episodes`` is not a positive integer.
    """

    def __init__(self, envs: Union[BatchedEnvironment,
                                   Sequence[BatchedEnvironment]],
                 seed: Optional[int] = None, deterministic: bool = True,
                 pool: Optional[concurrent.futures.ThreadPoolExecutor] = None,
                 num_episodes: Optional[int] = None):
        if isinstance(envs, BatchedEnvironment):
            envs = [envs]
        self._envs: List[BatchedEnvironment] = list(envs)
        width = sum(env.num_envs for env in self._envs)
        if num_episodes is None:
            num_episodes = width
        if not isinstance(num_episodes, int) or num_episodes < 1:
            raise ValueError(f"num_episodes={num_episodes!r}; it must be a "
                             f"positive integer")
        self._num_episodes = num_episodes
        self._seed = seed
        self._deterministic = deterministic
        self._pool = pool or concurrent.futures.ThreadPoolExecutor(
            len(self._envs))

    @property
    def observation_space(self):
        """One environment's observation space."""
        return self._envs[0].observation_space

    @property
    def action_space(self):
        """One environment's action space."""
        return self._envs[0].action_space

    @property
    def num_episodes(self) -> int:
        """Episodes played by each evaluation."""
        return self._num_episodes

    @property
    def deterministic(self) -> bool:
        """Whether it acts with `predict_step` (else `rollout_step`)."""
        return self._deterministic

    def evaluate(self, algorithm: RLAlgorithm,
                 should_stop: Optional[Callable[[], bool]] = None
                 ) -> Dict[str, float]:
        """Plays `num_episodes` episodes; returns the averages.

        Episode ``e`` (started from ``seed + e``) is a function of the
        policy and its start alone: its actions are computed for it alone
        (`act_per_episode`) and a sampling policy's noise comes from a
        stream of its own, seeded ``seed + e``. So evaluations are
        reproducible, ``alf.bin.play`` replays their episodes exactly, and
        training's RNG is left alone.

        Raises:
            EvaluationStopped: ``should_stop()`` turned true.
            EvaluationError: within `waited_for`, a stopped worker (SIGSTOP)
                held a step back.
        """
        return evaluate_together([self], algorithm, should_stop)[0]

    def close(self):
        """Closes the evaluation environments."""
        try:
            _close_all(self._envs)
        finally:
            self._pool.shutdown()


@torch.inference_mode()
def evaluate_together(evaluators: Sequence[Evaluator],
                      algorithm: RLAlgorithm,
                      should_stop: Optional[Callable[[], bool]] = None
                      ) -> List[Dict[str, float]]:
    """Plays the episodes of several evaluators (a run's training and
    held-out ones) at the same time; returns each one's averages.

    Each environment starts from the seed its own evaluator gives it, and
    the environments still playing step at the same time, so one
    evaluator's last, long episodes overlap the other's instead of leaving
    cores idle. The policy acts for each episode alone, a sampling policy
    with that episode's own noise (`act_per_episode`), so what an episode
    scores does not depend on the episodes beside it; training's RNG is
    left alone.

    Raises:
        ValueError: the evaluators disagree on ``deterministic``.
        EvaluationStopped: ``should_stop()`` turned true.
        EvaluationError: within `waited_for`, a stopped worker (SIGSTOP)
            held a step back.
    """
    return [out[0] for out in _evaluate_sets(
        [(e, [None]) for e in evaluators], algorithm, should_stop)]


def evaluate_variants(evaluator: Evaluator, algorithm: RLAlgorithm,
                      variants: Sequence[Callable[[], None]],
                      should_stop: Optional[Callable[[], bool]] = None
                      ) -> List[Dict[str, float]]:
    """Plays ``evaluator``'s episodes once for each of ``variants`` (each
    sets the policy up to act as that variant: a calibration's candidate
    offsets, `alf.trainers.calibration`); returns each variant's averages.

    All the variants' episodes form one queue over the evaluator's
    environments: an environment whose episode ends starts the next one,
    whichever variant it belongs to, so the cores stay busy until the last
    episode of the last variant, where playing the variants one after the
    other would wait out every variant's longest episode. Each row's
    action is computed alone, after its variant's set-up
    (`act_per_episode`), so every episode scores what it scores played by
    itself.

    Raises:
        EvaluationStopped: ``should_stop()`` turned true.
        EvaluationError: within `waited_for`, a stopped worker (SIGSTOP)
            held a step back.
    """
    return _evaluate_sets([(evaluator, list(variants))], algorithm,
                          should_stop)[0]


@torch.inference_mode()
def _evaluate_sets(sets, algorithm, should_stop):
    """Per ``(evaluator, variants)`` of ``sets``, each variant's averages
    (`_play_sets`' episodes)."""
    if len({e.deterministic for e, _ in sets}) > 1:
        raise ValueError("evaluate_together needs evaluators that all act "
                         "deterministically or all sample")
    devices = [torch.cuda.current_device()] if torch.cuda.is_available(
    ) and torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=devices):
        seed = sets[0][0]._seed
        if seed is not None:
            torch.manual_seed(seed)
        _watch_workers(sets, should_stop)
        played = _play_sets(sets, algorithm, should_stop)
    out = []
    for (evaluator, variants), (returns, lengths, metrics) in zip(sets,
                                                                  played):
        per_variant = []
        for v in range(len(variants)):
            rows = slice(v * evaluator.num_episodes,
                         (v + 1) * evaluator.num_episodes)
            result = {"average_return": returns[rows].mean().item(),
                      "average_episode_length": lengths[rows].mean().item()}
            for name in evaluator._envs[0].episode_info:
                result[name] = metrics[name][rows].nanmean().item()
            per_variant.append(result)
        out.append(per_variant)
    return out


@contextlib.contextmanager
def waited_for(held: Optional[str]):
    """Within it, the evaluations of this process hold back ``held``
    ("rank 0's evaluation cannot finish": other ranks wait for it in a
    collective), so that a step a stopped worker (SIGSTOP) holds is given
    up (`EvaluationError`) before their collectives time out; None: nobody
    waits (the default)."""
    global _held
    before, _held = _held, held
    try:
        yield
    finally:
        _held = before


# What this process's evaluations hold back (`waited_for`).
_held: Optional[str] = None


def _watch_workers(sets, should_stop) -> None:
    """Has every environment of ``sets`` whose worker a step waits for
    name one that hangs, give a step up once a stop has waited for it
    (`EvaluationStopped`), and, within `waited_for`, give up one that a
    stopped worker (SIGSTOP) holds (`EvaluationError`): a step waiting in
    a pipe would hold the other ranks too."""
    held = _held
    for k, (evaluator, _) in enumerate(sets):
        for i, env in enumerate(evaluator._envs):
            if env.worker_pids:
                env.watch(WorkerWatch(
                    env.worker_pids, _worker_name(k, i, env),
                    should_stop or (lambda: False), held,
                    stop_error=EvaluationStopped,
                    give_up_error=EvaluationError))


def _worker_name(k: int, i: int,
                 env: BatchedEnvironment) -> Callable[[int], str]:
    """Names worker ``j`` of environment ``i`` of set ``k`` (0: the
    evaluation, 1: the held-out one), as its watch and its death say it."""
    name = f"{_env_name(k, i)}'s worker"
    n = len(env.worker_pids)
    return lambda j: name if n == 1 else f"{name} {j} of {n}"


def _env_name(k: int, i: int) -> str:
    """Environment ``i`` of set ``k`` (0: the evaluation, 1: the held-out
    one), as an error that it raised says it."""
    return f"{'held-out ' if k else ''}evaluation environment {i}"


class _Slot:
    """A group of environments of set ``k`` and the episodes it plays now:
    ``rows[i]`` is environment ``i``'s row (an episode of its set's
    variants, in order), or None past the set's last episode (a group
    steps together, so it plays on, uncounted)."""

    def __init__(self, k: int, env: BatchedEnvironment, pool):
        self.k, self.env, self.pool = k, env, pool
        self.rows: List[Optional[int]] = []
        self.returns = self.lengths = self.running = torch.zeros(0)
        self.timestep = None


class _Queue:
    """A set's episodes in play order: every variant's ``num_episodes``,
    episode ``e`` of each started from ``seed + e``."""

    def __init__(self, evaluator: Evaluator, variants: Sequence):
        self.seed, self.n = evaluator._seed, evaluator.num_episodes
        self.variants = list(variants)
        self.next = 0  # the next row: variant next // n, episode next % n

    def take(self, width: int):
        """The next episodes for a group of ``width`` environments, all of
        one variant with consecutive seeds: (rows, reset seed), rows
        None past the variant's last episode; None when all are taken."""
        if self.next >= self.n * len(self.variants):
            return None
        first, e = self.next, self.next % self.n
        count = min(width, self.n - e)
        self.next += count
        rows = [first + i if i < count else None for i in range(width)]
        return rows, None if self.seed is None else self.seed + e

    def variant(self, row: int):
        """The set-up of the variant that ``row`` plays."""
        return self.variants[row // self.n]


def _play_sets(sets, algorithm, should_stop):
    """Every episode of every ``(evaluator, variants)`` of ``sets``; per set,
    per-episode returns, lengths and metric name -> per-episode value (NaN
    where not reported), row ``v * num_episodes + e`` being variant ``v``'s
    episode ``e``.

    Every set's groups play its queue (`_Queue`), each group on its own
    thread and at its own pace: the policy acts for the groups whose step
    (or reset) has come back, while the others are still stepping, so no
    group waits for a slower one, nor for another's reset. The policy acts
    row by row (`act_per_episode`), so which groups act together changes
    no episode."""
    deterministic = sets[0][0].deterministic
    queues = [_Queue(e, variants) for e, variants in sets]
    results = []
    for (evaluator, variants) in sets:
        rows = evaluator.num_episodes * len(variants)
        names = {n for env in evaluator._envs for n in env.episode_info}
        results.append((torch.zeros(rows), torch.zeros(rows),
                        {n: torch.full((rows, ), float("nan"))
                         for n in names}))
    streams = None if deterministic else _EpisodeStreams(algorithm)
    # Each group's step or reset in flight: future -> its slot.
    pending: Dict[concurrent.futures.Future, _Slot] = {}

    def start(s: _Slot) -> None:
        """Resets ``s`` for its queue's next episodes, if any are left."""
        taken = queues[s.k].take(s.env.num_envs)
        if taken is None:
            return
        rows, seed = taken
        w = s.env.num_envs
        s.rows = rows
        s.returns, s.lengths = torch.zeros(w), torch.zeros(w)
        s.running = torch.ones(w, dtype=torch.bool)
        if streams is not None:
            # Environment i of a group reset with seed s starts from s + i
            # (a vector environment's seeding), and so does its episode's
            # noise.
            for i in range(w):
                streams.start((s, i), None if seed is None else seed + i)
        pending[s.pool.submit(s.env.reset, seed=seed)] = s

    def record(s: _Slot, ts) -> bool:
        """Adds the step ``ts`` to ``s``'s episodes; whether any plays on."""
        live = s.running
        s.returns += ts.reward * live
        s.lengths += live
        ending = live & ts.done
        returns, lengths, metrics = results[s.k]
        for i in ending.nonzero().flatten().tolist():
            row = s.rows[i]
            if row is None:
                continue
            returns[row], lengths[row] = s.returns[i], s.lengths[i]
            for name, value in ts.episode_info.items():
                metrics[name][row] = value[i]
        s.running = live & ~ts.done
        return bool(s.running.any())

    try:
        for k, (evaluator, _) in enumerate(sets):
            for env in evaluator._envs:
                start(_Slot(k, env, evaluator._pool))
        while pending:
            # A timeout: a stop is seen while every step still waits.
            done, _ = concurrent.futures.wait(
                pending, _STOP_POLL,
                return_when=concurrent.futures.FIRST_COMPLETED)
            ready = []
            for future in done:
                s = pending.pop(future)
                try:
                    ts = future.result()  # a failed step raises
                except EnvironmentWorkerDied as e:
                    i = sets[s.k][0]._envs.index(s.env)
                    raise e.renamed(_worker_name(s.k, i, s.env),
                                    _env_name(s.k, i)) from e
                stepped = s.timestep is not None
                s.timestep = ts
                if not stepped or record(s, ts):
                    ready.append(s)
                else:
                    s.timestep = None
                    start(s)
            if should_stop is not None and should_stop():
                # The next evaluation resets every environment it plays.
                raise EvaluationStopped(_why_stopped(pending))
            if not ready:
                continue
            obs = algorithm.observe(nest.map_structure(
                lambda *x: torch.cat(x),
                *[s.timestep.observation for s in ready]), update=False)
            # Environment (s, i)'s episode: its noise stream's key.
            envs = [(s, i) for s in ready for i in range(s.env.num_envs)]
            variants = [None if s.rows[i] is None else
                        queues[s.k].variant(s.rows[i]) for s, i in envs]
            action = act_per_episode(algorithm, obs, streams, envs, variants)
            for s, a in zip(ready, action.split(
                    [s.env.num_envs for s in ready])):
                pending[s.pool.submit(s.env.step, a)] = s
    finally:
        # Nothing steps on once the play is over or abandoned.
        concurrent.futures.wait(pending)
        if streams is not None:
            streams.close()
    return results


def _why_stopped(pending) -> str:
    """Waits for the steps of ``pending`` (one a watched worker holds is
    given up: `_watch_workers`) and says why one was given up, if one
    was."""
    concurrent.futures.wait(pending)
    for future in pending:
        error = future.exception()
        if isinstance(error, EvaluationStopped) and str(error):
            return str(error)
    return ""


def noise_carriers(algorithm) -> list:
    """The modules of ``algorithm`` whose sampling carries noise from one
    sample to the next (gSDE's draws: `ActorDistributionNetwork.noise_state`)."""
    modules = getattr(algorithm, "modules", None)
    if not callable(modules):
        return []
    return [m for m in modules() if hasattr(m, "set_noise_state")]


class _EpisodeStreams:
    """The noise of each episode of a sampling policy, apart: a torch RNG
    stream started as ``torch.manual_seed(seed)`` starts it (``alf.bin.play``
    seeds its episode ``e`` so; an episode without a seed draws from
    whatever stream is current), and the noise its policy's modules carry
    from one sample to the next (`noise_carriers`), fresh at its start.

    Use it inside ``torch.random.fork_rng`` (it switches the global
    generators' states) and `close` it: the modules get back the noise
    they carried before.
    """

    def __init__(self, algorithm):
        self._cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        self._carriers = noise_carriers(algorithm)
        self._outer = [m.noise_state() for m in self._carriers]
        self._states: Dict[Any, Tuple[Optional[tuple], list]] = {}

    def start(self, key, seed: Optional[int]) -> None:
        """Starts the episode ``key`` (hashable) from ``seed``; a key
        started again begins a new episode."""
        rng = None
        if seed is not None:
            torch.manual_seed(seed)
            rng = self._get_rng()
        self._states[key] = (rng, [None] * len(self._carriers))

    def _get_rng(self) -> tuple:
        return (torch.get_rng_state(),
                torch.cuda.get_rng_state() if self._cuda else None)

    def draw(self, key, fn: Callable[[], Any]) -> Any:
        """``fn()``, drawing the noise of the episode ``key``."""
        rng, noise = self._states[key]
        if rng is not None:
            torch.set_rng_state(rng[0])
            if rng[1] is not None:
                torch.cuda.set_rng_state(rng[1])
        for m, state in zip(self._carriers, noise):
            m.set_noise_state(state)
        out = fn()
        self._states[key] = (None if rng is None else self._get_rng(),
                             [m.noise_state() for m in self._carriers])
        return out

    def close(self) -> None:
        """Gives the modules back the noise they carried before."""
        for m, state in zip(self._carriers, self._outer):
            m.set_noise_state(state)


def act_per_episode(algorithm, obs, streams: Optional[_EpisodeStreams],
                    episodes: Sequence,
                    variants: Optional[Sequence[Optional[Callable[[], None]]]]
                    = None) -> torch.Tensor:
    """The policy's actions for the rows of ``obs`` (a batch, row ``k``
    playing the episode ``episodes[k]``, a key of ``streams``), each row
    computed alone, after ``variants[k]()`` where that is not None (it sets
    the policy up for the row's variant, e.g. a calibration candidate's
    offset; called when it differs from the row before's).

    A matrix product's rounding depends on the batch it is part of (CPU
    kernels block rows by batch size: a row's output differs in its last
    bits between a batch of 1 and one of 20), and a simulator such as
    MetaDrive turns a difference in the last bit of an action into another
    episode. Batched, an episode's score would depend on which other
    episodes are still playing beside it: on how many the evaluation has,
    on whether a held-out set plays at the same time, and it would differ
    from ``alf.bin.play``'s replay of the same episode, which acts for one
    environment. Row by row, an episode is a function of the policy and its
    start alone, whatever plays beside it. With ``streams`` (a sampling
    policy) each episode also draws its noise from its own stream.
    """
    current = None

    def act(row):
        nonlocal current
        if variants is not None and variants[row] is not None and (
                variants[row] is not current):
            current = variants[row]
            current()
        one = nest.map_structure(lambda x: x[row:row + 1], obs)
        if streams is None:
            return algorithm.predict_step(one).output
        return streams.draw(episodes[row],
                            lambda: algorithm.rollout_step(one).output)

    return torch.cat([act(row) for row in range(len(episodes))])


def append_eval_csv(root_dir: str, env_steps: int,
                    metrics: Dict[str, float], name: str = EVAL_CSV) -> None:
    """Appends a row to ``ROOT_DIR/<name>`` (header written once).

    The first columns are always `EVAL_CSV_COLUMNS`; other metrics follow in
    the order of the first row written. A row with metrics the header lacks
    (a run resumed with other bindings, e.g. ``calibrate_offsets``' new
    ``offset_D``) widens it: the file is rewritten atomically with the new
    columns last, empty in the earlier rows (NaN to `read_eval_csv`). A
    metric a row lacks is written empty too.
    """
    path = os.path.join(root_dir, name)
    row = dict(metrics, env_steps=env_steps)
    new = not os.path.exists(path) or os.path.getsize(path) == 0
    if new:
        fields = list(EVAL_CSV_COLUMNS) + sorted(set(row) -
                                                 set(EVAL_CSV_COLUMNS))
    else:
        with open(path, newline="", encoding=CSV_ENCODING,
                  errors="surrogateescape") as f:
            fields = next(csv.reader(f))
    added = sorted(set(row) - set(fields))
    if added:
        _widen(path, fields, added, row)
        return
    with open(path, "a", newline="") as f:
        # Unix lines: csv's default "\r\n" ends every value a shell tool
        # (cut, awk) reads in the last column with a carriage return.
        writer = csv.DictWriter(f, fieldnames=fields, lineterminator="\n")
        if new:
            writer.writeheader()
        writer.writerow({k: _cell(v) for k, v in row.items()})
        f.flush()
        os.fsync(f.fileno())


def _widen(path: str, fields: List[str], added: List[str],
           row: Dict[str, Any]) -> None:
    """Rewrites the CSV ``path`` (header ``fields``) with the columns
    ``added`` after the others, then ``row``: in one atomic replace, so a
    crash leaves the old file or the new one, never fewer rows."""
    with open(path, newline="", encoding=CSV_ENCODING,
              errors="surrogateescape") as f:
        rows = list(csv.reader(f))[1:]
    # A row cut short by a crash stays short: still unreadable, not a row
    # of empty metrics.
    rows = [r + [""] * len(added) if len(r) == len(fields) else r
            for r in rows]
    fields = fields + added
    # As csv.DictWriter writes it: what the row lacks is empty.
    _write_rows(path, [fields] + rows +
                [[_cell(row.get(c, "")) for c in fields]])


def _cell(value: Any) -> Any:
    """A metric as written: where it is a float32's value (metrics come
    from float32 tensors), the digits that read back to that float32
    ("28.4", not float64's "28.399999618530273")."""
    if (isinstance(value, float) and math.isfinite(value)
            and float(np.float32(value)) == value):
        return str(np.float32(value))
    return value


class SetAside(NamedTuple):
    """What `set_aside_later_rows` moved, and where."""

    path: str
    later: int  # rows after the env steps resumed from
    unreadable: int  # rows cut short, or with a value that is no number
    whole: bool = False  # the file itself: it has no env_steps header


def set_aside_later_rows(root_dir: str, env_steps: int,
                         name: str = EVAL_CSV) -> Optional[SetAside]:
    """Moves the rows of ``ROOT_DIR/<name>`` (``eval.csv``) after
    ``env_steps`` to ``ROOT_DIR/eval-discarded-<time>.csv`` (for
    ``eval_held_out.csv``, ``eval_held_out-discarded-<time>.csv``).

    A run resumed from a checkpoint older than its last evaluations (the
    newest checkpoints were removed, or it crashed between checkpoints)
    evaluates those steps again: their old rows come from a training
    history the resumed run discards. Moving them aside keeps ``eval.csv``
    one row per step, in order, and loses no data. A row that cannot be
    read (cut short by a crash, a damaged byte) goes aside too, byte for
    byte, and so does, whole, a file whose first line is no header with
    ``env_steps`` (damaged there, or not alf's).

    Returns:
        What went where, or None if nothing did.
    """
    path = os.path.join(root_dir, name)
    if not os.path.exists(path):
        return None
    # surrogateescape: a damaged byte is read, and written aside, as it was.
    with open(path, newline="", encoding=CSV_ENCODING,
              errors="surrogateescape") as f:
        rows = list(csv.reader(f))
    if not rows:
        return None
    stem = os.path.splitext(name)[0]
    if "env_steps" not in rows[0]:
        aside = _aside_path(root_dir, stem)
        os.replace(path, aside)
        return SetAside(aside, 0, len(rows) - 1, whole=True)
    column = rows[0].index("env_steps")

    def readable(row) -> bool:
        # As read_csv_rows reads them: an empty metric is NaN, an empty
        # or non-finite env_steps no step.
        if len(row) != len(rows[0]):
            return False
        values = [_number(v) for v in row]
        step = values[column]
        return (None not in values and step is not None
                and math.isfinite(step))

    # Per row: None (kept), "later" or "unreadable".
    fates = [
        None if ok and float(r[column]) <= env_steps else
        "later" if ok else "unreadable"
        for r, ok in ((r, readable(r)) for r in rows[1:])
    ]
    if not any(fates):
        return None
    aside = _aside_path(root_dir, stem)
    # The rows are written aside before eval.csv loses them.
    _write_rows(aside, [rows[0]] + [r for r, f in zip(rows[1:], fates) if f])
    _write_rows(path,
                [rows[0]] + [r for r, f in zip(rows[1:], fates) if not f])
    return SetAside(aside, fates.count("later"), fates.count("unreadable"))


def _aside_path(root_dir: str, stem: str) -> str:
    """``ROOT_DIR/<stem>-discarded-<time>.csv``, never an existing file."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside = os.path.join(root_dir, f"{stem}-discarded-{stamp}.csv")
    n = 1
    while os.path.exists(aside):  # never overwrite an earlier one
        n += 1
        aside = os.path.join(root_dir, f"{stem}-discarded-{stamp}-{n}.csv")
    return aside


def _write_rows(path: str, rows: list) -> None:
    """Writes ``rows`` as CSV atomically (temporary file, fsync, rename);
    a damaged byte read with surrogateescape is written back as it was."""
    with open(path + ".tmp", "w", newline="", encoding="utf-8",
              errors="surrogateescape") as f:
        csv.writer(f, lineterminator="\n").writerows(rows)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)


def read_eval_csv(path: str, skipped: Optional[List[str]] = None
                  ) -> Dict[str, list]:
    """Reads an ``eval.csv``: column name -> list of floats, by env steps.

    Rows repeated for the same env step count (a run resumed from an older
    checkpoint re-evaluates) keep the last one. A row that cannot be read
    (cut short by a crash: fields missing; or a value that is not a number)
    is left out, as the trainer sets it aside on resuming
    (`set_aside_later_rows`).

    Args:
        path: the file.
        skipped: if given, each row left out is appended to it as
            ``"env_steps 6144"``, or ``"line 7"`` where its env steps cannot
            be read either, for the caller to say what it did not use.
    """
    rows = {int(r["env_steps"]): r for r in read_csv_rows(path, skipped)}
    steps = sorted(rows)
    cols = rows[steps[0]].keys() if steps else EVAL_CSV_COLUMNS
    return {c: [rows[s][c] for s in steps] for c in cols}


def read_csv_rows(path: str, skipped: Optional[List[str]] = None
                  ) -> List[Dict[str, float]]:
    """The rows of a csv file that alf writes with an ``env_steps`` column
    (``eval.csv``, ``calibration.csv``), in order, as column -> float (NaN
    where empty). A row that cannot be read (cut short by a crash: fields
    missing; or a value that is not a number) is left out and, if
    ``skipped`` is given, appended to it as ``"env_steps 6144"``, or
    ``"line 7"`` where its env steps cannot be read either.
    """
    rows = []
    # A byte that is not UTF-8 (a damaged file) makes its row non-numeric.
    with open(path, newline="", encoding=CSV_ENCODING,
              errors="replace") as f:
        reader = csv.DictReader(f)
        for r in reader:
            step = _number(r.get("env_steps"))
            if step is not None and not math.isfinite(step):
                step = None
            # DictReader gives a missing field the value None and extra
            # fields the key None.
            values = {c: _number(v) for c, v in r.items() if c is not None}
            if (step is not None and None not in r
                    and None not in values.values()):
                rows.append(cast(Dict[str, float], values))
            elif skipped is not None:
                skipped.append(f"line {reader.line_num}" if step is None
                               else f"env_steps {int(step)}")
    return rows


def _number(text: Optional[str]) -> Optional[float]:
    """``text`` as a float; None if it is missing (a row cut short) or not
    a number. An empty field is NaN: `append_eval_csv` writes a metric
    that a row lacks (a resumed run's config reports fewer) as empty."""
    if text is None:
        return None
    if not text.strip():
        return math.nan
    try:
        return float(text)
    except ValueError:
        return None
