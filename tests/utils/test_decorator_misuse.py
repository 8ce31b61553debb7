"""What a user who decorates the wrong thing is told: one error naming the
method and what to decorate instead, not torch's StopIteration, a DDP
internals message or weights that drift apart iterations later."""
import gin
import pytest
import torch
from torch import nn

from alf.utils.distributed import (activate_ddp, data_distributed,
                                   data_distributed_when)
from distributed_harness import errors, run_ranks

pytestmark = pytest.mark.timeout(120)


class WithParens(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 1, bias=False)

    @data_distributed()
    def loss(self, x):
        return self.lin(x).sum()


def test_decorator_with_parentheses_works():
    m = WithParens()
    m.loss(torch.ones(1, 2)).backward()
    assert torch.allclose(m.lin.weight.grad, torch.ones(1, 2))
    assert WithParens.loss._alf_data_distributed


def test_when_without_its_condition_names_the_fix():
    class Bare(nn.Module):
        @data_distributed_when
        def loss(self, x):
            return x

    with pytest.raises(TypeError, match=r"Bare\.loss is decorated with "
                       r"data_distributed_when itself; write "
                       r"@data_distributed_when\(cond\)"):
        Bare().loss(torch.ones(1))


def test_a_condition_that_is_not_callable_is_refused():
    with pytest.raises(TypeError, match="cond=True must be a function"):
        data_distributed_when(True)


def test_static_methods_and_functions_are_refused():
    with pytest.raises(TypeError, match=r"on staticmethod .*\.loss: "
                       "decorate a method of an nn.Module"):
        class Static(nn.Module):
            @data_distributed
            @staticmethod
            def loss(x):
                return x

    @data_distributed
    def loss(x):
        return x

    # Before: accepted, never through DDP; the ranks' weights then drifted.
    with pytest.raises(TypeError, match=r"on .*loss, called with a Tensor "
                       "first: decorate a method of an nn.Module"):
        loss(torch.ones(1))


class Paramless(nn.Module):
    """Combines losses of modules it does not own."""

    @data_distributed
    def __call__(self, a, b):
        return a + b


class Owner(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 1, bias=False)
        self.combine = Paramless()

    @data_distributed
    def update(self, x):
        """A whole update: backward and step inside the method."""
        self.lin.weight.grad = None
        self.lin(x).sum().backward()
        with torch.no_grad():
            self.lin.weight -= 0.1 * self.lin.weight.grad
        return self.lin.weight.detach().clone()


def _paramless(rank):
    m = Owner()
    activate_ddp(m)
    y = m.lin(torch.ones(1, 2) * (rank + 1)).sum()
    return m.combine(y, y)


def _update_inside(rank):
    torch.manual_seed(0)
    m = Owner()
    activate_ddp(m)
    for _ in range(3):
        m.update(torch.ones(1, 2) * (rank + 1))


def _update_inside_once(rank):
    """One call: before, nothing was raised, and each rank stepped with
    its own gradient (DDP sees it only on the next call)."""
    torch.manual_seed(0)
    m = Owner()
    activate_ddp(m)
    m.update(torch.ones(1, 2) * (rank + 1))


def _update_inside_search_off(rank):
    """Not 'auto', whose first-call check sees it: DDP raised its own
    "`initialize_buckets` must NOT be called during autograd execution"."""
    gin.bind_parameter("make_ddp_performer.find_unused_parameters", False)
    _update_inside(rank)


@pytest.mark.parametrize("fn, message", [
    (_paramless, "@data_distributed on Paramless.__call__: Paramless has no "
     "trainable parameters for DDP to average; decorate a method of the "
     "module that holds them"),
    (_update_inside, "Owner.update changed its module's gradients "
     "inside its data-distributed call"),
    (_update_inside_once, "Owner.update changed its module's gradients "
     "inside its data-distributed call (a backward, or zero_grad, in it)"),
    (_update_inside_search_off, "Owner.update backpropagated inside its "
     "data-distributed call"),
])
def test_misuse_under_ddp_is_one_error_naming_the_method(fn, message):
    for said in errors(run_ranks(fn, timeout=60), "DistributedError"):
        assert said.startswith(message), said


def test_single_process_misuse_still_runs():
    """Outside DDP the methods run untouched: nothing to refuse there."""
    m = Owner()
    y = m.lin(torch.ones(1, 2)).sum()
    assert torch.equal(m.combine(y, y), 2 * y)
    m.update(torch.ones(1, 2))


def test_misuse_is_one_line_and_not_retried():
    """A TypeError was a traceback, and --max_restarts ran it again."""
    from alf.utils.errors import AlfError

    @data_distributed
    def loss(x):
        return x

    with pytest.raises(AlfError) as info:
        loss(torch.ones(1))
    assert isinstance(info.value, TypeError)
    assert not info.value.retryable


class _Critic(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 1, bias=False)

    @data_distributed
    def loss(self, x):
        return self.lin(x).sum()


class _ListHolder(nn.Module):
    def __init__(self):
        super().__init__()
        self.own = _Critic()
        self.critics = [_Critic()]  # a plain list: not a submodule


def _unregistered(rank):
    torch.manual_seed(0)
    holder = _ListHolder()
    activate_ddp(holder)
    holder.own.loss(torch.ones(1, 2))  # registered: through DDP
    with torch.no_grad():  # nothing to average: no error
        holder.critics[0].loss(torch.ones(1, 2))
    holder.critics[0].loss(torch.ones(1, 2))


def test_a_decorated_module_not_registered_is_named():
    """A critic kept in a plain list trained on each rank alone: its
    weights drifted apart, the run ended 0, and the weight check (of the
    algorithm's own modules) never saw it."""
    msgs = errors(run_ranks(_unregistered), "DistributedError")
    assert msgs[0] == msgs[1] == (
        "@data_distributed on _Critic.loss, in a group of 2 processes: this "
        "_Critic was not a submodule of the module given to activate_ddp "
        "(the algorithm, when training starts; kept in a plain list or "
        "dict, or made later), or activate_ddp was never called, so its "
        "gradients would not be averaged across ranks; make it an "
        "attribute, or keep it in an nn.ModuleList or nn.ModuleDict, when "
        "the algorithm is built")



class _DDPSaysTwice(torch.autograd.Function):
    """A backward that fails as DDP's does for a data-distributed method
    called twice before one backward (with its search for unused
    parameters on: 'auto' turns it on where a first call's outputs hide a
    parameter in a distribution)."""

    @staticmethod
    def forward(ctx, x):
        return x.sum()

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError(
            "Expected to mark a variable ready only once. ... Parameter at "
            "index 5 with name module.actor.head.bias has been marked as "
            "ready twice.")


def test_a_method_called_twice_before_one_backward_is_one_line():
    """DDP's traceback, for a policy-and-value method called on the
    observations and the next observations (measured through the CLI with
    two ranks: the one line below)."""
    from alf.algorithms.algorithm import Algorithm
    from alf.data_structures import LossInfo
    from alf.utils.distributed import DistributedError
    alg = Algorithm()
    alg.net = nn.Linear(2, 1)
    alg.add_optimizer(torch.optim.SGD(alg.net.parameters(), lr=0.1))
    loss = _DDPSaysTwice.apply(alg.net(torch.ones(1, 2)))
    with pytest.raises(DistributedError) as info:
        alg.update_with_gradient(LossInfo(loss, {}))
    assert str(info.value).startswith(
        "Algorithm's backward: DDP reduced a parameter's gradient twice "
        "(module.actor.head.bias): a data-distributed method was called "
        "more than once since the last backward"), str(info.value)
    from alf.utils.distributed.checks import backward_misuse
    assert backward_misuse(RuntimeError("out of memory"), "Algorithm") \
        is None  # raised as it was
