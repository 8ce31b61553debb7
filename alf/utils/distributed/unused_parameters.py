"""Which parameters a data-distributed call leaves without gradient.

`alf.utils.distributed.make_ddp_performer`'s default,
``find_unused_parameters='auto'``, decides on the first call of each
decorated method whether DDP must look for unused parameters in every call.
This module answers the question (`FirstCalls`) the way DDP's reducer does
when the option is on (``search_unused_parameters`` in torch's
``reducer.cpp``): ``backward`` of an output gives a parameter a gradient iff
the output's autograd graph reaches the parameter's gradient accumulator. It
also turns DDP's error about a call whose reduction was left unfinished into
one line naming the method, the parameters and the fix.
"""
import functools
import re
from typing import List, NamedTuple, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
from torch import nn
# DDP's own walk over a forward's output (tuples, dicts, dataclasses, ...):
# what it finds is exactly what DDP searches from.
from torch.nn.parallel.distributed import _find_tensors

from alf.utils.errors import ConfigError


def trainable_parameters(module: nn.Module
                         ) -> List[Tuple[str, nn.Parameter]]:
    """``module``'s parameters that require grad, by name, in the order of
    DDP's reducer (its parameter indices)."""
    return [(n, p) for n, p in module.named_parameters() if p.requires_grad]


def unreached(params: Sequence[nn.Parameter], output) -> List[bool]:
    """For each of ``params``, whether ``backward`` through every tensor in
    ``output`` leaves it without gradient.

    Args:
        params: the parameters to look for.
        output: what a method returned (any nest of tensors).

    Returns:
        One flag per parameter, True where the graph does not reach it.
    """
    reached, seen, stack = set(), set(), []
    for t in _find_tensors(output):
        if t.grad_fn is not None:
            stack.append(t.grad_fn)
        elif t.requires_grad:
            reached.add(id(t))  # a parameter returned as is
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        leaf = getattr(node, "variable", None)  # an AccumulateGrad node
        if leaf is not None:
            reached.add(id(leaf))
        stack.extend(n for n, _ in node.next_functions
                     if n is not None and n not in seen)
    return [id(p) not in reached for p in params]


class Decision(NamedTuple):
    """What `FirstCalls.decide` found (the same on every rank)."""

    #: Parameters (names relative to the module) that the backward this
    #: output goes into leaves without gradient on some rank.
    unused: List[str]
    #: Whether that backward also takes earlier calls' outputs (they were
    #: not backpropagated yet when this call was made).
    joint: bool
    #: Those earlier calls' methods, oldest first (this rank's view).
    joined: List[str]
    #: Whether every rank was in the same call (method and call number).
    same_call: bool
    #: Parameters that this output alone leaves without gradient on some
    #: rank (``unused`` when not ``joint``).
    unused_alone: List[str]


class _Pending(NamedTuple):
    name: str
    unreached: List[bool]  # over all ranks
    done: List[bool]  # [True] once backward reached the output


class FirstCalls:
    """The first calls of one module's decorated methods whose outputs have
    not been backpropagated yet.

    Usually each call's output is backpropagated before the next call, and
    the question is what that output alone leaves without gradient. A user
    may also sum the outputs of several methods (an actor loss and a critic
    loss) and backpropagate once: then what counts is what all of them
    together leave. A hook on each first call's output tells which outputs
    are still waiting; only first calls are hooked, so later calls cost
    nothing.
    """

    def __init__(self):
        self._pending: List[_Pending] = []

    def decide(self, module: nn.Module, name: str, output,
               tag: float) -> Decision:
        """Decides for a first call of ``name``; one all-reduce, which
        every rank must enter.

        The graph is normally the same on every rank, but a data-dependent
        branch may differ: the union makes every rank decide alike.

        Args:
            module: the module whose decorated method returned ``output``.
            name: the method's qualified name.
            output: its return value.
            tag: a number (below 2**24) naming the call; compared across
                ranks.
        """
        params = trainable_parameters(module)
        alone = unreached([p for _, p in params], output)
        self._pending = [e for e in self._pending if not e.done[0]]
        together = alone
        for e in self._pending:
            together = [a and b for a, b in zip(together, e.unreached)]
        flags = alone + together + [bool(self._pending)]
        both = torch.tensor([float(f) for f in flags] + [tag, -tag])
        dist.all_reduce(both, op=dist.ReduceOp.MAX)
        count = len(params)
        got = [f > 0 for f in both[:-2].tolist()]
        joint = got[-1]
        mask = got[count:2 * count] if joint else got[:count]
        entry = _Pending(name, got[:count], [False])
        for t in _find_tensors(output):
            if t.grad_fn is not None:
                t.register_hook(functools.partial(_reached, entry.done))
        joined = [e.name for e in self._pending]
        self._pending.append(entry)
        return Decision([n for (n, _), u in zip(params, mask) if u], joint,
                        joined, bool(both[-2] == -both[-1]),
                        [n for (n, _), u in zip(params, got[:count]) if u])


def _reached(done: List[bool], grad):
    done[0] = True


def keep_until_backward(output, obj) -> None:
    """Keeps ``obj`` alive as long as the autograd graph of ``output``."""
    for t in _find_tensors(output):
        if t.grad_fn is not None:
            t.register_hook(functools.partial(_keep, obj))


def _keep(obj, grad):
    return None


#: How DDP's error about an unfinished reduction begins (raised by the
#: forward after the call whose backward left parameters without gradient).
DDP_UNREDUCED = "Expected to have finished reduction in the prior iteration"
_DDP_UNREDUCED_LIST = re.compile(
    r"did not receive grad for rank \d+: ([^\n]*)")


def names_in_ddp_error(module: nn.Module, text: str) -> Optional[List[str]]:
    """The parameters (names relative to ``module``) that DDP's "Expected to
    have finished reduction in the prior iteration" error ``text`` lists,
    or None when it lists none.

    DDP names them by index into its parameter list (`trainable_parameters`)
    or, with ``TORCH_DISTRIBUTED_DEBUG=INFO``, by name under the wrapper's
    ``module.`` prefix.
    """
    match = _DDP_UNREDUCED_LIST.search(text)
    if match is None:
        return None
    tokens = [t for t in re.split(r"[\s,]+", match.group(1)) if t]
    if tokens and all(t.isdigit() for t in tokens):
        names = [n for n, _ in trainable_parameters(module)]
        return [names[int(t)] if int(t) < len(names) else f"#{t}"
                for t in tokens]
    return [t[len("module."):] if t.startswith("module.") else t
            for t in tokens] or None


def describe(names: Sequence[str], limit: int = 6) -> str:
    """``names`` joined by commas, cut after ``limit`` with a count of the
    rest (a network can have dozens of tensors; one line must stay one)."""
    shown = ", ".join(names[:limit])
    rest = len(names) - limit
    return f"{shown} and {rest} more" if rest > 0 else shown


def unreduced_error(module: nn.Module, method: Optional[str], auto: bool,
                    text: str) -> ConfigError:
    """DDP's error ``text`` about the call of ``method`` (None: unknown)
    before this one, as one line naming the method, the parameters it left
    without gradient and the gin line that fixes it.

    Args:
        module: the module whose DDP module raised.
        method: the qualified name of the method called last through it.
        auto: whether ``find_unused_parameters`` is 'auto' (else False).
        text: DDP's message.
    """
    names = names_in_ddp_error(module, text)
    what = f" ({describe(names)})" if names else ""
    method = method or f"a data-distributed method of {type(module).__name__}"
    why = ("in a later call, although its first call, on which "
           "make_ddp_performer.find_unused_parameters = 'auto' decides, "
           "reached them all" if auto else
           "while make_ddp_performer.find_unused_parameters = False")
    return ConfigError(
        f"{method} left parameters without gradient{what} {why}; add "
        "`make_ddp_performer.find_unused_parameters = True` to the gin file "
        "(or, if its output is not a loss, call it under torch.no_grad())")
