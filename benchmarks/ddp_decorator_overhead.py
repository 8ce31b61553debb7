r"""Step time of `@data_distributed` vs hand-written DDP, 2 gloo ranks.

The same actor+critic MLP pair, the same per-rank data and the same Adam are
trained five ways, each in its own copy of the module (identical start):

* ``hand``: ``DistributedDataParallel(LossModule(nets))`` with DDP's default
  options, the loss in ``forward`` (what one writes without alf);
* ``hand-bv``: the same with ``gradient_as_bucket_view=True``, the option
  `make_ddp_performer` sets, to separate DDP's options from the decorator;
* ``dec``: a module whose loss method carries ``@data_distributed``, after
  ``activate_ddp`` (call-order check on, the default);
* ``dec-nochk``: the same with ``call_order_check.enabled=False``;
* ``local``: no DDP at all (each rank alone; the compute without any
  communication, for reference).

A step is forward + backward + optimizer step. Each round runs one block of
``--steps`` steps of every variant (the order rotates every round) so machine
noise hits all of them. Per variant: median, min and max of its blocks'
ms/step on rank 0; ratios are the median over rounds of the per-round ratio
(blocks of a round run back to back, so load drifts cancel) and the ratio of
the minima. Two cases: PPO's 64x64 tanh MLPs, and a ~1M-parameter pair. The
call-order check rides in the gradient all-reduce (6 extra floats), so its
cost is the difference between ``dec`` and ``dec-nochk``.
After training, ``hand`` and ``dec`` must hold the same weights (checked).

    python benchmarks/ddp_decorator_overhead.py [--blocks 20] [--steps 100] \
        [--big_steps 10] [--skip_big]
"""
import argparse
import os
import pickle
import statistics
import time

import gin
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from alf.utils import distributed
from runs import positive_int, two_gloo_ranks

OBS, ACTIONS, POOL = 64, 4, 8  # observation size, actions, batches per rank
VARIANTS = ("hand", "hand-bv", "dec", "dec-nochk", "local")


class Nets(nn.Module):
    """Actor (logits) and critic (value) tanh MLPs, like PPO's."""

    def __init__(self, hidden):
        super().__init__()

        def mlp(out):
            layers, size = [], OBS
            for h in hidden:
                layers += [nn.Linear(size, h), nn.Tanh()]
                size = h
            return nn.Sequential(*layers, nn.Linear(size, out))

        self.actor, self.critic = mlp(ACTIONS), mlp(1)

    def loss(self, obs, action, adv, ret):
        """A PPO-shaped loss: policy-gradient term + value regression."""
        logp = self.actor(obs).log_softmax(-1).gather(
            -1, action.unsqueeze(-1)).squeeze(-1)
        value = self.critic(obs).squeeze(-1)
        return -(logp * adv).mean() + 0.5 * (value - ret).square().mean()


class LossModule(nn.Module):
    """Hand-written DDP's wrapper: the loss is the forward."""

    def __init__(self, nets):
        super().__init__()
        self.nets = nets

    def forward(self, *batch):
        return self.nets.loss(*batch)


class Decorated(Nets):
    """The alf way: the loss method is data-distributed."""

    @distributed.data_distributed
    def ddp_loss(self, *batch):
        return self.loss(*batch)


def _batches(rank, batch_size):
    g = torch.Generator().manual_seed(1000 + rank)
    return [(torch.randn(batch_size, OBS, generator=g),
             torch.randint(0, ACTIONS, (batch_size, ), generator=g),
             torch.randn(batch_size, generator=g),
             torch.randn(batch_size, generator=g)) for _ in range(POOL)]


def _build(variant, hidden):
    torch.manual_seed(0)  # every variant starts from the same weights
    if variant == "local":
        nets = Nets(hidden)
        step_loss = nets.loss
    elif variant.startswith("hand"):
        nets = Nets(hidden)
        ddp = DDP(LossModule(nets),
                  gradient_as_bucket_view=variant == "hand-bv")
        step_loss = ddp
    else:
        # Bound before activation too, in case the flag is ever read then.
        gin.bind_parameter("call_order_check.enabled",
                           variant != "dec-nochk")
        nets = Decorated(hidden)
        distributed.activate_ddp(nets)
        step_loss = nets.ddp_loss
    opt = torch.optim.Adam(nets.parameters(), lr=1e-4, fused=True)
    return nets, step_loss, opt


def _run_block(variant, step_loss, opt, batches, steps):
    gin.bind_parameter("call_order_check.enabled", variant != "dec-nochk")
    dist.barrier()
    start = time.perf_counter()
    for i in range(steps):
        loss = step_loss(*batches[i % POOL])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return (time.perf_counter() - start) / steps * 1e3


def _time_collectives(reps):
    """ms per bare all-reduce of 2 and of 4 floats (gloo's ring gets slower
    from 3 elements on), and per gin lookup of the check's flag. The
    call-order check itself adds 6 floats to the first gradient bucket's
    all-reduce, so it has no collective of its own to time."""
    out = {}
    for name, fn in (("allreduce2", lambda: dist.all_reduce(torch.zeros(2))),
                     ("allreduce4", lambda: dist.all_reduce(torch.zeros(4))),
                     ("gin_lookup", distributed.call_order_check)):
        for _ in range(20):
            fn()
        samples = []
        for _ in range(5):
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            samples.append((time.perf_counter() - t0) / reps * 1e3)
        out[name] = statistics.median(samples)
    return out


def _case(rank, hidden, batch_size, blocks, steps):
    batches = _batches(rank, batch_size)
    built = {v: _build(v, hidden) for v in VARIANTS}
    nparams = sum(p.numel() for p in built["hand"][0].parameters())
    for v, (_, fn, opt) in built.items():  # warm-up, lazy DDP construction
        _run_block(v, fn, opt, batches, 10)
    times = {v: [] for v in VARIANTS}
    for b in range(blocks):
        k = b % len(VARIANTS)
        for v in VARIANTS[k:] + VARIANTS[:k]:
            _, fn, opt = built[v]
            times[v].append(_run_block(v, fn, opt, batches, steps))
    # hand and dec ran the same steps on the same data: same weights.
    diff = max((a - b).abs().max().item() for a, b in zip(
        built["hand"][0].parameters(), built["dec"][0].parameters()))
    return {"params": nparams, "times": times, "max_weight_diff": diff}


def _rank_main(rank, init_file, args, queue):
    torch.set_num_threads(1)
    result = {}
    with distributed.process_group(rank, 2, "gloo", init_file):
        result["collectives"] = _time_collectives(args.collective_reps)
        for name, hidden, steps in args.cases:
            result[name] = _case(rank, hidden, args.batch, args.blocks, steps)
    if rank == 0:
        queue.put(pickle.dumps(result))


def _hidden(text):
    return tuple(int(x) for x in text.split(","))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=positive_int, default=20,
                        help="rounds; each runs one block of every variant")
    parser.add_argument("--steps", type=int, default=100,
                        help="steps per block, small case")
    parser.add_argument("--big_steps", type=int, default=10,
                        help="steps per block, big case")
    parser.add_argument("--batch", type=positive_int, default=128,
                        help="batch size per rank")
    parser.add_argument("--small_hidden", type=_hidden, default=(64, 64))
    parser.add_argument("--big_hidden", type=_hidden, default=(512, 512, 512))
    parser.add_argument("--collective_reps", type=int, default=500)
    parser.add_argument("--skip_big", action="store_true")
    args = parser.parse_args()
    args.cases = [("small", args.small_hidden, args.steps)]
    if not args.skip_big:
        args.cases.append(("big", args.big_hidden, args.big_steps))

    print(f"load before: {os.getloadavg()[0]:.2f} (1 min), "
          f"{os.getloadavg()[1]:.2f} (5 min); {os.cpu_count()} cores")
    result = pickle.loads(two_gloo_ranks(_rank_main, args))
    print(f"load after: {os.getloadavg()[0]:.2f} (1 min), "
          f"{os.getloadavg()[1]:.2f} (5 min)")

    c = result["collectives"]
    print(f"\n2 gloo ranks, 1 torch thread each, batch {args.batch}/rank")
    print(f"bare all-reduce of "
          f"2 floats: {c['allreduce2']:.3f} ms, of 4 floats: "
          f"{c['allreduce4']:.3f} ms; gin lookup "
          f"call_order_check(): {c['gin_lookup'] * 1e3:.1f} us")
    for name, hidden, steps in args.cases:
        r = result[name]
        t = r["times"]
        med = {v: statistics.median(x) for v, x in t.items()}

        def ratio(a, b):
            """Median over rounds of a/b (blocks of one round are adjacent
            in time, so slow drifts of the load cancel) and ratio of mins."""
            return (statistics.median(x / y for x, y in zip(t[a], t[b])),
                    min(t[a]) / min(t[b]))

        print(f"\ncase {name}: hidden {hidden} x2 nets, {r['params']:,} "
              f"params, {args.blocks} rounds x {steps} steps per variant")
        print(f"{'variant':10s} {'median ms/step':>15s} {'min':>8s} "
              f"{'max':>8s} {'/hand (paired median)':>22s} "
              f"{'/hand (mins)':>13s}")
        for v in VARIANTS:
            pm, mn = ratio(v, "hand")
            print(f"{v:10s} {med[v]:15.3f} {min(t[v]):8.3f} {max(t[v]):8.3f} "
                  f"{pm:22.3f} {mn:13.3f}")
        on, off = ratio("dec", "hand"), ratio("dec-nochk", "hand")
        bv, bv_on = ratio("dec-nochk", "hand-bv"), ratio("dec", "hand-bv")
        print(f"decorated/hand-written: {on[0]:.3f} (check on), {off[0]:.3f} "
              f"(check off); against hand-bv (same DDP options): "
              f"{bv_on[0]:.3f} (check on), {bv[0]:.3f} (check off); goal "
              f"<= 1.03 (paired medians)")
        chk = [(a - b) / a for a, b in zip(t["dec"], t["dec-nochk"])]
        print(f"call-order check: {statistics.median(chk) * 100:+.1f}% of a "
              f"decorated step (paired median; mins: "
              f"{(1 - min(t['dec-nochk']) / min(t['dec'])) * 100:+.1f}%); "
              f"goal < 2% for small networks")
        comm = 1 - ratio("local", "hand")[0]
        print(f"communication share of a hand-written DDP step: "
              f"{comm * 100:.0f}% (local step, median {med['local']:.3f} ms, "
              f"min {min(t['local']):.3f} ms)")
        print(f"hand vs dec weights after training: max abs diff "
              f"{r['max_weight_diff']:.2e}")


if __name__ == "__main__":
    main()
