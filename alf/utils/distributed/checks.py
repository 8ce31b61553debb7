"""Checks that the ranks agree, raising `DistributedError` when they do not.

Two things can silently differ across ranks and mix gradients or weights:
the order in which a module's data-distributed methods are called (checked
at every DDP call by `CallOrderHook`, inside the gradient all-reduce) and
the weights themselves (`check_weights_equal`, a cross-rank checksum).
"""
import re
import zlib
from typing import List, Optional, Tuple

import gin
import torch
import torch.distributed as dist
from torch import nn

from alf.utils.distributed.collectives import all_reduce_max
from alf.utils.distributed.group import get_rank, is_distributed
from alf.utils.distributed.rank_local import synced_state
from alf.utils.errors import AlfError


class DistributedError(AlfError, RuntimeError):
    """Ranks disagree (call order, weights), or an algorithm uses its
    data-distributed methods in a way DDP cannot serve: training cannot go
    on, and a restart from the last checkpoint would fail the same way
    (the algorithm's code is the input), so ``--max_restarts`` does not
    retry it."""


class DecoratorMisuse(DistributedError, TypeError):
    """``data_distributed`` put where it cannot work (a static method,
    ``@data_distributed_when`` without its condition): the code is the
    input, so it is one line, and a restart would fail the same way. A
    TypeError too, as Python's own for a misused decorator."""


def backward_misuse(error: RuntimeError, owner: str
                    ) -> Optional[DistributedError]:
    """One line for ``error`` from ``owner``'s backward where it is DDP's
    "marked as ready twice": a data-distributed method called more than
    once before one backward (its outputs for two batches), or a
    parameter of its module used outside it as well; None for another
    error."""
    text = str(error)
    if "marked as ready twice" not in text:
        return None
    named = re.search(r"Parameter at index \d+ with name (\S+)", text)
    which = f" ({named.group(1)})" if named else ""
    return DistributedError(
        f"{owner}'s backward: DDP reduced a parameter's gradient twice"
        f"{which}: a data-distributed method was called more than once "
        "since the last backward (make one call of it per backward, both "
        "batches in one call), or its module's parameters were also used "
        "outside it (decorate the method that computes the whole loss)")


# How torch wraps an error raised in a future's callback (the call-order
# check runs in the gradient all-reduce's), before the callback's stack.
_IN_CALLBACK = "Got the following error when running the callback: "


def raised_in_callback(error: BaseException) -> Optional[DistributedError]:
    """The `DistributedError` that ``error`` wraps, when a DDP hook's
    callback raised it during backward (torch re-raises it as a
    ``RuntimeError`` that quotes it, with the callback's stack); else None.
    """
    text = str(error)
    quoted = f"{_IN_CALLBACK}{DistributedError.__name__}: "
    start = text.find(quoted)
    if not isinstance(error, RuntimeError) or start < 0:
        return None
    said = text[start + len(quoted):]
    return DistributedError(said.split("\n\nAt:")[0].strip())


# Registered under the package's name, the path users import it from.
@gin.configurable(module="alf.utils.distributed")
def call_order_check(enabled: bool = True) -> bool:
    """Whether DDP calls verify that every rank runs the same method as the
    same call number (read once, at `activate_ddp`).

    Args:
        enabled: gin's ``call_order_check.enabled``.

    Returns:
        ``enabled``.
    """
    return enabled


class CallOrderHook:
    """A DDP communication hook that also checks the call order, for free.

    Each DDP call tags its first gradient bucket with three 8-bit hashes v of
    (method, call number). The tags ride in the same all-reduce as the
    gradients and come back as sum(v) and sum(v^2) over ranks, which are
    exact in float32 for up to 256 ranks; all ranks had the same tags iff
    ``N * sum(v^2) == sum(v)^2`` (Cauchy-Schwarz). A mismatch raises during
    backward, before any optimizer step could apply mixed gradients. Apart
    from the tags, it is DDP's default hook (average by pre-division).

    Args:
        world_size: the number of ranks (the divisor of the average).
    """

    _MODULI = (251, 241, 239)

    def __init__(self, world_size: int):
        self.world_size = world_size
        # (method name, call number) of the next backward
        self.pending: Optional[Tuple[str, int]] = None

    def tag(self, name: str, call: int) -> None:
        """Marks the next backward as call number ``call`` of ``name``."""
        self.pending = (name, call)

    def reduce(self, bucket: dist.GradBucket) -> torch.futures.Future:
        """All-reduces (averages) one gradient bucket, with tags if due."""
        buf = bucket.buffer().div_(self.world_size)
        pending, self.pending = self.pending, None
        if pending is None or bucket.index() != 0:
            fut = dist.all_reduce(buf, async_op=True).get_future()
            return fut.then(lambda f: f.value()[0])
        key = f"{pending[0]}#{pending[1]}".encode()
        tags = torch.tensor([zlib.crc32(key, i) % m
                             for i, m in enumerate(self._MODULI)],
                            dtype=buf.dtype, device=buf.device)
        n = len(tags)
        fut = dist.all_reduce(torch.cat([buf, tags, tags * tags]),
                              async_op=True).get_future()

        def finish(f):
            out = f.value()[0]
            sums = out[-2 * n:].double()
            if not torch.equal(self.world_size * sums[n:], sums[:n]**2):
                raise call_order_error(*pending)
            return out[:-2 * n]

        return fut.then(finish)


def call_order_error(name: str, call: int) -> DistributedError:
    """The error a rank raises when another ran a different DDP call.

    Args:
        name: the method this rank ran, and on which module.
        call: its call number among the DDP calls of the activated module
            (the algorithm) and its submodules.
    """
    return DistributedError(
        f"call order differs across ranks: on rank {get_rank()}, DDP call "
        f"#{call} ran {name}, while another rank ran a different method, "
        "module or call number; every rank must call the data-distributed "
        "methods of the algorithm and its modules in the same order (and "
        "a data_distributed_when condition must agree on every rank)")


def call_order_comm_hook(state: CallOrderHook, bucket: dist.GradBucket
                         ) -> torch.futures.Future[torch.Tensor]:
    """`CallOrderHook.reduce` in the form DDP's ``register_comm_hook``
    takes: a function of (state, bucket)."""
    return state.reduce(bucket)


def _checksums(tensors: List[torch.Tensor]) -> torch.Tensor:
    # Computed where the tensors live; one copy to the CPU at the end.
    rows = [torch.stack([t.double().sum(), t.double().abs().sum()])
            if t.numel() else t.new_zeros(2, dtype=torch.float64)
            for t in tensors]
    return (torch.cat(rows).cpu() if rows else
            torch.zeros(0, dtype=torch.float64))


def _built_without(module: nn.Module, param: nn.Parameter) -> bool:
    """Whether ``param`` trains (requires grad) under a module whose DDP
    module was built without it (DDP takes the parameters that require
    grad when it is built, and never again). A parameter frozen on
    purpose (a target network) or under no DDP module is not."""
    if not param.requires_grad:
        return False
    for sub in module.modules():
        state = sub.__dict__.get("_alf_ddp")
        if (state and state["performer"] is not None
                and any(p is param for p in sub.parameters())):
            return id(param) not in state["performer"].alf_averaged
    return False


def check_weights_equal(module: nn.Module) -> None:
    """Raises `DistributedError` if any synced tensor differs across ranks.

    Compares a checksum (sum and sum of absolute values, in float64) of every
    parameter and every buffer outside replay buffers, which catches drift
    in state that backward does not update (normalisers, target networks).
    A no-op outside distributed training.

    Args:
        module: the module whose `synced_state` to compare.

    Raises:
        DistributedError: naming the first tensor that differs and its
            checksums on the lowest and highest ranks.
    """
    if not is_distributed():
        return
    named = synced_state(module)
    sums = _checksums([t.detach() for _, t in named])
    both = all_reduce_max(torch.cat([sums, -sums]))
    hi, lo = both[:len(sums)], both[len(sums):]
    bad = (hi != -lo).nonzero()
    if len(bad):
        i = int(bad[0]) // 2
        params = list(module.parameters())
        if i < len(params) and _built_without(module, params[i]):
            hint = ("; DDP does not average it: it was frozen "
                    "(requires_grad=False) or not there when its module's "
                    "DDP module was built, at the first data-distributed "
                    "call; unfreeze and add parameters before training")
        elif i < len(params) and not params[i].requires_grad:
            hint = ("; it requires no grad, so a rank changed it outside "
                    "backward (a target network's update?): every rank "
                    "must change it alike")
        elif i < len(params):
            hint = ("; a rank updated it with its own gradients: a method "
                    "computing its loss that is not data-distributed (or "
                    "whose data_distributed_when condition was false)")
        else:
            hint = ("; if it is per-rank state on purpose, mark its module "
                    "with alf.utils.distributed.exclude_from_ddp")
        raise DistributedError(
            f"weights differ across ranks: {named[i][0]} has checksum "
            f"{sums[2 * i].item():.9g} here (rank {get_rank()}); over all "
            f"ranks it ranges {-lo[2 * i].item():.9g} .. "
            f"{hi[2 * i].item():.9g} ({len(bad)} checksums differ){hint}")
