"""`TrainerConfig`: what to train, on what, for how long (gin-configurable)."""
import dataclasses
import math
from typing import Callable, List, Optional, Tuple

import gin
import torch

from alf.environments import suite_gym
from alf.trainers.collector import UNROLL_MODES
from alf.trainers import calibration, preemption
from alf.utils import distributed
from alf.utils.deprecation import FORMER, former_spelling
from alf.utils.errors import ConfigError

# The largest `TrainerConfig.seed`: the conventional 32 bits, far below
# where the seeds derived from it (`alf.trainers.seeds`) leave torch's range.
MAX_SEED = 2**32 - 1
# Settings of asynchronous collection, refused with another unroll_mode.
_ASYNC_ONLY = ("max_policy_lag", "envs_per_actor", "inference_workers",
               "segment_length", "actor_niceness")


@gin.configurable(denylist=["world_size"])
@dataclasses.dataclass
class TrainerConfig:
    """Training settings, and one rank's share of its sizes.

    A size under its plain name is global: it keeps its single-process
    meaning in an N-process run (``num_envs`` environments in all,
    minibatches of ``minibatch_size`` transitions in all, ``num_env_steps``
    counting the steps of all ranks), so 1-process and N-process runs of one
    config are the same experiment. A rank's share carries a name of its own
    (CleanRL's ``num_envs`` / ``local_num_envs``): `per_rank` gives the
    config one of ``world_size`` ranks runs with, the same settings with
    ``world_size`` set, whose ``local_*`` properties are that rank's shares
    (``local_num_envs = num_envs / world_size``). So ``config.num_envs`` is
    global wherever it is read, and ``config.local_num_envs`` is the rank's
    (the same number in a config not divided, ``world_size == 1``).

    Attributes:
        algorithm_ctor: ``(observation_space, action_space, config) ->
            RLAlgorithm``, e.g. ``@PPOAlgorithm`` in gin; ``config`` is the
            rank's (`per_rank`). If it has a ``check_config(config,
            world_size)`` attribute, `per_rank` calls it with the rank's
            config, so that an N-process launch refuses sizes the algorithm
            cannot use before any process starts.
        env_name: environment id for ``env_load_fn``.
        env_load_fn: ``(env_name, num_envs, seed, asynchronous) ->
            BatchedEnvironment`` (`alf.environments.batched`; a new suite
            is such a function).
        num_envs: parallel training environments (global).
        async_env: one subprocess per environment (for slow environments)
            in lock-step collection and evaluation. With ``unroll_mode
            "async"`` each actor steps its ``envs_per_actor`` environments
            in its own process, whatever this says.
        unroll_mode: ``"sync"``: every iteration steps all environments in
            lock-step and nothing steps while the learner trains (exact,
            reproducible). ``"async"``: actor processes, each with a few
            environments and a CPU copy of the policy (refreshed after every
            iteration), step back to back: no environment waits for the
            slowest, and collection goes on while the learner trains.
            On-policy losses correct for the lag with the stored behaviour
            log-probabilities. Pays when
            environments are slow (subprocesses: MetaDrive, ``async_env``);
            not bit-reproducible. Actors act on the CPU. See
            `alf.trainers.collector`.
        max_policy_lag: ``"async"`` only (as the four settings below: with
            ``"sync"`` one changed from its default is refused): how many
            policy versions
            (training iterations) the policy that acted may be behind the
            one that trains on its data. 0: exactly on-policy, environments
            do not wait for each other but nothing steps during training;
            1 (default): collection runs one iteration ahead of training.
        envs_per_actor: ``"async"`` only: environments per actor process
            (they step in lock-step inside it, with batched inference); must
            divide the environments of a process. 1 (default) suits slow
            environments; MetaDrive takes only 1 (one engine per process;
            more is refused with a one-line error); fast ones may prefer a
            few per actor.
        inference_workers: ``"async"`` only: processes per training
            process that act for its actors in batches (Sample Factory's
            policy workers; `alf.trainers.inference_worker`); actor ``i``
            is served by worker ``i % inference_workers``. 0 (default):
            each actor acts with its own copy of the policy, on a batch of
            its environments. At most the number of actors. Built for
            simulators whose steps evict the policy from an actor's
            caches; measured so far (MetaDrive, 2 cores) it loses: a
            step's round trip through pipes costs more than acting in the
            actor (docs/async_collection.md).
        segment_length: ``"async"`` only, on-policy algorithms: None
            (default): actor ``i`` fills the same columns of every unroll,
            so an unroll waits for its slowest actor and each column is one
            environment's contiguous stream. A divisor of
            ``unroll_length``: actors collect segments of this many steps
            and any actor fills the next free one of an unroll's
            ``local_num_envs x unroll_length / segment_length`` segments
            (Sample Factory's way): a fast environment does more of an
            unroll and none waits for the slowest, at the price of more
            data from fast environments. The learner lays the segments
            side by side in ``[unroll_length, local_num_envs]`` and ends
            each at its last step as a time limit would (bootstrapped from
            its next observation). Shorter segments shorten the wait for
            an unroll's last one at the lag bound
            (docs/async_collection.md). Not with straggler preemption.
        actor_niceness: ``"async"`` only: how much lower the actors'
            scheduling priority is than the learner's (an ``os.nice``
            increment, 0..19; default 10). Where actors and the learner
            share too few cores, the learner, the one serial part, then
            gets a core whenever it has work and the actors take what it
            leaves (one process on 2 cores: 1.22x on
            ``ppg_metadrive.gin``, 1.14x on CartPole with ``async_env``;
            no change where the learner has a core to itself;
            docs/async_collection.md). 0: the learner's priority.
        unroll_length: environment steps per environment per iteration.
        preempt_stragglers: in distributed training, a rank ends its
            rollout early once ``sync_frac`` of the ranks have finished
            theirs and it has collected ``min_rollout_fraction`` of it
            (DD-PPO's preemption; `alf.trainers.preemption`), so that one
            slow rank (a slower machine, harder scenarios) does not set the
            pace of all. Ranks then train on batches of different sizes,
            weighted exactly (`PPOAlgorithm`'s ``uneven_batches``, turned on
            by this); an iteration counts the steps actually collected, so
            training still ends after ``num_env_steps``. For algorithms
            whose ``preemptible_unroll_modes`` holds ``unroll_mode`` (PPO
            and PPG: both modes; off-policy ones: ``"sync"``). Off by
            default: it makes the run depend on timing.
        sync_frac: with ``preempt_stragglers``: the fraction of ranks that
            must have finished (DD-PPO: 0.6). With N ranks, a rank is
            preempted once ``ceil(sync_frac x N)`` are done, so with 2
            ranks only ``sync_frac <= 0.5`` ever preempts.
        min_rollout_fraction: with ``preempt_stragglers``: the least
            fraction of ``unroll_length`` a rank collects (per
            environment) before it can be preempted (DD-PPO: 0.25).
        preempt_rule: with ``preempt_stragglers`` and ``"sync"``
            collection: ``"throughput"`` (default) preempts a rank only
            while it collects slower than the run's env steps/s, i.e. when
            ending its rollout raises the run's throughput (a rank whose
            learner dominates the iteration keeps collecting);
            ``"always"``: DD-PPO's rule alone. See
            `alf.trainers.preemption`.
        minibatch_size: transitions per minibatch (global; each rank
            draws ``local_minibatch_size`` of them).
        num_epochs: on-policy algorithms (PPO, PPG): passes over each
            unroll, each cut into minibatches.
        num_updates_per_iter: off-policy algorithms (SAC, DQN): gradient
            updates per training iteration, each on a minibatch sampled
            from the replay buffer; with ``unroll_length * num_envs`` env
            steps per iteration this sets the updates per env step.
        initial_collect_steps: off-policy: env steps (global) of uniformly
            random actions stored before training starts.
        replay_buffer_capacity: off-policy: transitions kept (global; each
            of N ranks keeps 1/N of them).
        num_env_steps: training budget in environment steps (global).
        seed: base random seed, an integer in 0..2**32 - 1.
        eval_interval: evaluate every this many iterations (0: only at the
            end).
        num_eval_episodes: episodes per evaluation.
        held_out_env_load_fn: if set, every evaluation also plays
            ``num_held_out_eval_episodes`` in environments from this
            function (same arguments as ``env_load_fn``), e.g. scenarios
            training never sees; written to ``eval_held_out.csv`` and
            TensorBoard's ``eval_held_out/``. In gin, a scope keeps the
            training environments' other settings:
            ``TrainerConfig.held_out_env_load_fn =
            @held_out/suite_metadrive.load`` with
            ``held_out/suite_metadrive.load.start_seed = 0``.
        num_held_out_eval_episodes: episodes per held-out evaluation (None:
            ``num_eval_episodes``). They play in at most
            ``num_eval_episodes`` environments, queued: 40 with 10
            environments cost time, not 30 more simulator processes.
            Ten of MetaDrive's 200 held-out scenarios are a small sample
            of them (docs/metadrive.md).
        eval_deterministic: evaluate the deterministic policy (the mode:
            the Gaussian's mean, the most likely category); False evaluates
            the sampling policy that collects training data. They can
            differ a lot when actions are clipped: a Gaussian whose mean
            sits beyond the bound acts like a constant action when
            deterministic.
        calibrate_offsets: ``{dimension: (offset, ...)}``: before every
            evaluation, play the deterministic policy with each combination
            of these offsets (and none) in ``num_calibration_episodes``
            episodes, keep the best by ``best_metric`` (``average_return``
            without one; of equals the smallest offset) and evaluate with
            it (`alf.trainers.calibration`; PPO and PPG, Box actions,
            ``eval_deterministic``). The chosen offset is kept in
            checkpoints (``alf.bin.play`` acts with it), written to
            ``eval.csv`` as ``offset_D``, and every candidate's result to
            ``calibration.csv``. None: no calibration.
        calibration_env_load_fn: where the calibration plays (as
            ``held_out_env_load_fn``): a validation split that neither the
            evaluation nor the held-out evaluation plays keeps their curves
            out of sample for the choice. None: the training environments
            (the evaluation's own episodes: in sample).
        num_calibration_episodes: episodes per candidate (None:
            ``num_eval_episodes``).
        async_eval: evaluate in a background process (rank 0's), on a copy
            of the policy taken at the evaluation's env step, while
            training goes on (`alf.trainers.async_evaluator`); results are
            recorded under that env step when they arrive, and the last
            one is waited for. An evaluation that falls due while another
            is played waits; a newer one replaces it (logged).
        summary_interval: write training summaries every this many
            iterations (and with every checkpoint, so that it counts
            every episode and a stop loses none of their statistics).
        checkpoint_interval: save a checkpoint every this many iterations
            (and always at the end and on Ctrl-C).
        max_checkpoints: keep this many newest checkpoints (None: all).
        checkpoint_replay: off-policy: with every checkpoint each rank
            also saves its replay buffer's contents, as
            ``ckpt/local-<env_steps>-rank<r>.pt`` (the newest two kept),
            so that a resumed run goes on with them. False (or a resume
            from an older checkpoint, or another number of processes):
            the resumed run refills an empty buffer with its restored
            policy before updates resume.
        best_metric: the evaluation metric (higher is better) whose best
            value so far keeps its checkpoint as ``ckpt/best.pt``, with
            ``ckpt/best.json`` saying when and what it scored; never
            deleted for newer checkpoints (which are kept as
            ``max_checkpoints`` says). ``average_return``,
            ``average_episode_length`` or one of the environment's episode
            metrics (MetaDrive: ``route_completion``, ``success_rate``);
            None: no best checkpoint.
        torch_num_threads: torch intra-op threads per process; 1 is fastest
            for small networks and is what keeps several processes on one
            machine from fighting over cores.
        log_interval_seconds: console progress every this many seconds (0:
            every iteration).
        sync_check_interval: in distributed training, check every this many
            iterations that parameters and synced buffers are equal on all
            ranks, and after a run's first iteration and before every
            periodic and final checkpoint (0: never).
        device: where the algorithm's modules, replay buffers and training
            live: ``auto`` (this rank's GPU under ``--distributed multi-gpu``
            or torchrun with GPUs; otherwise the GPU if one is visible to a
            single process, else the CPU), ``cpu``, ``cuda`` or ``cuda:N``
            (single process). Environments always run on the CPU. Small MLPs
            (CartPole, MetaDrive's state vector) train faster on the CPU.
        world_size: the number of ranks the sizes are divided among: 1,
            or what `per_rank` set. The launch decides it, so gin refuses
            it as a setting.
        local_num_envs, local_minibatch_size, local_initial_collect_steps,
            local_replay_buffer_capacity: this rank's share of ``num_envs``,
            ``minibatch_size``, ``initial_collect_steps`` and
            ``replay_buffer_capacity`` (read-only: the global size divided
            by ``world_size``).
        mini_batch_size: deprecated spelling of ``minibatch_size``
            (accepted with a warning; not an attribute).
        num_updates_per_train_iter: deprecated: sets both ``num_epochs``
            and ``num_updates_per_iter`` (accepted with a warning; not an
            attribute).
    """

    algorithm_ctor: Optional[Callable] = None
    env_name: str = "CartPole-v1"
    env_load_fn: Callable = suite_gym.load
    num_envs: int = 8
    async_env: bool = False
    unroll_mode: str = "sync"
    max_policy_lag: int = 1
    envs_per_actor: int = 1
    inference_workers: int = 0
    segment_length: Optional[int] = None
    actor_niceness: int = 10
    unroll_length: int = 128
    preempt_stragglers: bool = False
    sync_frac: float = 0.6
    min_rollout_fraction: float = 0.25
    preempt_rule: str = "throughput"
    minibatch_size: int = 256
    num_epochs: int = 10
    num_updates_per_iter: int = 10
    num_env_steps: int = 100_000
    initial_collect_steps: int = 0
    replay_buffer_capacity: int = 100_000
    seed: int = 0
    eval_interval: int = 20
    num_eval_episodes: int = 10
    held_out_env_load_fn: Optional[Callable] = None
    num_held_out_eval_episodes: Optional[int] = None
    eval_deterministic: bool = True
    calibrate_offsets: Optional[dict] = None
    calibration_env_load_fn: Optional[Callable] = None
    num_calibration_episodes: Optional[int] = None
    async_eval: bool = False
    summary_interval: int = 10
    checkpoint_interval: int = 100
    max_checkpoints: Optional[int] = 5
    checkpoint_replay: bool = True
    best_metric: Optional[str] = "average_return"
    torch_num_threads: int = 1
    log_interval_seconds: float = 10.0
    sync_check_interval: int = 50
    device: str = "auto"
    world_size: int = 1
    # Former spellings: gin files and saved runs' config.gin still use them.
    mini_batch_size: dataclasses.InitVar[int] = FORMER
    num_updates_per_train_iter: dataclasses.InitVar[int] = FORMER

    def __post_init__(self, mini_batch_size, num_updates_per_train_iter):
        if self.algorithm_ctor is None:
            raise ConfigError("TrainerConfig.algorithm_ctor is not set; bind "
                              "it in gin, e.g. "
                              "TrainerConfig.algorithm_ctor = @PPOAlgorithm")
        if former_spelling("TrainerConfig", "mini_batch_size",
                           mini_batch_size, ["minibatch_size"],
                           self.given("minibatch_size")):
            self.minibatch_size = mini_batch_size
        if former_spelling("TrainerConfig", "num_updates_per_train_iter",
                           num_updates_per_train_iter,
                           ["num_epochs (on-policy)",
                            "num_updates_per_iter (off-policy)"],
                           self.given("num_epochs")
                           or self.given("num_updates_per_iter")):
            self.num_epochs = num_updates_per_train_iter
            self.num_updates_per_iter = num_updates_per_train_iter
        for name in ("num_envs", "unroll_length", "minibatch_size",
                     "num_epochs", "num_updates_per_iter", "num_env_steps",
                     "num_eval_episodes", "summary_interval",
                     "checkpoint_interval", "torch_num_threads",
                     "replay_buffer_capacity", "envs_per_actor",
                     "world_size"):
            value = getattr(self, name)
            if not _is_int(value) or value < 1:
                raise ConfigError(f"TrainerConfig.{name}={value!r}; it must "
                                  "be a positive integer")
        if self.max_checkpoints is not None and (
                not _is_int(self.max_checkpoints) or self.max_checkpoints < 1):
            # -1 kept none (a resume then started afresh), 0 all.
            raise ConfigError(f"TrainerConfig.max_checkpoints="
                              f"{self.max_checkpoints!r}; it must be a "
                              "positive integer, or None (keep all)")
        for name, zero in (("eval_interval", "only at the end"),
                           ("sync_check_interval", "never")):
            value = getattr(self, name)
            if not _is_int(value) or value < 0:
                raise ConfigError(f"TrainerConfig.{name}={value!r}; it must "
                                  f"be an integer >= 0 (0: {zero})")
        if not _is_int(self.seed) or not 0 <= self.seed <= MAX_SEED:
            # gymnasium refuses a negative seed, torch one past 64 bits.
            raise ConfigError(f"TrainerConfig.seed={self.seed!r}; it must be "
                              f"an integer in 0..{MAX_SEED}")
        if (isinstance(self.log_interval_seconds, bool)
                or not isinstance(self.log_interval_seconds, (int, float))
                or not 0 <= self.log_interval_seconds < math.inf):
            raise ConfigError(f"TrainerConfig.log_interval_seconds="
                              f"{self.log_interval_seconds!r}; it must be a "
                              "number of seconds >= 0 (0: every iteration)")
        for name in ("num_held_out_eval_episodes",
                     "num_calibration_episodes"):
            value = getattr(self, name)
            if value is not None and (not _is_int(value)
                                      or value < 1):
                raise ConfigError(f"TrainerConfig.{name}={value!r}; it must "
                                  f"be a positive integer or None "
                                  f"(num_eval_episodes)")
        for name in ("async_env", "preempt_stragglers", "eval_deterministic",
                     "async_eval", "checkpoint_replay"):
            value = getattr(self, name)
            if not isinstance(value, bool):  # "False" would read as true
                raise ConfigError(f"TrainerConfig.{name}={value!r}; valid: "
                                  "True or False")
        self._check_calibration()
        if (not _is_int(self.initial_collect_steps)
                or self.initial_collect_steps < 0):
            raise ConfigError(f"TrainerConfig.initial_collect_steps="
                              f"{self.initial_collect_steps!r}; it must be "
                              "an integer >= 0")
        if self.unroll_mode not in UNROLL_MODES:
            raise ConfigError(f"TrainerConfig.unroll_mode="
                              f"{self.unroll_mode!r}; valid: "
                              f"{', '.join(UNROLL_MODES)}")
        for name in ("max_policy_lag", "inference_workers"):
            value = getattr(self, name)
            if not _is_int(value) or value < 0:
                raise ConfigError(f"TrainerConfig.{name}={value!r}; it "
                                  "must be an integer >= 0")
        if (not _is_int(self.actor_niceness)
                or not 0 <= self.actor_niceness <= 19):
            raise ConfigError(f"TrainerConfig.actor_niceness="
                              f"{self.actor_niceness!r}; valid: an integer "
                              "in 0..19 (0: the learner's priority)")
        self._check_async_only()
        self._check_segments()
        for name in ("sync_frac", "min_rollout_fraction"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0 < value <= 1:
                raise ConfigError(f"TrainerConfig.{name}={value!r}; it must "
                                  "be a fraction in (0, 1]")
        preemption.check_rule(self.preempt_rule)
        _parse_device(self.device)
        self._check_divides(self.world_size)

    def _check_calibration(self) -> None:
        """Refuses a ``calibrate_offsets`` that cannot be played."""
        if self.calibrate_offsets is None:
            return
        calibration.candidates(self.calibrate_offsets)
        if not self.eval_deterministic:
            raise ConfigError(
                f"TrainerConfig.calibrate_offsets={self.calibrate_offsets!r}"
                " needs eval_deterministic=True (the offset moves the "
                "deterministic action); drop one of them")

    def _check_async_only(self) -> None:
        """Refuses an ``"async"``-only setting changed from its default in
        synchronous collection, where it would do nothing (a run that is
        not what its config says)."""
        if self.unroll_mode == "async":
            return
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in _ASYNC_ONLY and value != f.default:
                raise ConfigError(
                    f"TrainerConfig.{f.name}={value!r} needs "
                    f"unroll_mode=\"async\" (it is {self.unroll_mode!r}); "
                    "drop it or set TrainerConfig.unroll_mode=\"async\"")

    def _check_segments(self) -> None:
        """Refuses a ``segment_length`` that cannot be used."""
        seg = self.segment_length
        if seg is None:
            return
        if (not _is_int(seg) or seg < 1 or
                self.unroll_length % seg):
            raise ConfigError(
                f"TrainerConfig.segment_length={seg!r}; it must be None or "
                f"a positive divisor of unroll_length={self.unroll_length}")
        if self.preempt_stragglers:
            raise ConfigError(
                f"TrainerConfig.segment_length={seg} does not combine with "
                "preempt_stragglers=True; drop one of them")

    def _check_divides(self, world_size: int) -> None:
        """Refuses global sizes that do not divide among ``world_size``:
        ``num_envs`` and those the algorithm divides
        (``divided_config_sizes``; all of them for an algorithm that does
        not say)."""
        used = getattr(self.algorithm_ctor, "divided_config_sizes",
                       _DIVIDED)
        for name in ("num_envs", *(n for n in _DIVIDED if n in used)):
            if getattr(self, name) % world_size:
                raise ConfigError(
                    f"TrainerConfig.{name}={getattr(self, name)} does not "
                    f"divide among {world_size} processes; use a multiple "
                    f"of {world_size}")

    def unused_settings(self, algorithm) -> List[str]:
        """What a run says of the settings given (bound away from their
        defaults) that ``algorithm``'s kind of training never reads: an
        on-policy algorithm's replay settings, an off-policy one's epochs
        (a gin file written for the other kind trained without a word)."""
        from alf.algorithms.off_policy_algorithm import OffPolicyAlgorithm
        from alf.algorithms.rl_algorithm import OnPolicyAlgorithm
        if isinstance(algorithm, OnPolicyAlgorithm):
            names: Tuple[str, ...] = ("num_updates_per_iter",
                                      "initial_collect_steps",
                                      "replay_buffer_capacity")
            kind = ("on-policy: num_epochs sets its updates, and it keeps "
                    "no replay buffer")
        elif isinstance(algorithm, OffPolicyAlgorithm):
            names = ("num_epochs", )
            kind = "off-policy: num_updates_per_iter sets its updates"
        else:
            return []
        if self.num_epochs == self.num_updates_per_iter:
            # num_updates_per_train_iter, the former spelling, set both.
            names = tuple(n for n in names
                          if n not in ("num_epochs", "num_updates_per_iter"))
        return [f"TrainerConfig.{n}={getattr(self, n)!r} does nothing for "
                f"{type(algorithm).__name__} ({kind})"
                for n in names if self.given(n)]

    def given(self, name: str) -> bool:
        """Whether field ``name`` differs from its default (was given)."""
        return getattr(self, name) != _FIELDS[name].default

    def resolve_device(self, group: Optional[str] = None) -> torch.device:
        """The device a training process uses (see ``device``).

        Args:
            group: the kind of process group the process is in: ``none``,
                ``gloo`` (CPU ranks) or ``nccl`` (one GPU per rank); by
                default the group this process is in. The launcher passes
                the group its ranks will form, to refuse a bad setting
                before spawning them.

        Raises:
            ConfigError: for an unknown name, a GPU that is not there, or a
                GPU asked of CPU ranks.
        """
        setting, device = self.device, _parse_device(self.device)
        if group is None:
            group = ("nccl" if distributed.uses_gpus() else
                     "gloo" if distributed.is_distributed() else "none")
        if group == "nccl":
            if device.type == "cpu":
                return device
            if device.index is not None:
                raise ConfigError(
                    f"TrainerConfig.device={setting!r}: under --distributed "
                    "multi-gpu each rank uses its own GPU; use 'auto' or "
                    "'cuda'")
            return distributed.local_device()
        if group == "gloo":
            if setting == "auto" or device.type == "cpu":
                return torch.device("cpu")
            raise ConfigError(
                f"TrainerConfig.device={setting!r} with CPU processes "
                "(--distributed multi-process); use --distributed multi-gpu "
                "to train on GPUs")
        if setting == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else
                                "cpu")
        if device.type == "cuda":
            count = torch.cuda.device_count()
            if count == 0:
                raise ConfigError(f"TrainerConfig.device={setting!r} but no "
                                  "GPU is visible; use 'cpu' or 'auto'")
            if (device.index or 0) >= count:
                raise ConfigError(
                    f"TrainerConfig.device={setting!r} but {count} GPU(s) "
                    f"are visible; use cuda:0 .. cuda:{count - 1}")
        return device

    @property
    def steps_per_iteration(self) -> int:
        """Environment steps per iteration (global)."""
        return self.num_envs * self.unroll_length

    @property
    def local_num_envs(self) -> int:
        """This rank's training environments."""
        return self.num_envs // self.world_size

    @property
    def local_minibatch_size(self) -> int:
        """This rank's transitions of each minibatch."""
        return self.minibatch_size // self.world_size

    @property
    def local_initial_collect_steps(self) -> int:
        """This rank's env steps of the initial random collection."""
        return self.initial_collect_steps // self.world_size

    @property
    def local_replay_buffer_capacity(self) -> int:
        """Transitions this rank's replay buffer keeps."""
        return self.replay_buffer_capacity // self.world_size

    def per_rank(self, world_size: int) -> "TrainerConfig":
        """The config one of ``world_size`` ranks runs with: this one with
        ``world_size`` set (global sizes unchanged; the ``local_*`` ones
        are the rank's share).

        Raises:
            ConfigError: if a global size does not divide by ``world_size``,
                or the algorithm's ``check_config`` refuses the sizes.
        """
        if world_size == self.world_size == 1:
            return self
        self._check_divides(world_size)
        ranked = dataclasses.replace(self, world_size=world_size)
        if world_size == 1:
            return ranked
        modes = getattr(self.algorithm_ctor, "preemptible_unroll_modes", ())
        if self.preempt_stragglers and self.unroll_mode not in modes:
            name = getattr(self.algorithm_ctor, "__name__",
                           str(self.algorithm_ctor))
            raise ConfigError(
                f"TrainerConfig.preempt_stragglers=True: {name} cannot train "
                f"on rollouts ended early with unroll_mode="
                f"{self.unroll_mode!r} (it can with: "
                f"{', '.join(modes) or 'none'}); set preempt_stragglers = "
                "False")
        check = getattr(self.algorithm_ctor, "check_config", None)
        if check is not None:
            check(ranked, world_size)
        return ranked


#: The evaluations' own environment loaders: rank 0's alone (and a
#: gin-scoped one, ``@held_out/suite_metadrive.load``, does not pickle).
EVALUATION_LOAD_FNS = ("held_out_env_load_fn", "calibration_env_load_fn")


def without_evaluation_envs(config: TrainerConfig) -> TrainerConfig:
    """``config`` with `EVALUATION_LOAD_FNS` unset: what a process that
    does not evaluate (an actor) or gets them apart (the evaluator) is
    sent."""
    return dataclasses.replace(config, held_out_env_load_fn=None,
                               calibration_env_load_fn=None)


def _parse_device(setting) -> torch.device:
    """``setting`` as a device (``auto`` reads as ``cuda``), or ConfigError."""
    message = (f"TrainerConfig.device={setting!r} is not a device; use "
               "'auto', 'cpu', 'cuda' or 'cuda:N'")
    try:
        device = torch.device("cuda" if setting == "auto" else setting)
    except (RuntimeError, TypeError) as e:
        raise ConfigError(message) from e
    if device.type not in ("cpu", "cuda"):
        raise ConfigError(message)
    return device


#: The sizes that `TrainerConfig.per_rank` divides among the ranks.
_DIVIDED = ("num_envs", "minibatch_size", "initial_collect_steps",
            "replay_buffer_capacity")
_FIELDS = {f.name: f for f in dataclasses.fields(TrainerConfig)}


def _is_int(value) -> bool:
    """An integer setting's value: an int, not a bool (``True`` is an int
    to Python, but ``max_policy_lag=True`` is a mistake)."""
    return isinstance(value, int) and not isinstance(value, bool)
