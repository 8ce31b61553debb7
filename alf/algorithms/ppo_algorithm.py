"""Proximal Policy Optimization (clipped surrogate, GAE), readable top to bottom.

Shapes: T = unroll length, B = environments (per rank), N = T * B, M =
minibatch size. One `train_on_unroll`:

1. values V(s) and V(s') of the whole unroll [T, B] with the pre-update
   networks, GAE advantages and lambda-returns [T, B];
2. ``num_epochs`` passes over N transitions in shuffled minibatches of M; each
   minibatch is one `minibatch_loss` (the only parameter-dependent method, the
   one distributed training wraps) and one optimizer step.
"""
import math
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

import gin
import gymnasium as gym
import torch

from alf.algorithms.algorithm import (check_learning_rate, check_max_grad_norm,
                                      check_number)
from alf.algorithms.deterministic_offset import (CALIBRATED, CalibratedOffset,
                                                 configured_offset, shift)
from alf.algorithms.rl_algorithm import OnPolicyAlgorithm
from alf.data_structures import AlgStep, Experience, LossInfo
from alf.networks.actor import (ActorDistributionNetwork, PerDimension,
                                per_dimension)
from alf.networks.value import ValueNetwork
from alf.replay_buffers import minibatch_indices
from alf.utils import distributed
from alf.utils.errors import ConfigError, TrainingError
from alf.utils.optim import Adam
from alf.utils.value_ops import generalized_advantage_estimation


class PPOBatch(NamedTuple):
    """What one PPO minibatch holds; every field has leading dim [M]."""

    observation: torch.Tensor
    action: torch.Tensor
    log_prob: torch.Tensor  # log pi_old(a|s) at collection time
    value: torch.Tensor  # V_old(s)
    advantage: torch.Tensor  # standardised per minibatch before the loss
    returns: torch.Tensor  # lambda-return: value target
    # log pi(a|s) of the policy at the start of this iteration: log_prob
    # itself unless collection ran ahead (then the behaviour policy is older).
    start_log_prob: torch.Tensor


class PPOTrainInfo(NamedTuple):
    """`PPOAlgorithm.train_step`'s output, with gradients."""

    log_prob: torch.Tensor
    entropy: torch.Tensor
    value: torch.Tensor


def scheduled(value: float, schedule: str, progress: float) -> float:
    """``value`` at ``progress`` in [0, 1] under a ``constant``/``linear`` decay."""
    if schedule == "constant":
        return value
    if schedule == "linear":
        return value * max(1.0 - progress, 0.0)
    raise ConfigError(f"unknown schedule {schedule!r}; valid: constant, "
                      "linear")


def _log_std_parameters(actor, bound) -> List[torch.nn.Parameter]:
    """The ``log_std`` parameters of ``actor`` that ``bound`` (PPO's
    ``log_std_bound``) clamps; refuses a bound they cannot honour."""
    if bound is None:
        return []
    found = [p for name, p in actor.named_parameters()
             if name.split(".")[-1] == "log_std"]
    if (not isinstance(bound, (tuple, list)) or len(bound) != 2 or
            not all(isinstance(b, (int, float)) for b in bound)):
        raise ConfigError(f"PPOAlgorithm.log_std_bound={bound!r}; valid: "
                          "(start, end), two numbers")
    if not found:
        raise ConfigError(
            f"PPOAlgorithm.log_std_bound={tuple(bound)!r} needs a Gaussian "
            f"policy with a log_std parameter; {type(actor).__name__} has "
            "none (a discrete action space, a Beta policy, or gSDE?)")
    if any(isinstance(m, ActorDistributionNetwork) and
           m.std_head is not None for m in actor.modules()):
        raise ConfigError(
            f"PPOAlgorithm.log_std_bound={tuple(bound)!r} bounds a "
            "state-independent log std; the policy has "
            "state_dependent_std=True (use one or the other)")
    return found


def _ramp(progress: float, start: float, end: float) -> float:
    """0 until ``start``, 1 from ``end``, linear between: where a
    ``(start, end, final)`` schedule stands at ``progress``."""
    return min(max((progress - start) / (end - start), 0.0), 1.0)


def _check_explore_fraction(fraction, schedule) -> None:
    """Refuses an explore fraction or schedule PPO cannot act with."""
    if (isinstance(fraction, bool) or not isinstance(fraction, (int, float))
            or not 0.0 < fraction <= 1.0):
        raise ConfigError(f"PPOAlgorithm.explore_fraction={fraction!r}; "
                          f"valid: a number in (0, 1]")
    if schedule is None:
        return
    if (not isinstance(schedule, (tuple, list)) or len(schedule) != 3
            or not all(isinstance(x, (int, float))
                       and not isinstance(x, bool) for x in schedule)
            or not 0.0 <= schedule[0] < schedule[1] <= 1.0
            or not 0.0 < schedule[2] <= 1.0):
        raise ConfigError(
            f"PPOAlgorithm.explore_fraction_schedule={schedule!r}; valid: "
            f"(start, end, final) with 0 <= start < end <= 1 and final in "
            f"(0, 1]")


def _beta_actors(actor, schedule) -> List[ActorDistributionNetwork]:
    """The Beta policies of ``actor`` whose concentrations ``schedule``
    (PPO's ``beta_concentration_schedule``) scales, each with a scale per
    dimension if the schedule's ``final`` has one; refuses a schedule they
    cannot honour."""
    if schedule is None:
        return []
    final = schedule[-1] if isinstance(schedule, (tuple, list)) else None
    finals = final if isinstance(final, (tuple, list)) else (final, )
    if (not isinstance(schedule, (tuple, list))
            or len(schedule) not in (2, 3)
            or not all(isinstance(x, (int, float)) for x in schedule[:-1])
            or not all(isinstance(x, (int, float)) and x > 0
                       for x in finals)
            or not 0 <= schedule[0] < (schedule[1] if len(schedule) == 3
                                       else 1) <= 1):
        raise ConfigError(
            f"PPOAlgorithm.beta_concentration_schedule={schedule!r}; valid: "
            "(start, final) or (start, end, final), progresses 0 <= start "
            "< end <= 1 and a scale final > 0 (or one per action "
            "dimension)")
    found = [m for m in actor.modules()
             if isinstance(m, ActorDistributionNetwork) and m.beta]
    if not found:
        raise ConfigError(
            f"PPOAlgorithm.beta_concentration_schedule={tuple(schedule)!r} "
            "needs a Beta policy (ActorDistributionNetwork.beta=True or "
            "DisjointPolicyValueNetwork.beta=True)")
    for m in found:
        dims = m.action_low.numel()
        per_dim = per_dimension(schedule[-1], dims,
                                "PPOAlgorithm.beta_concentration_schedule's "
                                "final")
        if per_dim.dim() and not m.concentration_scale.dim():
            # A buffer that holds a scale per dimension from now on (and
            # in the checkpoints).
            m.concentration_scale = m.concentration_scale.expand(
                dims).clone()
    return found


# PPO's numeric settings: (low, high, low refused); None is valid for the
# optional ones (no value clipping, no early stop).
_RANGES = dict(gamma=(0.0, 1.0, False), gae_lambda=(0.0, 1.0, False),
               clip_ratio=(0.0, math.inf, True),
               value_loss_coef=(0.0, math.inf, False),
               entropy_coef=(0.0, math.inf, False),
               adam_eps=(0.0, math.inf, True),
               reward_scale=(0.0, math.inf, True),
               value_clip=(0.0, math.inf, True),
               target_kl=(0.0, math.inf, True))
_OPTIONAL = ("value_clip", "target_kl")


def check_ppo_numbers(owner: str, settings: Dict[str, object]) -> None:
    """Refuses PPO's numeric ``settings`` (name -> value) out of range (a
    discount above 1 diverges, a clip ratio of 0 never moves the policy, a
    negative coefficient or reward scale trains the wrong way), naming
    ``owner.name`` (``PPGAlgorithm.gamma`` where PPG was given it).

    Raises:
        ConfigError: naming the setting, its value and the valid range.
    """
    for name, value in settings.items():
        if name in _RANGES and not (name in _OPTIONAL and value is None):
            low, high, low_open = _RANGES[name]
            check_number(f"{owner}.{name}", value, low, high, low_open)


def check_minibatch_size(config, world_size: int) -> None:
    """Refuses minibatches larger than the unroll they are drawn from.

    Each would silently be the whole unroll. ``config`` is a rank's, one of
    ``world_size``: a rank's minibatch is drawn from its own unroll; the
    message gives the global sizes (those the user set) too.

    Raises:
        ConfigError: naming both sizes.
    """
    local_batch = config.local_num_envs * config.unroll_length
    if config.local_minibatch_size <= local_batch:
        return
    per_rank = (f"; per process, {config.local_minibatch_size} of "
                f"{local_batch}" if world_size > 1 else "")
    raise ConfigError(
        f"TrainerConfig.minibatch_size={config.minibatch_size} is "
        f"more than the {config.steps_per_iteration} transitions of one "
        f"iteration (num_envs={config.num_envs} x unroll_length="
        f"{config.unroll_length}) that minibatches are drawn from"
        f"{per_rank}; use at most {config.steps_per_iteration}")


def uneven_minibatch_indices(n: int, per_epoch: int,
                             num_epochs: int) -> List[torch.Tensor]:
    """``num_epochs`` shuffled passes over ``n`` rows, each cut into
    ``per_epoch`` near-equal minibatches: the same count on every rank
    whatever its ``n``."""
    if n < per_epoch:
        raise TrainingError(
            f"this rank holds {n} transitions, fewer than the {per_epoch} "
            "minibatches of an epoch; collect more before ending a rollout "
            "early (or use a larger minibatch_size)")
    out = []
    for _ in range(num_epochs):
        out += list(torch.randperm(n).tensor_split(per_epoch))
    return out


def rank_weights(indices: List[torch.Tensor]):
    """Per minibatch: (this rank's loss weight, the global row count).

    DDP averages the ranks' gradients; weighting each rank's mean loss by
    ``world x rows / global rows`` turns that average into the mean over all
    ranks' rows. One all-reduce for the whole iteration.
    """
    rows = torch.tensor([float(len(i)) for i in indices], dtype=torch.float64)
    total = distributed.all_reduce_sum(rows.clone())
    weights = rows * distributed.get_world_size() / total
    return weights.float().tolist(), total.tolist()


@gin.configurable
class PPOAlgorithm(OnPolicyAlgorithm):
    """PPO with GAE, clipped surrogate, optional value clipping.

    Args:
        observation_space, action_space, config: see `RLAlgorithm`; uses
            ``config.num_epochs`` and the rank's
            ``config.local_minibatch_size``.
        actor_network_ctor: ``(observation_space, action_space) -> module``
            returning an action distribution.
        value_network_ctor: ``(observation_space) -> module`` returning [B].
        learning_rate: Adam's learning rate (at progress 0).
        lr_schedule: ``constant`` or ``linear`` (to 0 at the end of training).
        adam_eps: Adam's epsilon.
        gamma: discount.
        gae_lambda: GAE lambda.
        clip_ratio: PPO's epsilon for the probability ratio.
        clip_schedule: ``constant`` or ``linear``.
        value_clip: if set, clip the value change to this (PPO2-style).
        value_loss_coef: weight of the value loss.
        entropy_coef: weight of the entropy bonus.
        max_grad_norm: clip the global gradient norm (None: no clipping).
        normalize_advantages: standardise advantages per minibatch.
        target_kl: stop the epochs of an iteration early once a minibatch's
            approximate KL from the policy at the start of the iteration
            exceeds ``1.5 * target_kl`` (None: never).
        normalize_observations: running observation normalisation.
        reward_scale: rewards are multiplied by this before GAE (values
            then live on the scaled reward's scale).
        uneven_batches: ranks may train on unrolls of different lengths
            (a rank that ended its rollout early). Every rank still runs the
            same number of minibatches (``ceil(unroll_length x num_envs /
            minibatch_size)`` per epoch, its rows split evenly among them)
            and each rank's loss is weighted by its share of the
            minibatch's global sample count, so that DDP's averaged
            gradient is the mean gradient over all ranks' samples; the KL
            early stop averages with the same weights. Costs one
            all-reduce per iteration. ``TrainerConfig.preempt_stragglers``
            turns it on.
        log_std_bound: ``(start, end)``: an upper bound on the Gaussian
            policy's log standard deviation that moves linearly from
            ``start`` to ``end`` over training; after each iteration's
            updates the log std is clamped to it, so the exploration noise
            must shrink and the mean must learn to act on its own (the
            deterministic policy is then the one that was trained). None:
            the log std is free. Needs a Box action space.
        beta_concentration_schedule: ``(start, end, final)``: for a Beta
            policy, the scale of its concentrations
            (`ActorDistributionNetwork.beta_concentration_scale`, a buffer:
            in checkpoints and sent to the actors) stays at its configured
            value until progress ``start``, moves linearly to ``final`` at
            progress ``end`` and stays there (``final``: a number, or one
            per action dimension), set before each iteration's
            updates: the exploration noise narrows while the means, the
            deterministic action, keep learning to act with the noise that
            is left, and with ``end < 1`` they go on learning at the final
            noise. ``(start, final)`` ends at the end of training. None: the
            configured scale throughout.
        explore_fraction: the probability that an environment's step
            samples its action; the other steps act with the policy's mode
            (its deterministic action). 1: every step samples (PPO). Below
            1 the behaviour is a mixture that drives mostly as the
            deterministic policy will, so the advantages, and the
            gradient the sampled steps give the mode, are those of the
            deterministic policy's own states, not of a car weaved and
            slowed by noise on every step (docs/metadrive.md). A mode step
            follows a point mass: its stored log-density is +inf, its
            likelihood ratio 0, and the policy loss, its KL and clip
            fraction average over the sampled steps alone (values and
            advantages use every step).
        explore_fraction_schedule: ``(start, end, final)``: the explore
            fraction stays at ``explore_fraction`` until progress ``start``,
            moves linearly to ``final`` at progress ``end`` and stays there
            (set after each iteration's updates, for the next unroll; in
            checkpoints and sent to the actors). With ``explore_fraction=1``
            the policy learns at its full noise first and then, sampling
            less, on the states of its own deterministic car. None: the
            fraction is constant.
        deterministic_offset: added to the deterministic action (the
            policy's mode, clipped to the action box) where the policy acts
            deterministically (evaluations, ``alf.bin.play``), the sum
            clipped to the box again: a number, one per action dimension,
            or ``{dimension: number}`` (the others 0); Box actions only.
            The training rollouts do not use it. A mean learnt under
            exploration noise is the mean for a noisy agent (on MetaDrive
            the noise slows the car and its mean alone drives too fast);
            a constant offset is the cheapest correction.
            ``alf.bin.calibrate`` chooses it for a checkpoint, and
            ``TrainerConfig.calibrate_offsets`` at every evaluation (kept in
            checkpoints; a binding here overrides it). None: the mode.
    """

    # Unrolls ended early: shorter (sync), or with environments ended at
    # steps of their own (async, `OnPolicyAlgorithm.unroll_lengths`).
    preemptible_unroll_modes = ("sync", "async")
    divided_config_sizes = ("minibatch_size", )
    # A categorical or a Gaussian policy (`ActorDistributionNetwork`).
    supported_action_spaces = (gym.spaces.Discrete, gym.spaces.Box)

    def __init__(self, observation_space, action_space, config,
                 actor_network_ctor: Callable = ActorDistributionNetwork,
                 value_network_ctor: Callable = ValueNetwork,
                 learning_rate: float = 3e-4, lr_schedule: str = "constant",
                 adam_eps: float = 1e-5, gamma: float = 0.99,
                 gae_lambda: float = 0.95, clip_ratio: float = 0.2,
                 clip_schedule: str = "constant",
                 value_clip: Optional[float] = None,
                 value_loss_coef: float = 0.5, entropy_coef: float = 0.0,
                 max_grad_norm: Optional[float] = 0.5,
                 normalize_advantages: bool = True,
                 target_kl: Optional[float] = None,
                 normalize_observations: bool = False,
                 reward_scale: float = 1.0, uneven_batches: bool = False,
                 log_std_bound: Optional[Tuple[float, float]] = None,
                 beta_concentration_schedule: Optional[
                     Tuple[float, ...]] = None,
                 explore_fraction: float = 1.0,
                 explore_fraction_schedule: Optional[
                     Tuple[float, float, float]] = None,
                 deterministic_offset: Optional[PerDimension] = None):
        check_learning_rate("PPOAlgorithm", learning_rate)
        check_max_grad_norm("PPOAlgorithm", max_grad_norm)
        check_ppo_numbers("PPOAlgorithm", dict(
            gamma=gamma, gae_lambda=gae_lambda, clip_ratio=clip_ratio,
            value_loss_coef=value_loss_coef, entropy_coef=entropy_coef,
            adam_eps=adam_eps, reward_scale=reward_scale,
            value_clip=value_clip, target_kl=target_kl))
        _check_explore_fraction(explore_fraction, explore_fraction_schedule)
        check_minibatch_size(config, config.world_size)
        super().__init__(observation_space, action_space, config,
                         normalize_observations=normalize_observations)
        self._explore_fraction = explore_fraction
        self._explore_start = explore_fraction
        self._explore_schedule = explore_fraction_schedule
        if explore_fraction_schedule is not None:
            # The scheduled fraction is in checkpoints, so that a resumed
            # run's first unroll acts as the interrupted one's next would.
            self.register_buffer("explore_fraction_now",
                                 torch.tensor(float(explore_fraction)))
            self.register_load_state_dict_post_hook(
                lambda module, keys: module._read_explore_fraction())
        scheduled(0.0, lr_schedule, 0.0)  # validate the names early
        scheduled(0.0, clip_schedule, 0.0)
        self.actor = actor_network_ctor(observation_space, action_space)
        self._offset = configured_offset(action_space, deterministic_offset)
        calibrated = getattr(config, "calibrate_offsets", None)
        if calibrated is not None:
            setattr(self, CALIBRATED, CalibratedOffset(action_space,
                                                       calibrated))
        self.value_net = value_network_ctor(observation_space)
        self._log_std_bound = log_std_bound
        self._log_stds = _log_std_parameters(self.actor, log_std_bound)
        self._betas = _beta_actors(self.actor, beta_concentration_schedule)
        self._beta_schedule = beta_concentration_schedule
        if beta_concentration_schedule is not None and len(
                beta_concentration_schedule) == 2:
            # (start, final): the end of training is the schedule's end.
            start, final = beta_concentration_schedule
            self._beta_schedule = (start, 1.0, final)
        self._beta_start_scale = [b.concentration_scale.clone()
                                  for b in self._betas]
        self.add_optimizer(
            Adam(self.parameters(), lr=learning_rate, eps=adam_eps))
        self._lr, self._lr_schedule = learning_rate, lr_schedule
        self._clip, self._clip_schedule = clip_ratio, clip_schedule
        self._clip_now = clip_ratio
        self._gamma, self._lambda = gamma, gae_lambda
        self._value_clip = value_clip
        self._vf_coef, self._ent_coef = value_loss_coef, entropy_coef
        self._max_grad_norm = max_grad_norm
        self._normalize_adv = normalize_advantages
        self._target_kl = target_kl
        self._reward_scale = reward_scale
        self._num_epochs = config.num_epochs
        self._local_minibatch_size = config.local_minibatch_size
        self._uneven = uneven_batches or getattr(config,
                                                 "preempt_stragglers", False)
        # Minibatches per epoch, the same on every rank whatever it holds.
        self._minibatches_per_epoch = math.ceil(
            config.unroll_length * config.local_num_envs /
            config.local_minibatch_size)

    #: Called by `TrainerConfig.per_rank` before an N-process launch.
    check_config = staticmethod(check_minibatch_size)

    # ---- acting -------------------------------------------------------
    acting_modules = ("actor", )  # what rollout_step reads

    def predict_step(self, observation) -> AlgStep:
        mode = self.actor(observation).mode()
        if self._offset is not None:  # a binding overrides a calibration
            mode = shift(mode, *self._offset)
        elif hasattr(self, CALIBRATED):
            mode = getattr(self, CALIBRATED)(mode)
        return AlgStep(output=mode)

    def set_calibrated_offset(self, offsets: Dict[int, float]) -> None:
        """Acts deterministically with ``offsets`` (``{dimension: offset}``)
        from now on, unless ``deterministic_offset`` is bound (that wins);
        kept in checkpoints (`alf.trainers.calibration`)."""
        getattr(self, CALIBRATED).set(offsets)

    def get_calibrated_offset(self) -> Dict[int, float]:
        """The offsets `set_calibrated_offset` last set (every dimension;
        zeros before the first)."""
        return getattr(self, CALIBRATED).get()

    def rollout_step(self, observation) -> AlgStep:
        dist = self.actor(observation)
        action = dist.sample()
        log_prob = dist.log_prob(action)
        if self._explore_fraction < 1.0:
            explore = torch.rand(log_prob.shape, device=log_prob.device
                                 ) < self._explore_fraction
            log_prob = torch.where(explore, log_prob,
                                   torch.full_like(log_prob, math.inf))
            explore = explore.view(explore.shape + (1, ) * (
                action.dim() - explore.dim()))
            action = torch.where(explore, action, dist.mode())
        return AlgStep(output=action, info=log_prob)

    # ---- training -----------------------------------------------------
    def train_on_unroll(self, exp: Experience, progress: float):
        self.set_learning_rate(scheduled(self._lr, self._lr_schedule,
                                         progress))
        self._clip_now = scheduled(self._clip, self._clip_schedule, progress)
        self.scale_beta_concentrations(progress)
        stats = self.train_on_batch(self._prepare_batch(exp))
        self.bound_log_std(progress)
        self.schedule_explore_fraction(progress)
        if self._explore_schedule is not None:
            stats["explore_fraction"] = self.get_buffer(
                "explore_fraction_now").clone()
        return stats

    def schedule_explore_fraction(self, progress: float) -> None:
        """Sets the explore fraction of the next unroll for ``progress``
        (``explore_fraction_schedule``; every rank alike)."""
        if self._explore_schedule is None:
            return
        start, end, final = self._explore_schedule
        t = _ramp(progress, start, end)
        self.get_buffer("explore_fraction_now").fill_(
            self._explore_start + (final - self._explore_start) * t)
        self._read_explore_fraction()

    def _read_explore_fraction(self) -> None:
        # A plain float, so that acting reads no tensor and the actor
        # processes receive it with the other scalars (`acting_state`).
        self._explore_fraction = float(
            self.get_buffer("explore_fraction_now"))

    def bound_log_std(self, progress: float) -> None:
        """Clamps the policy's log std to ``log_std_bound`` at ``progress``
        (every rank alike, so DDP's replicas stay equal)."""
        if self._log_std_bound is None:
            return
        start, end = self._log_std_bound
        bound = start + (end - start) * min(max(progress, 0.0), 1.0)
        with torch.no_grad():
            for p in self._log_stds:
                p.clamp_(max=bound)

    def scale_beta_concentrations(self, progress: float) -> None:
        """Sets the Beta policy's concentration scale for ``progress``
        (``beta_concentration_schedule``; every rank alike)."""
        if self._beta_schedule is None:
            return
        start, end, final = self._beta_schedule
        t = _ramp(progress, start, end)
        for actor, first in zip(self._betas, self._beta_start_scale):
            last = torch.as_tensor(final, dtype=first.dtype,
                                   device=first.device)
            actor.concentration_scale.copy_(first + (last - first) * t)

    def train_on_batch(self, batch: PPOBatch) -> Dict[str, torch.Tensor]:
        """The epochs of minibatch updates on this rank's ``batch``."""
        n = batch.advantage.shape[0]
        if self._uneven:
            indices = uneven_minibatch_indices(
                n, self._minibatches_per_epoch, self._num_epochs)
            weights, counts = rank_weights(indices)
        else:
            indices = minibatch_indices(n, self._local_minibatch_size,
                                        self._num_epochs)
            weights = counts = [None] * len(indices)
        advantages = self._minibatch_advantages(batch.advantage, indices)

        stats = []
        for idx, adv, w, count in zip(indices, advantages, weights, counts):
            mb = PPOBatch(*[x[idx] for x in batch])._replace(advantage=adv)
            loss_info = self.minibatch_loss(mb)
            loss = loss_info.loss.detach()
            if w is not None:  # this rank's share of the global mean
                loss_info = loss_info._replace(loss=loss_info.loss * w)
            grad_norm = self.update_with_gradient(loss_info,
                                                  self._max_grad_norm)
            extra = loss_info.extra
            stats.append(torch.stack([
                loss, extra["policy_loss"],
                extra["value_loss"], extra["entropy"], extra["approx_kl"],
                extra["clip_fraction"], grad_norm]))
            if self._kl_exceeded(extra["approx_kl"], len(idx), count):
                break
        return self._summarize(torch.stack(stats).mean(0), batch)

    def _minibatch_advantages(self, advantage: torch.Tensor, indices):
        """Each minibatch's advantages, standardised (if configured) with the
        mean and std of that minibatch over all ranks.

        The statistics of every minibatch of the iteration travel in one
        all-reduce: a collective per minibatch cost more than the
        minibatch's own compute on CPU.
        """
        parts = [advantage[idx] for idx in indices]
        if not self._normalize_adv:
            return parts
        return distributed.standardize_parts(parts)

    @torch.no_grad()
    def _prepare_batch(self, exp: Experience) -> PPOBatch:
        """Flattens one unroll [T, B] into N transitions with advantages
        (only the real steps of an unroll whose environments ended at
        different steps, `OnPolicyAlgorithm.unroll_lengths`)."""
        t, b = exp.reward.shape
        both = torch.cat([exp.observation, exp.next_observation])
        values, next_values = self.value_net(both.flatten(0, 1)).view(
            2, t, b).unbind(0)
        truncated, keep = exp.truncated, None
        if self.unroll_lengths is not None:
            # An environment's last real step ends its unroll as step T - 1
            # ends a whole one: bootstrapped from V(s'), nothing after it
            # (the padding) flows back.
            step = torch.arange(t, device=truncated.device)[:, None]
            lengths = self.unroll_lengths.to(truncated.device)
            truncated = truncated | (step == lengths - 1)
            keep = (step < lengths).flatten()
        adv = generalized_advantage_estimation(
            exp.reward * self._reward_scale, values, next_values,
            exp.terminated, truncated, self._gamma, self._lambda)
        flat = ((lambda x: x.flatten(0, 1)) if keep is None else
                (lambda x: x.flatten(0, 1)[keep]))
        log_prob = start_log_prob = flat(exp.rollout_info)
        if self._stale(exp):
            start_log_prob = self.actor(flat(exp.observation)).log_prob(
                flat(exp.action))
        return PPOBatch(flat(exp.observation), flat(exp.action), log_prob,
                        flat(values), flat(adv), flat(adv + values),
                        start_log_prob)

    def _stale(self, exp: Experience) -> bool:
        """Whether a policy older than this one acted in ``exp``."""
        versions = exp.policy_version
        return (isinstance(versions, torch.Tensor) and
                bool((versions < self.policy_version).any()))

    @distributed.data_distributed
    def minibatch_loss(self, mb: PPOBatch) -> LossInfo:
        """The PPO loss of one minibatch (train_step, then calc_loss).

        The only parameter-dependent computation of an update: under
        distributed training it runs through DDP, whose backward averages the
        gradients of all ranks' minibatches.
        """
        return self.calc_loss(mb, self.train_step(mb).info)

    def train_step(self, mb: PPOBatch) -> AlgStep:
        dist = self.actor(mb.observation)
        return AlgStep(info=PPOTrainInfo(dist.log_prob(mb.action),
                                         dist.entropy(),
                                         self.value_net(mb.observation)))

    def calc_loss(self, mb: PPOBatch, info: PPOTrainInfo) -> LossInfo:
        adv = mb.advantage  # standardised per minibatch if configured
        # Steps that acted with the mode (explore_fraction < 1) store a
        # log-density of +inf: no ratio, no share of the policy terms.
        sampled = torch.isfinite(mb.log_prob)
        mean = lambda x: torch.where(sampled, x, 0.0).sum() / (  # noqa
            sampled.sum().clamp(min=1))
        log_ratio = torch.where(sampled, info.log_prob - mb.log_prob, 0.0)
        ratio = log_ratio.exp()
        clip = self._clip_now
        policy_loss = -mean(torch.min(ratio * adv,
                                      ratio.clamp(1 - clip, 1 + clip) * adv))

        value_err = (info.value - mb.returns).square()
        if self._value_clip is not None:
            clipped = mb.value + (info.value - mb.value).clamp(
                -self._value_clip, self._value_clip)
            value_err = torch.max(value_err, (clipped - mb.returns).square())
        value_loss = 0.5 * value_err.mean()
        entropy = info.entropy.mean()
        loss = (policy_loss + self._vf_coef * value_loss -
                self._ent_coef * entropy)
        with torch.no_grad():
            # How far this iteration's updates moved the policy (what
            # target_kl bounds), not how far it is from the behaviour policy.
            kl_log_ratio = torch.where(
                sampled, info.log_prob - mb.start_log_prob, 0.0)
            approx_kl = mean(kl_log_ratio.exp() - 1 - kl_log_ratio)
            clip_fraction = mean(((ratio - 1).abs() > clip).float())
        return LossInfo(loss, dict(policy_loss=policy_loss.detach(),
                                   value_loss=value_loss.detach(),
                                   entropy=entropy.detach(),
                                   approx_kl=approx_kl,
                                   clip_fraction=clip_fraction))

    def _kl_exceeded(self, approx_kl: torch.Tensor, rows: int,
                     global_rows: Optional[float]) -> bool:
        # A control-flow decision: every rank must take the same one. With
        # uneven batches, the mean over all ranks' samples.
        if self._target_kl is None:
            return False
        if global_rows is None:
            kl = distributed.all_reduce_mean(approx_kl.clone())
        else:
            kl = distributed.all_reduce_sum(approx_kl * rows) / global_rows
        return bool(kl > 1.5 * self._target_kl)

    def _summarize(self, means: torch.Tensor, batch: PPOBatch):
        if not torch.isfinite(means[0]):
            raise TrainingError("non-finite PPO loss")
        names = ("loss", "policy_loss", "value_loss", "entropy", "approx_kl",
                 "clip_fraction", "grad_norm")
        out = dict(zip(names, means.unbind(0)))
        returns, values = batch.returns, batch.value
        out["explained_variance"] = 1 - (returns - values).var() / (
            returns.var() + 1e-8)
        out["learning_rate"] = torch.tensor(self._param_groups()[0]["lr"])
        out["clip_ratio"] = torch.tensor(self._clip_now)
        return out
