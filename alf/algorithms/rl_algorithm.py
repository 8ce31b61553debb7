"""RL algorithm bases: observation normalisation and on-policy training."""
from typing import (Callable, Dict, Iterator, List, Optional, Tuple, Type,
                    Union)

import gymnasium as gym
import torch

from alf import nest
from alf.algorithms.algorithm import Algorithm
from alf.data_structures import Experience
from alf.networks.encoding import check_box_widths, observation_shape
from alf.replay_buffers import ReplayBuffer
from alf.utils.errors import ConfigError
from alf.utils.normalizer import RunningNormalizer


class RLAlgorithm(Algorithm):
    """An algorithm that interacts with an environment.

    The trainer calls, for every environment step, `observe` then
    `rollout_step`, stores the transition with `store`, and after each unroll
    calls `train_iter`.

    A subclass declares the action spaces it can act in
    (`supported_action_spaces`, `needs_bounded_actions`); the constructor
    refuses any other before anything is built.

    Args:
        observation_space: one environment's observation space.
        action_space: one environment's action space.
        config: the rank's `TrainerConfig` (`TrainerConfig.per_rank`):
            global sizes under their names, the rank's as ``local_*``.
        normalize_observations: keep running statistics of (Box)
            observations and normalise them before the networks see them.

    Raises:
        ConfigError: an action space this algorithm does not support.
    """

    #: The kinds of action space this algorithm can act in. The default is
    #: what `ActorDistributionNetwork` acts in (a categorical or a Gaussian
    #: policy); a subclass acting otherwise declares its own.
    supported_action_spaces: Tuple[Type[gym.Space], ...] = (
        gym.spaces.Discrete, gym.spaces.Box)
    #: Box action spaces must have finite bounds (a policy squashed onto
    #: them has nothing to squash onto otherwise).
    needs_bounded_actions: bool = False
    #: Box action spaces must be one-dimensional (alf's networks act in
    #: vectors [B, n]); a subclass whose own networks act in the space's
    #: shape declares False.
    flat_box_actions: bool = True
    #: Appended to the refusal of an unsupported action space, e.g. the
    #: algorithm to use instead: one for every space, or one per kind of
    #: space refused (``{gym.spaces.Discrete: "use DQNAlgorithm"}``).
    action_space_hint: Union[str, Dict[Type[gym.Space], str]] = ""
    #: The global `TrainerConfig` sizes this algorithm divides among the
    #: ranks (it reads their ``local_*`` shares): each must be a multiple
    #: of the number of processes (``num_envs`` always is). All of them by
    #: default; one that uses none declares ``()``.
    divided_config_sizes: Tuple[str, ...] = (
        "minibatch_size", "initial_collect_steps", "replay_buffer_capacity")

    def __init__(self, observation_space: gym.Space, action_space: gym.Space,
                 config, normalize_observations: bool = False):
        self._check_action_space(action_space, config)
        super().__init__()
        self.observation_space = observation_space
        self.action_space = action_space
        self.config = config
        self.observation_normalizer = None
        # Training iterations behind the current policy; the trainer's
        # collector keeps it (stored steps of lower versions are stale).
        self.policy_version = 0
        #: Set by the trainer under asynchronous collection (None
        #: otherwise): ``train_iter`` calls it where the policy is
        #: ready to act as the coming version although work remains that
        #: changes it little (PPG's auxiliary phase, whose clone loss keeps
        #: the policy close), so that asynchronous collection need not wait
        #: for that work; the trainer publishes the iteration's final
        #: weights, as the same version, after ``train_iter``. Every step
        #: still stores the log-probability of the weights that acted.
        self.policy_ready: Optional[Callable[[], None]] = None
        if normalize_observations:
            self.observation_normalizer = RunningNormalizer(
                observation_shape(f"{type(self).__name__}.normalize_"
                                  "observations", observation_space))

    @classmethod
    def _check_action_space(cls, action_space: gym.Space, config) -> None:
        kinds = cls.supported_action_spaces
        ok = isinstance(action_space, kinds)
        if ok and cls.needs_bounded_actions and isinstance(
                action_space, gym.spaces.Box):
            ok = action_space.is_bounded()
            if ok:
                check_box_widths(cls.__name__, action_space,
                                 f"{config.env_name} has")
        # numpy breaks long bounds over lines; the message stays one line.
        space = " ".join(str(action_space).split())
        if ok and cls.flat_box_actions and isinstance(
                action_space, gym.spaces.Box) and len(action_space.shape) != 1:
            # A policy's actions are a vector [B, n].
            raise ConfigError(
                f"{cls.__name__} acts in one-dimensional Box spaces; "
                f"{config.env_name} has {space}: give the environment an "
                "ActionWrapper that takes a vector and reshapes it to "
                f"{action_space.shape}")
        if ok:
            return
        needed = " or ".join(k.__name__ for k in kinds)
        if cls.needs_bounded_actions:
            needed = "bounded " + needed
        hint = cls.action_space_hint
        if isinstance(hint, dict):
            hint = next((h for kind, h in hint.items()
                         if isinstance(action_space, kind)), "")
        hint = f"; {hint}" if hint else ""
        raise ConfigError(f"{cls.__name__} needs a {needed} action space; "
                          f"{config.env_name} has {space}{hint}")

    def observe(self, observation: torch.Tensor, update: bool = True):
        """Normalises a raw observation batch (identity without normaliser),
        as float32 on the algorithm's device.

        Args:
            observation: raw observations [B, ...] (a nest of them, e.g. a
                Dict space's, for an algorithm of one's own: alf's
                normaliser and networks take one tensor).
            update: count them in the normaliser's pending statistics,
                committed at the next `train_iter`, so the statistics
                change only between unrolls (an unroll's first
                observation, the last one's next observation, was
                normalised before that commit; training uses each
                observation as it acted either way).
        """
        # Environments produce CPU tensors; the networks may be on a GPU,
        # and they and the normaliser compute in float32 (uint8 images,
        # integer or binary vectors, a suite's float64).
        observation = nest.map_structure(
            lambda x: x.to(self.device, torch.float32, non_blocking=True),
            observation)
        norm = self.observation_normalizer
        if norm is None:
            return observation
        if update:
            norm.accumulate(observation)
        return norm.normalize(observation)

    #: The ``TrainerConfig.unroll_mode``s in which this algorithm can train
    #: on rollouts that straggler preemption ended early (shorter than
    #: ``unroll_length``, of different lengths on different ranks; in
    #: ``"async"`` mode also of different lengths per environment, see
    #: `OnPolicyAlgorithm.unroll_lengths`). Each rank must still run the
    #: same number of collective steps.
    preemptible_unroll_modes: Tuple[str, ...] = ()

    def store(self, exp: Experience) -> None:
        """Stores one batched transition."""
        raise NotImplementedError

    # ---- acting in another process (asynchronous collection) ---------------
    #: Names of the child modules whose tensors `rollout_step` reads (the
    #: observation normaliser is always added); None: all of them. It is
    #: sent to every actor after every iteration, so leaving out critics and
    #: target networks matters (SAC's whole state is 5x its actor's).
    acting_modules: Optional[Tuple[str, ...]] = None

    def acting_state(self) -> dict:
        """What acting depends on, for `load_acting_state` in an actor
        process's copy of this algorithm: CPU copies of the parameters and
        buffers (of this module and of the children named in
        `acting_modules`; replay buffers and modules' ``local_buffers``
        excluded) and the plain ``int``/``float``/``bool`` attributes of
        every submodule.

        A subclass whose acting depends on anything else (a Python list, a
        schedule object) must keep it in one of those forms, or override
        both methods.
        """
        tensors, scalars = {}, {}
        wanted = (None if self.acting_modules is None else
                  set(self.acting_modules) | {"observation_normalizer"})
        for prefix, module in _acting_modules(self):
            scalars[prefix] = {k: v for k, v in vars(module).items()
                               if type(v) in (int, float, bool)}
            if wanted is not None and prefix and \
                    prefix.split(".")[0] not in wanted:
                continue
            local = getattr(module, "local_buffers", ())
            for name, t in (list(module.named_parameters(recurse=False)) +
                            list(module.named_buffers(recurse=False))):
                if name not in local:
                    tensors[prefix + name] = t.detach().to("cpu", copy=True)
        return {"tensors": tensors, "scalars": scalars}

    def load_acting_state(self, state: dict) -> None:
        """Makes this copy act as the algorithm whose `acting_state`
        ``state`` is."""
        self.load_state_dict(state["tensors"], strict=False)
        modules = dict(_acting_modules(self))
        for prefix, scalars in state["scalars"].items():
            vars(modules[prefix]).update(scalars)

    def on_resume(self, env_steps: int, local_note: str = "") -> None:
        """Called on every rank once a checkpoint taken at ``env_steps``
        (all ranks' env steps) is loaded; not on a fresh start. For state
        that checkpoints do not hold; ``local_note`` says why this rank's
        `local_state` was not restored ("" if it was, or there was none)."""

    def act_as_trained(self, env_steps: int) -> None:
        """Called on a copy loaded from a checkpoint taken at ``env_steps``
        only to act (``alf.bin.play``), so that its sampling policy is the
        one the run evaluated then; for acting state that checkpoints do
        not hold (`acting_state` carries it to actors)."""

    def idle_settings(self, config) -> List[str]:
        """What a run of ``config`` says (one line each, as a warning at
        its start) of this algorithm's own settings that will do nothing
        in it, e.g. a period longer than the run. Empty: none."""
        return []

    def local_state(self) -> Dict[str, torch.Tensor]:
        """What this rank alone holds and a checkpoint (rank 0's state,
        equal on every rank) does not, e.g. its replay buffer's contents:
        each rank saves it beside every checkpoint. Empty: nothing."""
        return {}

    def load_local_state(self, state: Dict[str, torch.Tensor]) -> None:
        """Restores what `local_state` returned, before `on_resume`.

        Raises:
            ValueError: ``state`` does not fit this algorithm (nothing is
                changed).
        """

    def train_iter(self, progress: float) -> Dict[str, torch.Tensor]:
        """Trains on the stored experience.

        Args:
            progress: fraction of the training budget used, in [0, 1], for
                schedules.

        Returns:
            Scalar tensors to summarise, by name.
        """
        raise NotImplementedError

    def _commit_normalizer(self):
        if self.observation_normalizer is not None:
            self.observation_normalizer.commit()


def _acting_modules(module: torch.nn.Module, prefix: str = ""
                    ) -> Iterator[Tuple[str, torch.nn.Module]]:
    """(state-dict prefix, module) of ``module`` and its submodules, replay
    buffers (and what they hold) left out."""
    if module is None or isinstance(module, ReplayBuffer):
        return
    yield prefix, module
    for name, child in module.named_children():
        yield from _acting_modules(child, prefix + name + ".")


class OnPolicyAlgorithm(RLAlgorithm):
    """Trains on exactly the last unroll, then discards it.

    Holds a `ReplayBuffer` of ``unroll_length`` steps for the rank's
    ``config.local_num_envs`` streams.
    """

    def __init__(self, observation_space, action_space, config, **kwargs):
        super().__init__(observation_space, action_space, config, **kwargs)
        self.replay_buffer = ReplayBuffer(config.unroll_length,
                                          config.local_num_envs)
        # See `set_unroll_lengths`; None: every column is whole.
        self.unroll_lengths: Optional[torch.Tensor] = None

    def store(self, exp: Experience) -> None:
        self.replay_buffer.add_batch(exp)

    def set_unroll_lengths(self, lengths: torch.Tensor) -> None:
        """Says that environment ``b`` of the unroll being stored has only
        ``lengths[b]`` real steps; the rows after them are padding (an
        asynchronous rollout that preemption ended early, where each
        environment had got to its own step). Holds for the next
        `train_iter`; `train_on_unroll` then finds it in
        ``self.unroll_lengths``."""
        self.unroll_lengths = lengths

    def train_iter(self, progress: float) -> Dict[str, torch.Tensor]:
        self._commit_normalizer()
        exp = self.replay_buffer.gather_all()
        self.replay_buffer.clear()
        try:
            return self.train_on_unroll(exp, progress)
        finally:
            self.unroll_lengths = None

    def train_on_unroll(self, exp: Experience,
                        progress: float) -> Dict[str, torch.Tensor]:
        """Trains on one unroll: ``exp`` leaves have shape [T, B, ...]."""
        raise NotImplementedError
