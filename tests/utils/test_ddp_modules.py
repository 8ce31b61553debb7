"""Several modules of one algorithm with data-distributed methods: the call
order is checked across all of them, a module whose parameters another's
DDP module already averages is refused, and a decorated method called
inside another's data-distributed call runs as part of it."""
import pytest
import torch
from torch import nn

from alf.utils.distributed import activate_ddp, data_distributed
from distributed_harness import errors, run_ranks, values

pytestmark = pytest.mark.timeout(120)


class Critic(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 1, bias=False)

    @data_distributed
    def value_loss(self, x):
        return self.lin(x).square().sum()


class ActorCritic(nn.Module):
    def __init__(self, critics: int = 1):
        super().__init__()
        self.actor = nn.Linear(2, 1, bias=False)
        self.critics = nn.ModuleList(Critic() for _ in range(critics))

    @data_distributed
    def loss(self, x):
        """The actor's loss plus every critic's (decorated) value loss."""
        return self.actor(x).sum() + sum(c.value_loss(x)
                                         for c in self.critics)

    @data_distributed
    def actor_loss(self, x):
        return self.actor(x).sum()


class Sibling(nn.Module):
    """Calls a decorated method of a module it does not hold."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 1, bias=False)
        self.other = None

    @data_distributed
    def loss(self, x):
        return self.lin(x).sum() + self.other.value_loss(x)


def _x(rank):
    return torch.ones(1, 2) * (rank + 1)


def _nested(rank):
    torch.manual_seed(0)
    m = ActorCritic()
    activate_ddp(m)
    for _ in range(3):  # the first call decides on unused parameters
        m.zero_grad()
        m.loss(_x(rank)).backward()
    return [p.grad.clone() for p in m.parameters()]


def test_a_decorated_method_inside_another_runs_as_part_of_it():
    """Before, torch failed with "not the expected DDP bucket view"."""
    g0, g1 = values(run_ranks(_nested))
    torch.manual_seed(0)
    one = ActorCritic()
    one.loss(torch.ones(2, 2) * torch.tensor([[1.0], [2.0]])).backward()
    for a, b, single in zip(g0, g1, one.parameters()):
        assert torch.equal(a, b)
        # The mean over ranks of each rank's gradient: half the union's.
        assert torch.allclose(a, single.grad / 2)


def _overlap(rank):
    torch.manual_seed(0)
    m = ActorCritic()
    activate_ddp(m)
    m.actor_loss(_x(rank)).backward()
    m.critics[0].value_loss(_x(rank)).backward()  # its own DDP module


def test_two_ddp_modules_over_shared_parameters_are_refused():
    """Before, the second failed at its next backward with DDP's "please
    report a bug" errors."""
    for said in errors(run_ranks(_overlap, timeout=60), "DistributedError"):
        assert said.startswith(
            "Critic.value_loss (on critics.0) and ActorCritic.actor_loss (on "
            "ActorCritic) are data-distributed over 1 shared parameters, "
            "which DDP cannot average twice"), said


def _sibling(rank):
    torch.manual_seed(0)
    holder = nn.Module()
    holder.a, holder.b = Sibling(), Critic()
    holder.a.__dict__["other"] = holder.b  # not a submodule of a
    activate_ddp(holder)
    holder.a.loss(_x(rank)).backward()


def test_a_nested_call_whose_parameters_the_outer_call_lacks_is_refused():
    for said in errors(run_ranks(_sibling, timeout=60), "DistributedError"):
        assert said.startswith(
            "Critic.value_loss (on b) is called inside Sibling.loss's "
            "data-distributed call, whose module (Sibling) does not hold "
            "its parameters"), said


def _critics_in_order(rank, swap):
    torch.manual_seed(0)
    m = ActorCritic(critics=2)
    activate_ddp(m)
    critics = list(m.critics)
    if swap and rank == 1:
        critics.reverse()
    for _ in range(2):
        for c in critics:
            c.value_loss(_x(rank)).backward()
    return [c.lin.weight.grad.clone() for c in m.critics]


def test_two_modules_of_one_class_called_in_another_order_are_caught():
    """Each critic has its own DDP module; swapped on one rank, their
    all-reduces pair up across critics. Before, the check (per module)
    passed and the gradients mixed silently."""
    results = run_ranks(_critics_in_order, True, timeout=60)
    msgs = " ".join(str(r.value) for r in results)
    assert all(not r.ok for r in results), msgs
    assert "rank 0, DDP call #1 ran Critic.value_loss of critics.0," in msgs
    assert "rank 1, DDP call #1 ran Critic.value_loss of critics.1," in msgs
    g0, g1 = values(run_ranks(_critics_in_order, False))
    assert all(torch.equal(a, b) for a, b in zip(g0, g1))
