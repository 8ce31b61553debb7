"""Distributed contract tests with 2 real gloo processes (1 thread each)."""
import copy
import logging
import pickle
import subprocess
import sys

import gin
import gymnasium as gym
import pytest
import torch
from absl import logging as absl_logging
from torch import nn

from alf import nest
from alf.algorithms.ppo_algorithm import PPOAlgorithm
from alf.data_structures import Experience
from alf.replay_buffers import ReplayBuffer
from alf.trainers.trainer_config import TrainerConfig
from alf.utils import distributed
from alf.utils.distributed import (activate_ddp, check_weights_equal,
                                   data_distributed, data_distributed_when)
from alf.utils.errors import ConfigError
from distributed_harness import errors, run_ranks, values

pytestmark = pytest.mark.timeout(120)

T, B, OBS = 8, 4, 3


# ---- PPO: 2 ranks x half a batch == 1 process x the whole batch ---------
def _fixed_unroll():
    g = torch.Generator().manual_seed(123)
    raw = torch.randn(T + 1, B, OBS, generator=g) * 3 + 1
    terminated = torch.zeros(T, B, dtype=torch.bool)
    truncated = torch.zeros(T, B, dtype=torch.bool)
    terminated[3, 1] = True
    truncated[5, 2] = True
    return raw, Experience(
        observation=raw[:-1], action=torch.randint(0, 2, (T, B), generator=g),
        reward=torch.rand(T, B, generator=g), terminated=terminated,
        truncated=truncated, next_observation=raw[1:],
        rollout_info=torch.full((T, B), -0.7))


def _ppo_train_iter(rank, world_size):
    cfg = TrainerConfig(algorithm_ctor=PPOAlgorithm, num_envs=B,
                        unroll_length=T, minibatch_size=T * B,
                        num_epochs=3).per_rank(world_size)
    torch.manual_seed(0)
    alg = PPOAlgorithm(gym.spaces.Box(-10, 10, (OBS, )), gym.spaces.Discrete(2),
                       cfg, normalize_observations=True)
    activate_ddp(alg)
    raw, exp = _fixed_unroll()
    cols = slice(rank * cfg.local_num_envs, (rank + 1) * cfg.local_num_envs)
    for t in range(T):
        alg.observe(raw[t, cols])
        alg.store(nest.map_structure(lambda x: x[t, cols], exp))
    alg.train_iter(0.0)
    return {n: t.clone() for n, t in distributed.synced_state(alg)}


def test_two_ranks_equal_one_process_ppo_update():
    """Each rank trains on half the envs; result equals the whole batch."""
    single = _ppo_train_iter(0, 1)
    ranks = values(run_ranks(_ppo_train_iter, 2))
    assert set(single) == set(ranks[0]) and "observation_normalizer.mean" in single
    for name, ref in single.items():
        for r in ranks:
            diff = (r[name].double() - ref.double()).abs().max().item()
            assert diff <= 1e-5, f"{name}: max abs diff {diff}"
    # The update did change the weights (so the comparison means something).
    torch.manual_seed(0)
    fresh = PPOAlgorithm(gym.spaces.Box(-10, 10, (OBS, )),
                         gym.spaces.Discrete(2),
                         TrainerConfig(algorithm_ctor=PPOAlgorithm,
                                       num_envs=B, unroll_length=T,
                                       minibatch_size=T * B))
    w = "actor.encoder.layers.0.weight"
    assert not torch.allclose(fresh.state_dict()[w], single[w])


# ---- activation, replay buffers, drift -----------------------------------
class WithReplay(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 1)
        self.register_buffer("stat", torch.zeros(2))
        self.replay_buffer = ReplayBuffer(4, 2)

    @data_distributed
    def loss(self, x):
        return self.lin(x).square().mean()


def _activation_and_replay(rank):
    torch.manual_seed(rank)  # different initial weights on purpose
    m = WithReplay()
    m.stat.fill_(rank + 1)
    m.replay_buffer.add_batch(torch.full((2, 3), float(rank)))
    activate_ddp(m)
    after_activation = m.lin.weight.detach().clone()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for i in range(3):
        opt.zero_grad()
        m.loss(torch.randn(5, 3) + rank).backward()
        opt.step()
        m.replay_buffer.add_batch(torch.full((2, 3), float(10 * rank + i)))
    check_weights_equal(m)
    return (after_activation, m.lin.weight.detach().clone(), m.stat.clone(),
            m.replay_buffer.gather_all().clone(),
            [k for k in m.state_dict()])


def test_activation_broadcasts_weights_but_never_replay_buffers():
    r0, r1 = values(run_ranks(_activation_and_replay))
    assert torch.equal(r0[0], r1[0])  # rank 0's weights from the start
    assert torch.equal(r0[1], r1[1])  # and equal after DDP updates
    assert torch.equal(r0[2], r1[2])  # ordinary buffers are synced
    assert not torch.equal(r0[3], r1[3])  # replay buffers are not
    assert torch.equal(r1[3][0], torch.full((2, 3), 1.0))
    # The DDP module is cached on the module but is not a submodule.
    assert not any("module." in k or "performer" in k for k in r0[4])


def test_rank_local_state_is_marked_not_imported():
    """Replay buffers mark themselves (`exclude_from_ddp`); any module can
    be marked; alf.utils.distributed does not import alf.replay_buffers."""
    m = WithReplay()
    m.local = distributed.exclude_from_ddp(nn.Module())
    m.local.register_buffer("own", torch.zeros(1))
    names = [n for n, _ in distributed.synced_state(m)]
    assert names == ["lin.weight", "lin.bias", "stat"]
    assert "replay_buffer._num_added" in dict(m.named_buffers())
    code = ("import sys, alf.utils.distributed; "
            "print('alf.replay_buffers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "False"


def _drift_by_name(rank, what):
    torch.manual_seed(0)
    m = WithReplay()
    activate_ddp(m)
    m.replay_buffer.add_batch(torch.full((2, 3), float(rank)))
    check_weights_equal(m)  # replay buffers may differ
    tensor = dict(distributed.synced_state(m))[what]
    with torch.no_grad():
        if rank == 1:
            tensor.view(-1)[0] += 1e-4
    check_weights_equal(m)


@pytest.mark.parametrize("what", ["lin.weight", "stat"])
def test_weight_drift_is_detected(what):
    """A parameter or a buffer that drifts on one rank is named."""
    for said in errors(run_ranks(_drift_by_name, what), "DistributedError"):
        assert what in said
        # What to look at: an update outside DDP, or per-rank state.
        assert ("own gradients" if what == "lin.weight" else
                "exclude_from_ddp") in said


# ---- unused parameters ----------------------------------------------------
class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(3, 4)
        self.head_a = nn.Linear(4, 1)
        self.head_b = nn.Linear(4, 1)  # unused by loss_a
        self.use_b = False

    @data_distributed
    def loss_a(self, x):
        out = self.head_a(torch.tanh(self.trunk(x)))
        if self.use_b:
            out = out + self.head_b(self.trunk(x))
        return out.square().mean()


def _unused(rank, find_unused, use_b_at=()):
    """Trains loss_a 3 times; ``use_b_at``: the calls that also use head_b
    (all ranks)."""
    gin.bind_parameter("make_ddp_performer.find_unused_parameters",
                       find_unused)
    torch.manual_seed(0)
    m = TwoHeads()
    activate_ddp(m)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for i in range(3):
        m.use_b = i in use_b_at
        opt.zero_grad()
        m.loss_a(torch.randn(5, 3) + rank).backward()
        opt.step()
    check_weights_equal(m)
    return m.__dict__["_alf_ddp"]["performer"].find_unused_parameters


def _one_line_config_errors(results, method="TwoHeads.loss_a"):
    for r in results:
        assert not r.ok and r.value[0] == "ConfigError", r.value
        assert "\n" not in r.value[1], r.value[1]
        assert r.value[1].startswith(
            f"{method} left parameters without gradient (head_b.weight, "
            "head_b.bias)"), r.value[1]
        assert ("add `make_ddp_performer.find_unused_parameters = True` to "
                "the gin file") in r.value[1]
    return [r.value[1] for r in results]


def test_unused_head_with_detection_off_is_one_line_naming_it():
    """DDP's own error (about 'parameter indices 4 5', at the next call)
    becomes one line: the method, the parameters by name, the gin fix."""
    for msg in _one_line_config_errors(run_ranks(_unused, False)):
        assert "while make_ddp_performer.find_unused_parameters = False" \
            in msg


def test_unused_head_works_with_find_unused_parameters():
    assert values(run_ranks(_unused, True)) == [True, True]


def test_auto_turns_detection_on_for_an_unused_head():
    assert values(run_ranks(_unused, "auto")) == [True, True]


def test_auto_keeps_detection_off_when_every_parameter_is_used():
    assert values(run_ranks(_unused, "auto", (0, 1, 2))) == [False, False]


def test_auto_names_a_method_whose_later_call_leaves_parameters_unused():
    """The first call (which 'auto' judges) uses head_b, the second not."""
    for msg in _one_line_config_errors(run_ranks(_unused, "auto", (0, ))):
        assert "in a later call, although its first call" in msg


class ActorCritic(nn.Module):
    """Two decorated losses, each leaving the other's network unused."""

    def __init__(self):
        super().__init__()
        self.actor = nn.Sequential(nn.Linear(3, 4), nn.Tanh(),
                                   nn.Linear(4, 2))
        self.critic = nn.Sequential(nn.Linear(3, 4), nn.Tanh(),
                                    nn.Linear(4, 1))

    @data_distributed
    def actor_loss(self, x):
        return self.actor(x).log_softmax(-1)[:, 0].mean()

    @data_distributed
    def critic_loss(self, x):
        return self.critic(x).square().mean()

    @data_distributed
    def both_loss(self, x):
        """Uses every parameter (PPG's auxiliary phase)."""
        return (self.actor(x).log_softmax(-1)[:, 0].mean() +
                self.critic(x).square().mean())


def _actor_critic(rank, world_size=2, summed=False, spare=False,
                  plan=None):
    """Gradients of 3 rounds of actor_loss then critic_loss, each with its
    own backward (``summed``: one backward of their sum), on rank
    ``rank``'s half of each batch (the whole batch with ``world_size`` 1);
    the methods whose first call was checked; this rank's absl log.
    ``spare``: a layer that neither loss uses. ``plan``: instead, each
    round's backwards, each of the sum of the methods named."""
    torch.manual_seed(0)
    m = ActorCritic()
    if spare:
        m.spare = nn.Linear(2, 2)
    activate_ddp(m)
    records = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())
    absl_logging.get_absl_logger().addHandler(handler)
    absl_logging.set_verbosity(absl_logging.INFO)
    g = torch.Generator().manual_seed(7)  # the same batches on every rank
    grads = []
    for _ in range(3):
        plan = plan or ([("actor_loss", "critic_loss")] if summed else
                        [("actor_loss", ), ("critic_loss", )])
        for losses in [[getattr(m, n) for n in names] for names in plan]:
            m.zero_grad(set_to_none=True)
            x = torch.randn(2, 6, 3, generator=g)
            x = x[rank] if world_size == 2 else x.flatten(0, 1)
            sum(loss(x) for loss in losses).backward()
            grads.append({n: None if p.grad is None else p.grad.clone()
                          for n, p in m.named_parameters()})
    state = m.__dict__.get("_alf_ddp")
    return grads, state and sorted(state["checked"]), records


def _check_grads(ranks, single):
    """Each rank's gradients equal one process's on the whole batch."""
    (g0, _, _), (g1, _, _) = ranks
    for i, ref in enumerate(single):
        for n, want in ref.items():
            if want is None:
                assert g0[i][n] is None and g1[i][n] is None, (i, n)
                continue
            assert torch.equal(g0[i][n], g1[i][n]), (i, n)
            assert torch.allclose(g0[i][n], want, atol=1e-6), (i, n)


def test_auto_two_methods_each_leaving_parameters_unused():
    """An actor loss and a critic loss with their own backward, no config
    line: each call's gradients are the whole batch's (2 ranks x half ==
    1 process x all), the other network's stay None, and rank 0 alone logs
    one line naming the method and the parameters."""
    ranks = values(run_ranks(_actor_critic))
    single, _, _ = _actor_critic(0, world_size=1)
    for i, grads in enumerate(single):  # the comparison means something
        unused = "critic" if i % 2 == 0 else "actor"
        assert all((g is None) == n.startswith(unused)
                   for n, g in grads.items())
    _check_grads(ranks, single)
    (_, checked0, log0), (_, checked1, log1) = ranks
    assert checked0 == checked1 == ["ActorCritic.actor_loss",
                                    "ActorCritic.critic_loss"]
    assert log1 == []
    assert log0 == [
        "ActorCritic.actor_loss leaves 4 parameter(s) without gradient "
        "(critic.0.weight, critic.0.bias, critic.2.weight, critic.2.bias): "
        "alf turned on DDP's unused-parameter search for every "
        "data-distributed method of ActorCritic (make_ddp_performer."
        "find_unused_parameters = 'auto'; set it to True to skip this "
        "first-call check)"]


def test_auto_keeps_the_search_for_a_method_that_needs_it():
    """A method that uses every parameter, with its own backward, after
    one that needs the search (PPG's auxiliary phase after its policy
    phase): the search stays on. It was turned off again, and the policy
    phase's next call trained on each rank's own gradients."""
    plan = [("actor_loss", ), ("both_loss", )]
    ranks = values(run_ranks(_actor_critic, 2, False, False, plan))
    _check_grads(ranks, _actor_critic(0, 1, plan=plan)[0])
    (_, checked0, log0), (_, checked1, _) = ranks
    assert checked0 == checked1 == ["ActorCritic.actor_loss",
                                    "ActorCritic.both_loss"]
    assert len(log0) == 1 and log0[0].startswith(
        "ActorCritic.actor_loss leaves 4 parameter(s)"), log0


def test_auto_keeps_the_search_for_a_backward_whose_last_output_uses_all():
    """Search on, as actor_loss needs it, for critic_loss + both_loss in
    one backward: DDP searches both_loss's output, which reaches every
    parameter, so nothing is marked ready twice."""
    plan = [("actor_loss", ), ("critic_loss", "both_loss")]
    ranks = values(run_ranks(_actor_critic, 2, False, False, plan))
    _check_grads(ranks, _actor_critic(0, 1, plan=plan)[0])


def test_auto_refuses_a_backward_that_needs_the_search_off_and_on():
    plan = [("actor_loss", ), ("both_loss", "critic_loss")]
    for said in errors(run_ranks(_actor_critic, 2, False, False, plan),
                       "DistributedError"):
        assert said.startswith(
            "ActorCritic.both_loss and ActorCritic.critic_loss are "
            "backpropagated together, which needs DDP's unused-parameter "
            "search off as the last leaves actor.0.weight, actor.0.bias, "
            "actor.2.weight, actor.2.bias without gradient, while "
            "ActorCritic.actor_loss leave(s) parameters without gradient, "
            "which needs it on;"), said


def test_auto_two_methods_backpropagated_together():
    """The two losses summed into one backward (which worked with the search
    off, and fails in DDP with it on: 'marked ready twice'): 'auto' sees
    that the first output is still waiting for its backward and judges
    both together."""
    ranks = values(run_ranks(_actor_critic, 2, True))
    _check_grads(ranks, _actor_critic(0, 1, True)[0])
    log0 = ranks[0][2]
    assert len(log0) == 2 and log0[0].startswith(
        "ActorCritic.actor_loss leaves 4 parameter(s)"), log0
    assert log0[1] == (
        "ActorCritic.actor_loss and ActorCritic.critic_loss are "
        "backpropagated together and use every parameter: alf turned DDP's "
        "unused-parameter search off again for ActorCritic")


def test_auto_methods_backpropagated_together_leaving_some_unused():
    for said in errors(run_ranks(_actor_critic, 2, True, True),
                       "DistributedError"):
        assert said.startswith(
            "ActorCritic.actor_loss and ActorCritic.critic_loss are "
            "backpropagated together and leave spare.weight, spare.bias "
            "without gradient, which DDP cannot reduce"), said


def _rank_dependent_use(rank):
    """Only rank 1's first call uses head_b: both must still decide alike
    (the union), or the next backward would hang."""
    torch.manual_seed(0)
    m = TwoHeads()
    activate_ddp(m)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for i in range(3):
        m.use_b = rank == 1 and i == 0
        opt.zero_grad()
        m.loss_a(torch.randn(5, 3) + rank).backward()
        opt.step()
    check_weights_equal(m)
    return m.__dict__["_alf_ddp"]["performer"].find_unused_parameters


def test_auto_decides_alike_when_ranks_use_different_parameters():
    assert values(run_ranks(_rank_dependent_use)) == [True, True]


def test_find_unused_parameters_must_be_true_false_or_auto():
    with pytest.raises(ConfigError, match="'yes': expected True, False or "
                       "'auto'"):
        distributed.make_ddp_performer(nn.Linear(1, 1),
                                       find_unused_parameters="yes")


# ---- call order -----------------------------------------------------------
class TwoMethods(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 1)

    @data_distributed
    def first(self, x):
        return self.lin(x).sum()

    @data_distributed
    def second(self, x):
        return self.lin(x).square().sum()


def _call_order(rank, swap):
    torch.manual_seed(0)
    m = TwoMethods()
    activate_ddp(m)
    calls = [m.first, m.second]
    if swap and rank == 1:
        calls.reverse()
    for _ in range(2):
        for call in calls:
            call(torch.ones(2, 3)).backward()
    return m.lin.weight.grad.clone()


def test_mismatched_call_order_raises_naming_methods_and_ranks():
    """Detected inside the first call's gradient all-reduce: every rank
    raises, naming its rank and the method it ran, before any step."""
    results = run_ranks(_call_order, True, timeout=60)
    for r in results:
        assert not r.ok, r.value
        assert "call order differs across ranks" in r.value[1], r.value
        assert "DDP call #1" in r.value[1]
    msgs = " ".join(r.value[1] for r in results)
    assert "rank 0, DDP call #1 ran TwoMethods.first," in msgs
    assert "rank 1, DDP call #1 ran TwoMethods.second," in msgs


def _call_order_unwrapped(rank):
    # Not 'auto', whose first-call check would see it outside backward.
    gin.bind_parameter("make_ddp_performer.find_unused_parameters", False)
    try:
        _call_order(rank, True)
    except RuntimeError as e:
        wrapped = distributed.raised_in_callback(e)
        return type(wrapped).__name__, str(wrapped), wrapped.retryable
    return None


def test_a_call_order_error_raised_in_backward_is_unwrapped():
    """torch re-raises the hook's error as a RuntimeError quoting it with
    the callback's stack; the trainer raises the DistributedError itself,
    an AlfError (one line, not retried)."""
    for rank, (kind, said, retryable) in enumerate(
            values(run_ranks(_call_order_unwrapped, timeout=60))):
        method = "TwoMethods.first" if rank == 0 else "TwoMethods.second"
        assert kind == "DistributedError" and not retryable
        assert said == (
            f"call order differs across ranks: on rank {rank}, DDP call #1 "
            f"ran {method}, while another rank ran a different method, "
            "module or call number; every rank must call the "
            "data-distributed methods of the algorithm and its modules in "
            "the same order (and a data_distributed_when condition must "
            "agree on every rank)"), said
    assert distributed.raised_in_callback(RuntimeError("other")) is None


def _call_order_off(rank):
    gin.bind_parameter("call_order_check.enabled", False)
    return _call_order(rank, True)


def test_call_order_check_can_be_switched_off():
    # Same parameters, same bucket: without the check the swapped calls
    # silently pair up (which is why it is on by default).
    g0, g1 = values(run_ranks(_call_order_off))
    assert torch.equal(g0, g1)


def test_same_call_order_passes():
    g0, g1 = values(run_ranks(_call_order, False))
    assert torch.equal(g0, g1)


# ---- data_distributed_when and the single-process path --------------------
class Conditional(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 1, bias=False)
        self.use_ddp = True

    @data_distributed_when(lambda self: self.use_ddp)
    def loss(self, x):
        return self.lin(x).sum()


def _conditional(rank):
    torch.manual_seed(0)
    m = Conditional()
    activate_ddp(m)
    grads = []
    for use in (True, False):
        m.use_ddp = use
        m.zero_grad()
        m.loss(torch.full((1, 2), float(rank + 1))).backward()
        grads.append(m.lin.weight.grad.clone())
    return grads


def test_data_distributed_when_condition():
    (ddp0, local0), (ddp1, local1) = values(run_ranks(_conditional))
    assert torch.equal(ddp0, ddp1)  # averaged: (1 + 2) / 2 per entry
    assert torch.allclose(ddp0, torch.full((1, 2), 1.5))
    assert torch.allclose(local0, torch.full((1, 2), 1.0))
    assert torch.allclose(local1, torch.full((1, 2), 2.0))


def _disagreeing_conditions(rank):
    gin.bind_parameter("make_ddp_performer.find_unused_parameters", False)
    torch.manual_seed(0)
    m = Conditional()
    activate_ddp(m)
    x = torch.full((1, 2), float(rank + 1))
    for use in (True, rank == 0, True):  # rank 1 keeps one call local
        m.use_ddp = use
        m.zero_grad()
        try:
            m.loss(x).backward()
        except RuntimeError as e:
            wrapped = distributed.raised_in_callback(e)
            if wrapped is None:
                raise
            raise wrapped from None
    return m.lin.weight.grad.clone()


def test_conditions_that_disagree_across_ranks_fail_the_call_order_check():
    """Before, rank 0's second DDP call paired its gradients with rank
    1's third call (its second through DDP), silently."""
    results = run_ranks(_disagreeing_conditions, timeout=60)
    for r in results:
        assert not r.ok, r.value
        assert "call order differs across ranks" in r.value[1], r.value
    assert ("rank 1, DDP call #2 ran Conditional.loss after 1 call of it "
            "kept out of DDP by data_distributed_when," in
            results[1].value[1]), results[1].value


class _TwoConditional(Conditional):
    def __init__(self):
        super().__init__()
        self.other = Conditional()


def _extra_local_calls(rank):
    torch.manual_seed(0)
    m = _TwoConditional()
    activate_ddp(m)
    x = torch.full((1, 2), float(rank + 1))
    m.other.use_ddp = False
    for _ in range(1 + rank):  # another module's local calls: uneven
        m.other.loss(x).backward()
    for use in (False, True, False, True):  # this method's: even
        m.use_ddp = use
        m.zero_grad()
        m.loss(x).backward()
    return m.lin.weight.grad.clone()


def test_local_calls_that_ranks_agree_on_pass_the_call_order_check():
    """Another module trained per rank may be called more often on one
    rank; a method kept out of DDP alike on every rank is fine too."""
    g0, g1 = values(run_ranks(_extra_local_calls, timeout=60))
    assert torch.equal(g0, g1)


def _copies(rank):
    torch.manual_seed(0)
    m = Conditional()
    activate_ddp(m)
    x = torch.full((1, 2), float(rank + 1))
    m.loss(x).backward()  # the DDP module exists now
    grads = []
    for c in (copy.deepcopy(m), pickle.loads(pickle.dumps(m))):
        c.zero_grad()
        c.loss(x).backward()  # plain: this rank's own gradient
        grads.append(c.lin.weight.grad.clone())
    copy.deepcopy(m.lin)  # a submodule, as an old policy's network
    m.zero_grad()
    m.loss(x).backward()  # the original still averages
    return grads, m.lin.weight.grad.clone()


def test_copies_of_an_activated_module_are_plain_modules():
    """deepcopy (an "old policy") and pickle: the DDP module, which cannot
    be copied, and the algorithm it holds are left out."""
    for rank, (copies, original) in enumerate(values(run_ranks(_copies))):
        for grad in copies:
            assert torch.allclose(grad, torch.full((1, 2), rank + 1.0))
        assert torch.allclose(original, torch.full((1, 2), 1.5))


class TwoLayers(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(2, 1)
        self.b = nn.Linear(2, 1)

    @data_distributed
    def loss(self, x):
        return (self.a(x) + self.b(x)).sum()


def _unfrozen_late(rank):
    torch.manual_seed(0)
    m = TwoLayers()
    m.b.requires_grad_(False)
    activate_ddp(m)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for i in range(2):
        if i == 1:
            m.b.requires_grad_(True)  # after DDP took its parameters
        opt.zero_grad()
        m.loss(torch.full((1, 2), float(rank + 1))).backward()
        opt.step()
    check_weights_equal(m)


def test_a_parameter_unfrozen_after_ddp_was_built_is_named_as_such():
    """Its gradients are each rank's own: the weight check's hint said a
    loss was not data-distributed."""
    for said in errors(run_ranks(_unfrozen_late), "DistributedError"):
        assert said.startswith("weights differ across ranks: b.weight "), \
            said
        assert said.endswith(
            "; DDP does not average it: it was frozen (requires_grad=False) "
            "or not there when its module's DDP module was built, at the "
            "first data-distributed call; unfreeze and add parameters "
            "before training"), said


def _target_drifts(rank):
    torch.manual_seed(0)
    m = TwoLayers()
    m.b.requires_grad_(False)  # a target network
    activate_ddp(m)
    m.loss(torch.ones(1, 2)).backward()
    if rank == 1:
        with torch.no_grad():
            m.b.weight += 1.0  # a target update on one rank only
    check_weights_equal(m)


def test_a_frozen_parameter_that_drifts_is_named_as_updated_outside_backward(
):
    """Not 'unfreeze it' (the hint for a parameter DDP was built without),
    nor 'a loss not data-distributed'."""
    for said in errors(run_ranks(_target_drifts), "DistributedError"):
        assert said.startswith("weights differ across ranks: b.weight "), \
            said
        assert said.endswith(
            "; it requires no grad, so a rank changed it outside backward (a "
            "target network's update?): every rank must change it alike"), \
            said


def test_decorated_method_runs_untouched_in_one_process():
    m = Conditional()
    activate_ddp(m)  # a no-op outside a process group
    m.loss(torch.ones(1, 2)).backward()
    assert "_alf_ddp" not in m.__dict__
    assert torch.allclose(m.lin.weight.grad, torch.ones(1, 2))


def _standardize(rank):
    x = torch.arange(8.0)[rank * 4:(rank + 1) * 4] ** 2
    return distributed.standardize(x)


def test_standardize_uses_global_statistics():
    s0, s1 = values(run_ranks(_standardize))
    x = torch.arange(8.0) ** 2
    ref = (x - x.mean()) / (x.std(correction=0) + 1e-8)
    assert torch.allclose(torch.cat([s0, s1]), ref, atol=1e-6)
