"""`Algorithm`: an `nn.Module` that owns its networks, optimizers and loss."""
import math
from numbers import Real
from typing import Dict, List, Optional

import torch
from torch import nn

from alf.data_structures import AlgStep, LossInfo
from alf.utils.errors import CheckpointError, ConfigError


def check_learning_rate(owner: str, value) -> None:
    """Refuses a learning rate that is not a positive, finite number.

    Checked when the algorithm is built: a string or a negative value would
    otherwise surface as a traceback from inside the optimizer, and 0 would
    train nothing without a word.

    Args:
        owner: the configurable's name, for the message (``PPOAlgorithm``).
        value: the learning rate given.

    Raises:
        ConfigError: naming ``owner.learning_rate``, the value and what is
            valid.
    """
    if (isinstance(value, bool) or not isinstance(value, Real)
            or not math.isfinite(value) or value <= 0):
        raise ConfigError(f"{owner}.learning_rate={value!r}; it must be a "
                          "positive float, e.g. 3e-4")


def check_number(name: str, value, low: float, high: float = math.inf,
                 low_open: bool = False) -> None:
    """Refuses a setting that is not a finite number in ``[low, high]``
    (``(low, high]`` with ``low_open``).

    Checked when the algorithm is built: out of range, these settings
    train silently in a way nobody asked for (a discount above 1 diverges,
    an epsilon below 0 never explores) or fail mid-training.

    Args:
        name: the gin name, for the message (``DQNAlgorithm.gamma``).
        value: the value given.
        low, high: the valid range (an infinite one: no bound on that
            side).
        low_open: whether ``low`` itself is refused.

    Raises:
        ConfigError: naming ``name``, the value and the valid range.
    """
    if not isinstance(value, bool) and isinstance(value, Real):
        x = float(value)  # a Real converts; mypy cannot order Reals
        if math.isfinite(x) and (low < x if low_open else low <= x) \
                and x <= high:
            return
    if low == -math.inf and high == math.inf:
        valid = "a finite number"
    elif high == math.inf:
        valid = f"a number {'>' if low_open else '>='} {low:g}"
    else:
        valid = (f"a number in {'(' if low_open else '['}{low:g}, "
                 f"{high:g}]")
    raise ConfigError(f"{name}={value!r}; valid: {valid}")


def check_count(name: str, value, least: int) -> None:
    """Refuses a count (epochs, an interval, a batch size) that is not an
    integer of at least ``least`` (a bool neither: ``True`` is a typo).

    Raises:
        ConfigError: naming ``name``, the value and what is valid.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ConfigError(f"{name}={value!r}; valid: an integer >= {least}")


def check_max_grad_norm(owner: str, value) -> None:
    """Refuses a gradient-norm clip that is neither None nor a positive,
    finite number.

    `clip_grad_norm` scales the gradients by ``max_norm / norm``: a negative
    value would flip every gradient (training towards a higher loss) and 0
    would zero them (training nothing), both without a word.

    Args:
        owner: the configurable's name, for the message (``DQNAlgorithm``).
        value: the ``max_grad_norm`` given (None: no clipping).

    Raises:
        ConfigError: naming ``owner.max_grad_norm``, the value and what is
            valid.
    """
    if value is None:
        return
    if (isinstance(value, bool) or not isinstance(value, Real)
            or not math.isfinite(value) or value <= 0):
        raise ConfigError(f"{owner}.max_grad_norm={value!r}; it must be a "
                          "positive number, or None (no clipping)")


class Algorithm(nn.Module):
    """Base class of everything that acts or learns.

    Subclasses implement the steps they need:

    * `predict_step`: act for evaluation (usually deterministic);
    * `rollout_step`: act while collecting experience (usually sampling);
    * `train_step` + `calc_loss`: recompute what the loss needs on a batch of
      stored experience, then the loss;
    * `update_with_gradient`: one optimizer step on a `LossInfo`.

    An algorithm's replay buffer, if any, is a submodule; its optimizers are
    registered with `add_optimizer` so that checkpoints include them.
    """

    def __init__(self):
        super().__init__()
        self._optimizers: List[torch.optim.Optimizer] = []

    @property
    def device(self) -> torch.device:
        """Where this algorithm's parameters (or, lacking any, buffers)
        live; follows `.to`."""
        device = self.__dict__.get("_device")
        if device is None:
            tensor: Optional[torch.Tensor] = next(self.parameters(), None)
            if tensor is None:
                tensor = next(self.buffers(), torch.empty(0))
            device = self.__dict__["_device"] = tensor.device
        return device

    def _apply(self, fn, *args, **kwargs):
        self.__dict__.pop("_device", None)  # `.to()` may move the module
        return super()._apply(fn, *args, **kwargs)

    def add_optimizer(self, optimizer: torch.optim.Optimizer
                      ) -> torch.optim.Optimizer:
        """Registers ``optimizer`` for `update_with_gradient` and checkpoints."""
        self._optimizers.append(optimizer)
        return optimizer

    def predict_step(self, observation) -> AlgStep:
        """Acts for evaluation; ``output`` is the action batch."""
        raise NotImplementedError

    def rollout_step(self, observation) -> AlgStep:
        """Acts while collecting; ``info`` is stored with the transition."""
        raise NotImplementedError

    def train_step(self, batch) -> AlgStep:
        """Recomputes, with gradients, what `calc_loss` needs for ``batch``."""
        raise NotImplementedError

    def calc_loss(self, batch, train_info) -> LossInfo:
        """Computes the loss of ``batch`` from `train_step`'s ``info``."""
        raise NotImplementedError

    def update_with_gradient(self, loss_info: LossInfo,
                             max_grad_norm: Optional[float] = None
                             ) -> torch.Tensor:
        """Backpropagates ``loss_info.loss`` and steps every optimizer.

        Returns:
            The gradient norm before clipping (0 without ``max_grad_norm``).

        Raises:
            ConfigError: if no optimizer is registered (a run that would
                train nothing), or for a ``max_grad_norm`` that
                `check_max_grad_norm` refuses (before any parameter
                changes; an algorithm should refuse it when it is built).
        """
        if not self._optimizers:
            raise ConfigError(
                f"{type(self).__name__}.update_with_gradient: no optimizer "
                "is registered, so nothing would train; register one in "
                "__init__ with self.add_optimizer(torch.optim.Adam("
                "self.parameters(), lr=...))")
        # A backstop for algorithms that do not check at build time.
        check_max_grad_norm(type(self).__name__, max_grad_norm)
        # What zero_grad(set_to_none=True) does, without its per-call
        # profiler and dynamo wrappers (a few percent of a ~1 ms update;
        # docs/benchmarks.md).
        for group in self._param_groups():
            for p in group["params"]:
                p.grad = None
        try:
            loss_info.loss.backward()
        except RuntimeError as e:
            from alf.utils.distributed.checks import backward_misuse
            said = backward_misuse(e, type(self).__name__)
            if said is None:
                raise
            raise said from e
        norm = torch.zeros((), device=loss_info.loss.device)
        if max_grad_norm is not None:
            norm = clip_grad_norm(self._param_groups(), max_grad_norm)
        for opt in self._optimizers:
            opt.step()
        return norm

    def _param_groups(self):
        # A list per call is cheap; caching it would go stale when a
        # subclass adds an optimizer later.
        return [g for opt in self._optimizers for g in opt.param_groups]

    def set_learning_rate(self, lr: float) -> None:
        """Sets the learning rate of every optimizer's parameter groups."""
        for g in self._param_groups():
            g["lr"] = lr

    def optimizer_state_dict(self) -> List[Dict]:
        """The state of every registered optimizer, in registration order."""
        return [opt.state_dict() for opt in self._optimizers]

    def load_optimizer_state_dict(self, states: List[Dict]) -> None:
        """Restores what `optimizer_state_dict` returned."""
        if len(states) != len(self._optimizers):
            raise CheckpointError(
                f"checkpoint has {len(states)} optimizer states; "
                f"this algorithm has {len(self._optimizers)}")
        for opt, state in zip(self._optimizers, states):
            opt.load_state_dict(state)


def clip_grad_norm(param_groups, max_norm: float) -> torch.Tensor:
    """Scales all gradients so that their global L2 norm is <= ``max_norm``.

    The same arithmetic as `torch.nn.utils.clip_grad_norm_` in three foreach
    kernels, without its per-call checks (a noticeable cost at one update
    per millisecond).

    Args:
        param_groups: the optimizers' parameter groups.
        max_norm: a positive number (`check_max_grad_norm`).

    Returns:
        The global norm before clipping.
    """
    grads = [p.grad for g in param_groups for p in g["params"]
             if p.grad is not None]
    if not grads:
        return torch.zeros(())
    norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    torch._foreach_mul_(grads, (max_norm / (norm + 1e-6)).clamp(max=1.0))
    return norm
