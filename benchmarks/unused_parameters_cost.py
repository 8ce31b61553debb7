r"""Cost of ``make_ddp_performer.find_unused_parameters`` 'auto' (the
default) against False and True, 2 gloo processes.

'auto' runs the first call of each data-distributed method outside DDP,
walks its output's autograd graph and all-reduces which parameters it left
without gradient (once per method); only if some are left does it turn on
DDP's own per-call search (True). After the first calls it should cost what
False costs for an algorithm whose methods use every parameter (PPO), and
what True costs for one whose methods do not (an actor loss and a critic
loss). Two modes:

* ``--mode train`` (default): trains a config once per variant per repeat
  (the order reverses every repeat, so load drifts hit all of them) and
  compares the trainer's env steps/s (its last progress line: training
  only) with the first variant's;
* ``--mode calls``: 2 ranks in one process group time steps (forward,
  backward, Adam) of PPO's 64x64 actor and critic in blocks, every variant
  in every round (rotating order): one PPO-shaped loss using every
  parameter (auto, False, True), and an actor loss and a critic loss with
  their own backward (auto, True); plus the first call's cost under 'auto'.
  Short blocks, many rounds: on a shared machine the load changes within
  seconds, and paired ratios of adjacent blocks cancel it.

    python benchmarks/unused_parameters_cost.py [--repeats 3] \
        [--num_env_steps 50000] [--variants auto,False,True]
    PYTHONPATH=tests/bin python benchmarks/unused_parameters_cost.py \
        --gin_file tests/bin/two_loss_a2c.gin --variants auto,True
    python benchmarks/unused_parameters_cost.py --mode calls [--blocks 150]
"""
import argparse
import os
import pickle
import statistics
import tempfile
import time

import gin
import torch
import torch.distributed as dist

from alf.utils import distributed
from ddp_decorator_overhead import POOL, Nets, _batches
from runs import throughput_params, train_throughput, two_gloo_ranks


# ---- --mode train -----------------------------------------------------------
def train_mode(args):
    gin_files = args.gin_file or ["ppo_cart_pole.gin"]
    params = throughput_params(args.num_env_steps) + args.gin_param
    names = args.variants.split(",")
    binding = {v: ["make_ddp_performer.find_unused_parameters=" +
                   (repr(v) if v == "auto" else v)] for v in names}
    print(f"config: {' '.join(gin_files)} {' '.join(params)}; "
          f"{args.num_processes} processes")
    print(f"load before: {os.getloadavg()[0]:.2f} (1 min); "
          f"{os.cpu_count()} cores", flush=True)
    rates = {v: [] for v in names}
    with tempfile.TemporaryDirectory(prefix="alf-unused-cost-") as root:
        for rep in range(args.repeats):
            for v in (names if rep % 2 == 0 else names[::-1]):
                r = train_throughput(gin_files, params + binding[v],
                                     os.path.join(root, f"{v}-r{rep}"),
                                     num_processes=args.num_processes)
                rates[v].append(r["rate"])
                print(f"{v:6s} repeat {rep}: {r['rate']:7.0f} env steps/s; "
                      f"load {os.getloadavg()[0]:.2f}", flush=True)
    print(f"load after: {os.getloadavg()[0]:.2f} (1 min)\n")
    ref = names[0]
    for v in names:
        per_rep = [a / b - 1 for a, b in zip(rates[v], rates[ref])]
        print(f"{v:6s} mean {statistics.mean(rates[v]):7.0f} env steps/s "
              f"(median {statistics.median(rates[v]):.0f}); vs {ref} per "
              "repeat: " + ", ".join(f"{d * 100:+.1f}%" for d in per_rep))


# ---- --mode calls -----------------------------------------------------------
class OneLoss(Nets):
    """PPO's shape: one loss, every parameter used."""

    @distributed.data_distributed
    def ddp_loss(self, *batch):
        return self.loss(*batch)

    def step(self, opt, batch):
        loss = self.ddp_loss(*batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


class TwoLosses(Nets):
    """An actor loss and a critic loss, each leaving the other unused."""

    @distributed.data_distributed
    def actor_loss(self, obs, action, adv, ret):
        logp = self.actor(obs).log_softmax(-1).gather(
            -1, action.unsqueeze(-1)).squeeze(-1)
        return -(logp * adv).mean()

    @distributed.data_distributed
    def critic_loss(self, obs, action, adv, ret):
        return 0.5 * (self.critic(obs).squeeze(-1) - ret).square().mean()

    def step(self, opt, batch):
        for loss in (self.actor_loss, self.critic_loss):
            out = loss(*batch)
            opt.zero_grad(set_to_none=True)
            out.backward()
            opt.step()


CASES = {"one loss": (OneLoss, ("auto", False, True)),
         "two losses": (TwoLosses, ("auto", True))}


def _block(model, opt, batches, steps):
    dist.barrier()
    start = time.perf_counter()
    for i in range(steps):
        model.step(opt, batches[i % POOL])
    return (time.perf_counter() - start) / steps * 1e3


def _calls_rank(rank, init_file, args, queue):
    torch.set_num_threads(1)
    result = {}
    with distributed.process_group(rank, 2, "gloo", init_file):
        batches = _batches(rank, args.batch)
        for case, (cls, variants) in CASES.items():
            built, first = {}, {}
            for v in variants:
                gin.bind_parameter(
                    "make_ddp_performer.find_unused_parameters", v)
                torch.manual_seed(0)
                model = cls((64, 64))
                distributed.activate_ddp(model)
                opt = torch.optim.Adam(model.parameters(), lr=1e-4)
                dist.barrier()
                t0 = time.perf_counter()  # the first step builds DDP
                model.step(opt, batches[0])
                first[v] = (time.perf_counter() - t0) * 1e3
                _block(model, opt, batches, 10)  # warm-up
                built[v] = (model, opt)
            times = {v: [] for v in variants}
            for b in range(args.blocks):
                k = b % len(variants)
                for v in variants[k:] + variants[:k]:
                    times[v].append(_block(*built[v], batches, args.steps))
            result[case] = {"times": times, "first": first}
    if rank == 0:
        queue.put(pickle.dumps(result))


def calls_mode(args):
    print(f"load before: {os.getloadavg()[0]:.2f} (1 min); "
          f"{os.cpu_count()} cores", flush=True)
    result = pickle.loads(two_gloo_ranks(_calls_rank, args))
    print(f"load after: {os.getloadavg()[0]:.2f} (1 min)")
    print(f"\n2 gloo ranks, 1 torch thread each, 64x64 actor and critic, "
          f"batch {args.batch}/rank, {args.blocks} rounds x {args.steps} "
          "steps per variant")
    for case, r in result.items():
        t = r["times"]
        print(f"\n{case}:")
        print(f"{'variant':8s} {'median ms/step':>15s} {'min':>8s} "
              f"{'/auto (paired median)':>22s} {'/auto (mins)':>13s} "
              f"{'first step ms':>14s}")
        for v in t:
            paired = statistics.median(a / b for a, b in zip(t[v], t["auto"]))
            print(f"{str(v):8s} {statistics.median(t[v]):15.3f} "
                  f"{min(t[v]):8.3f} {paired:22.3f} "
                  f"{min(t[v]) / min(t['auto']):13.3f} "
                  f"{r['first'][v]:14.1f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("train", "calls"),
                        default="train")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--num_env_steps", type=int, default=50_000)
    parser.add_argument("--num_processes", type=int, default=2)
    parser.add_argument("--variants", default="auto,False,True",
                        help="train mode: values of find_unused_parameters, "
                        "the first is the reference")
    parser.add_argument("--gin_file", action="append", default=None,
                        help="train mode; default: ppo_cart_pole.gin")
    parser.add_argument("--gin_param", action="append", default=[])
    parser.add_argument("--blocks", type=int, default=150,
                        help="calls mode: rounds, each one block per variant")
    parser.add_argument("--steps", type=int, default=20,
                        help="calls mode: steps per block")
    parser.add_argument("--batch", type=int, default=128,
                        help="calls mode: batch size per rank")
    args = parser.parse_args()
    (train_mode if args.mode == "train" else calls_mode)(args)


if __name__ == "__main__":
    main()
