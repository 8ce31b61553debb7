"""`Adam`: torch's fused Adam with a lean `step`.

RL updates are small (about a millisecond on one CPU thread), and
`torch.optim.Adam.step` (fused) spends half of its time in per-call Python
(profiler ranges, hooks, state checks, grouping by device). `Adam.step`
calls the same fused kernel on lists built once, so the result is
bit-identical to ``torch.optim.Adam(fused=True)`` (tested) at about half
the cost (docs/benchmarks.md).
"""
from typing import Dict, List, Protocol, Tuple, cast

import torch
from torch.optim import optimizer as _optimizer

# Group options under which the lean path is torch's fused Adam exactly.
_LEAN_DEFAULTS = dict(amsgrad=False, maximize=False, capturable=False,
                      differentiable=False, decoupled_weight_decay=False)


class _Hooked(Protocol):
    """A function with the attribute torch's optimizer checks."""
    hooked: bool


class Adam(torch.optim.Adam):
    """``torch.optim.Adam(..., fused=True)`` whose `step` skips torch's
    per-call machinery when nothing needs it.

    The lean path needs: no closure, no step hooks, every parameter of a
    group with a gradient and an initialised state, one device and dtype
    per group, and none of amsgrad/maximize/capturable/differentiable.
    Otherwise it falls back to torch's `step`, so behaviour (hooks, unused
    parameters, the first step's state initialisation) is torch's.

    Args:
        params: parameters or parameter groups.
        lr, betas, eps, weight_decay: as in `torch.optim.Adam`.
    """

    def __init__(self, params, lr: float = 1e-3,
                 betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0):
        super().__init__(params, lr=lr, betas=betas, eps=eps,
                         weight_decay=weight_decay, fused=True)
        self._lean: Dict[int, tuple] = {}

    def _lean_lists(self, index: int, group: dict):
        cached = self._lean.get(index)
        if cached is not None:
            return cached
        params: List[torch.Tensor] = group["params"]
        if (any(group.get(k, v) != v for k, v in _LEAN_DEFAULTS.items())
                or len({(p.device, p.dtype) for p in params}) != 1
                or any(p not in self.state or "exp_avg" not in self.state[p]
                       for p in params)):
            return None
        states = [self.state[p] for p in params]
        cached = (params, [s["exp_avg"] for s in states],
                  [s["exp_avg_sq"] for s in states],
                  [s["step"] for s in states])
        self._lean[index] = cached
        return cached

    @torch.no_grad()
    def step(self, closure=None):
        """One Adam step (see the class docstring for when it is lean)."""
        if (closure is not None or self._optimizer_step_pre_hooks
                or self._optimizer_step_post_hooks
                or _optimizer._global_optimizer_pre_hooks
                or _optimizer._global_optimizer_post_hooks):
            return super().step(closure)
        calls = []
        for index, group in enumerate(self.param_groups):
            lists = self._lean_lists(index, group)
            if lists is None:
                return super().step()
            params, exp_avgs, exp_avg_sqs, steps = lists
            grads = [p.grad for p in params]
            if any(g is None for g in grads):
                # Torch's step skips parameters without a gradient (an
                # unused head) and leaves their step count alone.
                return super().step()
            calls.append((group, params, grads, exp_avgs, exp_avg_sqs, steps))
        for group, params, grads, exp_avgs, exp_avg_sqs, steps in calls:
            beta1, beta2 = group["betas"]
            torch._foreach_add_(steps, 1)
            torch._fused_adam_(
                params, grads, exp_avgs, exp_avg_sqs, [], steps,
                amsgrad=False, lr=group["lr"], beta1=beta1, beta2=beta2,
                weight_decay=group["weight_decay"], eps=group["eps"],
                maximize=False, grad_scale=None, found_inf=None)
        return None

    # torch wraps every optimizer class's step in its profiler-and-hooks
    # wrapper unless it is marked as already wrapped. The lean step hands
    # any hooks to torch's (wrapped) step instead.
    cast(_Hooked, step).hooked = True

    def load_state_dict(self, state_dict) -> None:
        # The cached lists point at the replaced state tensors.
        self._lean.clear()
        super().load_state_dict(state_dict)

    def add_param_group(self, param_group) -> None:
        if hasattr(self, "_lean"):
            self._lean.clear()
        super().add_param_group(param_group)
