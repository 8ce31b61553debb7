"""Actor networks producing action distributions (categorical, Gaussian or
Beta)."""
import math
from typing import Optional, Sequence, Tuple, Union

import gin
import gymnasium as gym
import torch
from torch import nn

from alf.networks.distributions import (Beta, Categorical, DiagGaussian,
                                        TanhGaussian)
from alf.networks.encoding import (EncodingNetwork, check_box_widths,
                                   flat_size, observation_shape,
                                   orthogonal_init)
from alf.utils.errors import ConfigError

# Where a state-dependent log std is clamped: std from 0.007 to 7.4.
LOG_STD_RANGE = (-5.0, 2.0)

#: A number for every action dimension, or one per dimension.
PerDimension = Union[float, Sequence[float]]


def per_dimension(value: PerDimension, dims: int, name: str) -> torch.Tensor:
    """``value`` as a tensor: a scalar for a number, [dims] for a sequence.

    Raises:
        ConfigError: naming ``name``, for a sequence whose length is not
            ``dims`` or an entry that is not a number.
    """
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return torch.tensor(float(value))
    if (not isinstance(value, (tuple, list)) or len(value) != dims
            or not all(isinstance(v, (int, float))
                       and not isinstance(v, bool) for v in value)):
        raise ConfigError(f"{name}={value!r}; valid: a number, or one per "
                          f"action dimension ({dims})")
    return torch.tensor([float(v) for v in value])


@gin.configurable
class ActorDistributionNetwork(nn.Module):
    """An MLP whose output parameterises a distribution over actions.

    Discrete action spaces get a categorical distribution over logits; Box
    action spaces get a diagonal Gaussian whose log standard deviation is a
    state-independent parameter (or, with ``state_dependent_std``, that
    parameter plus a second head's output, as RLlib's and SAC's actors do),
    squashed onto the box by tanh with ``squash`` (`TanhGaussian`; the
    environment then clips nothing, and the deterministic action is one the
    policy takes). With ``beta``, Box actions get a `Beta` per dimension on
    the box instead, both concentrations from the head (``1 + softplus``,
    so each is unimodal), the deterministic action its mean. A Gaussian
    that the environment clips has for mean the head's output plus the
    Box's centre, so that it starts inside the Box: the middle of [5, 6],
    one initial std above 5 in [5, inf) (0 where 0 is inside; a bound
    beyond 1e6 counts as none). Its std is not scaled to the Box's width
    (``init_log_std`` sets it).

    Args:
        observation_space: a Box, MultiBinary or MultiDiscrete space
            (see `observation_shape`).
        action_space: a Discrete or Box space.
        hidden_sizes: widths of the hidden layers.
        activation: activation name (see `EncodingNetwork`).
        init_log_std: initial log standard deviation (Box actions): one
            for every dimension, or a sequence with one per dimension (a
            steering that needs less noise than a throttle).
        conv_layers: convolutions for image observations (see
            `EncodingNetwork`).
        squash: Box actions: a `TanhGaussian` onto the bounds instead of
            a Gaussian that the environment clips (needs finite bounds).
        state_dependent_std: Box actions: the log std is ``log_std`` plus a
            linear head on the features (initialised near zero, so every
            state starts at ``init_log_std``), clamped to
            `LOG_STD_RANGE`: the policy can be sure where it must be (next
            to a car) and explore elsewhere, instead of one noise level for
            every state.
        beta: Box actions: a `Beta` on the bounds (needs finite bounds;
            ``init_log_std`` and ``state_dependent_std`` do not apply: its
            spread is always per state). The head starts near zero, so every
            state starts at ``Beta(1.69, 1.69)``: std 0.24 of the width.
        beta_concentration_scale: ``beta`` only: both concentrations are
            multiplied by this, which keeps each Beta's mean (the
            deterministic action) and divides its variance by about the
            scale: less exploration noise, trained with (PPO's ratio and
            stored log-probabilities use the scaled Beta). A number for
            every dimension or a sequence with one per dimension. Kept in
            the buffer ``concentration_scale``, so a schedule's value
            (`PPOAlgorithm`'s ``beta_concentration_schedule``) reaches the
            actors and the checkpoints.
        gsde_interval: Box actions, Gaussian (squashed or not): generalised
            state-dependent exploration (gSDE; Raffin et al., 2022, as
            Stable-Baselines3's ``use_sde``). The sampling policy adds
            ``features @ theta`` to the mean, the encoder's last features
            (without gradient) times a matrix ``theta`` [F, A] of normal
            draws scaled by ``exp(exploration_log_std)``, drawn for each
            environment every ``gsde_interval`` samples and kept between:
            the noise is a smooth function of the state for that many steps
            rather than a new draw every step, so the actions do not jitter
            and the deterministic policy (``theta = 0``) is one of the
            policies that explored. For one state the action is Gaussian
            with variance ``features**2 @ exp(2 exploration_log_std)``,
            which PPO's ratio and the stored log-probabilities use.
            ``exploration_log_std`` starts at ``init_log_std - log(F) / 2``,
            so the initial std is ``exp(init_log_std)`` times the features'
            root mean square. Takes no ``state_dependent_std`` (its std is
            always per state), and no ``TrainerConfig.inference_workers``
            (their batches' rows are not one environment's from step to
            step).
    """

    # Buffers, registered only with ``squash`` or ``beta`` (the scale:
    # ``beta``), and for a Gaussian in a Box whose centre is not 0.
    action_low: torch.Tensor
    action_high: torch.Tensor
    concentration_scale: torch.Tensor
    action_center: torch.Tensor  # a Gaussian's, in a Box not centred on 0

    def __init__(self, observation_space, action_space,
                 hidden_sizes: Sequence[int] = (64, 64),
                 activation: str = "tanh", init_log_std: PerDimension = 0.0,
                 conv_layers: Sequence = (), squash: bool = False,
                 state_dependent_std: bool = False, beta: bool = False,
                 beta_concentration_scale: PerDimension = 1.0,
                 gsde_interval: Optional[int] = None):
        super().__init__()
        if beta and (squash or state_dependent_std):
            raise ConfigError(
                "ActorDistributionNetwork.beta=True is a distribution of its "
                "own, with a spread per state; it takes neither squash=True "
                "nor state_dependent_std=True")
        if gsde_interval is not None and (
                isinstance(gsde_interval, bool) or
                not isinstance(gsde_interval, int) or gsde_interval < 1):
            raise ConfigError(
                f"ActorDistributionNetwork.gsde_interval={gsde_interval!r}; "
                "valid: None or a number of steps >= 1")
        if gsde_interval is not None and (beta or state_dependent_std):
            raise ConfigError(
                "ActorDistributionNetwork.gsde_interval explores a Gaussian "
                "with a std per state of its own; it takes neither beta=True "
                "nor state_dependent_std=True")
        self.encoder = EncodingNetwork(observation_shape(
            type(self).__name__, observation_space), hidden_sizes,
                                       activation, conv_layers,
                                       owner=type(self).__name__)
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        self.squash = squash and not self.discrete
        self.beta = beta and not self.discrete
        head_size = None
        if self.discrete:
            out = int(action_space.n)
        elif isinstance(action_space, gym.spaces.Box):
            out = flat_size(action_space)
            log_std0 = per_dimension(init_log_std, out,
                                     "ActorDistributionNetwork.init_log_std")
            scale = per_dimension(
                beta_concentration_scale, out,
                "ActorDistributionNetwork.beta_concentration_scale")
            if not bool((scale > 0).all()):
                raise ConfigError(
                    f"ActorDistributionNetwork.beta_concentration_scale="
                    f"{beta_concentration_scale!r}; valid: numbers > 0")
            if self.beta:
                head_size = 2 * out  # alpha's and beta's
            elif gsde_interval is not None:
                features = self.encoder.output_size
                self.exploration_log_std = nn.Parameter(_dense(
                    (log_std0 - 0.5 * math.log(features)).expand(
                        features, out)))
            else:
                self.log_std = nn.Parameter(_dense(log_std0.expand(out)))
            if squash or beta:
                low = torch.as_tensor(action_space.low, dtype=torch.float32)
                high = torch.as_tensor(action_space.high, dtype=torch.float32)
                if not (torch.isfinite(low).all() and
                        torch.isfinite(high).all()):
                    which = "beta" if beta else "squash"
                    raise ConfigError(
                        f"ActorDistributionNetwork.{which}=True needs finite "
                        f"action bounds; got {action_space}")
                check_box_widths(
                    f"ActorDistributionNetwork.{'beta' if beta else 'squash'}"
                    "=True", action_space)
                # Constants of the space: in the state dict only when used.
                self.register_buffer("action_low", low.flatten())
                self.register_buffer("action_high", high.flatten())
            if self.beta:
                # A number stays a scalar: checkpoints keep their shape.
                self.register_buffer("concentration_scale", scale)
            center = _box_center(action_space, log_std0.exp())
            if not (squash or beta) and bool(center.any()):
                # The Gaussian's mean starts at 0: in a Box such as [5, 6]
                # every sample was clipped to one bound, and its reward said
                # nothing of the mean. Only where a centre is not 0, so that
                # symmetric boxes keep their checkpoints' keys.
                self.register_buffer("action_center", center)
        else:
            raise ValueError(f"unsupported action space {action_space}; "
                             "valid: Discrete or Box")
        self.head = orthogonal_init(
            nn.Linear(self.encoder.output_size, head_size or out), 0.01)
        self.gsde_interval = None if self.discrete else gsde_interval
        # Per-environment standard normal draws [B, F, A] and the samples
        # left before new ones: plain attributes, so neither checkpoints
        # nor DDP's buffer broadcast (which would give every rank rank 0's
        # noise) see them.
        self._gsde_draws: Optional[torch.Tensor] = None
        self._gsde_left = 0
        self.std_head = None
        if state_dependent_std and not self.discrete:
            self.std_head = orthogonal_init(
                nn.Linear(self.encoder.output_size, out), 0.01)

    @property
    def _centered(self) -> bool:
        return "action_center" in self._buffers

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        key = prefix + "action_center"
        if self._centered and key not in state_dict:
            # Saved before Gaussians were centred in their Box: its head
            # learned the mean itself, which it keeps.
            state_dict[key] = torch.zeros_like(self.action_center)
        key = prefix + "concentration_scale"
        if self.beta and key not in state_dict:
            # A checkpoint from before the scale was kept: it trained with
            # the scale this network was configured with.
            state_dict[key] = self.concentration_scale.clone()
        if self.beta:
            self._adopt_scale_form(state_dict, key)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _adopt_scale_form(self, state_dict, key: str) -> None:
        """A run resumed under a schedule of the other form (one scale for
        every dimension against one per dimension) keeps the checkpoint's
        scales, one per dimension where either form has them; the
        schedule moves them on from there. Other mismatches are left to
        ``load_state_dict``'s error."""
        saved, own = state_dict.get(key), self.concentration_scale
        dims = self.action_low.numel()
        if (not isinstance(saved, torch.Tensor) or saved.shape == own.shape
                or saved.numel() not in (1, dims)
                or own.numel() not in (1, dims)):
            return
        if saved.dim() == 0:
            state_dict[key] = saved.expand(dims).clone()
        else:
            self.concentration_scale = own.expand(dims).clone()

    def noise_state(self) -> Tuple[Optional[torch.Tensor], int]:
        """What sampling carries from one sample to the next: gSDE's draws
        and the samples left before new ones (nothing to carry without
        gSDE). `set_noise_state` puts it back, so that several episodes
        sampled one at a time each keep their own (`evaluator`)."""
        return self._gsde_draws, self._gsde_left

    def set_noise_state(self, state: Optional[Tuple[Optional[torch.Tensor],
                                                     int]] = None) -> None:
        """Restores a `noise_state`; None starts afresh: the next sample
        draws new noise, as the first sample of a new network does."""
        self._gsde_draws, self._gsde_left = state or (None, 0)

    def forward(self, observation: torch.Tensor):
        """Returns the `Categorical`, `DiagGaussian`, `TanhGaussian` or
        `Beta` for a batch."""
        return self.distribution(self.encoder(observation))

    def distribution(self, features: torch.Tensor):
        """The distribution given the encoder's ``features`` [B, F]."""
        out = self.head(features)
        if self.discrete:
            return Categorical(out)
        if self.beta:
            alpha, beta = (1 + nn.functional.softplus(out)).chunk(2, -1)
            return Beta(alpha * self.concentration_scale,
                        beta * self.concentration_scale, self.action_low,
                        self.action_high)
        if self._centered:
            out = out + self.action_center
        if self.gsde_interval is not None:
            return self._gsde_distribution(out, features.detach())
        log_std = self.log_std
        if self.std_head is not None:
            log_std = (log_std + self.std_head(features)).clamp(
                *LOG_STD_RANGE)
        if self.squash:
            return TanhGaussian(out, log_std, self.action_low,
                                self.action_high)
        return DiagGaussian(out, log_std)

    def _gsde_distribution(self, mean: torch.Tensor, phi: torch.Tensor):
        scale = self.exploration_log_std.exp()
        log_std = 0.5 * ((phi * phi) @ (scale * scale)).clamp_min(
            1e-12).log()

        def noise() -> torch.Tensor:
            return torch.einsum("bf,bfa->ba", phi,
                                self._draws(phi, mean.shape[-1]) * scale)

        if self.squash:
            return TanhGaussian(mean, log_std, self.action_low,
                                self.action_high, noise=noise)
        return DiagGaussian(mean, log_std, noise=noise)

    def _draws(self, phi: torch.Tensor, actions: int) -> torch.Tensor:
        """This sample's draws, new every ``gsde_interval`` samples (or
        when the batch of environments changes)."""
        shape = (phi.shape[0], phi.shape[1], actions)
        draws = self._gsde_draws
        if (draws is None or self._gsde_left <= 0 or draws.shape != shape
                or draws.device != phi.device):
            draws = torch.randn(shape, device=phi.device, dtype=phi.dtype)
            assert self.gsde_interval is not None  # only gSDE samples here
            self._gsde_draws, self._gsde_left = draws, self.gsde_interval
        self._gsde_left -= 1
        return draws


def _box_center(space: gym.spaces.Box, std: torch.Tensor) -> torch.Tensor:
    """Where a Gaussian that the environment clips starts, per dimension:
    the middle of finite bounds; with one bound only, 0 if it is on the
    open side of it, else one initial ``std`` inside it (a mean beyond the
    bound has every sample clipped onto it, and no reward tells one mean
    from another). A bound beyond `_BOUND_AS_INFINITE` counts as none (a
    mean there would leave the head's output below float32's precision).
    """
    low = torch.as_tensor(space.low, dtype=torch.float64).flatten()
    high = torch.as_tensor(space.high, dtype=torch.float64).flatten()
    std = std.double().expand_as(low)
    has_low = low.abs() <= _BOUND_AS_INFINITE
    has_high = high.abs() <= _BOUND_AS_INFINITE
    zero = torch.zeros_like(low)
    center = torch.where(has_low & has_high, (low + high) / 2, zero)
    center = torch.where(has_low & ~has_high & (low > 0), low + std, center)
    center = torch.where(has_high & ~has_low & (high < 0), high - std, center)
    return center.float()


# A bound this large (e.g. float32's largest, written for "unbounded")
# is not a box's edge to centre on.
_BOUND_AS_INFINITE = 1e6


def _dense(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``t`` with fresh row-major strides. ``clone`` keeps an
    expanded size-1 dimension's stride 0, which DDP's gradient buckets do
    not have: every backward then warned "Grad strides do not match bucket
    view strides" (a 1-dimensional action, e.g. Pendulum)."""
    return torch.empty(t.shape, dtype=t.dtype).copy_(t)
