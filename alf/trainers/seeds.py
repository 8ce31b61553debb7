"""Which seed each random stream of a training run gets.

Every stream derives from ``TrainerConfig.seed``:

* the initial weights: the seed itself, on every rank (DDP also broadcasts
  them);
* the learner's torch RNG (sampling actions, shuffling minibatches):
  `learner_torch_seed`, different per rank and per resume;
* the environments: `env_seed`, a block of consecutive seeds per rank,
  moved on at every resume;
* the asynchronous collector's actors: `actor_torch_seed`;
* evaluation: `eval_seed`, the same at every evaluation so that all of a
  run's evaluations play the same episode starts.

The strides below are primes, larger than the offsets they separate in the
runs alf targets (thousands of iterations between resumes, tens of ranks,
hundreds of environments), so that two streams of a run do not get the same
seed; the one exception is that a rank's first actor shares its learner's
seed (see `ACTOR_TORCH_SEED_STRIDE`). Their values are frozen: changing one
changes the episodes and samples of every run with a given seed, so earlier
runs (and benchmarks/metadrive_baselines.py's evaluation episodes) would no
longer reproduce.
"""

#: Between the environment seeds of consecutive resume iterations: a run
#: resumed at iteration k resets its environments ``k * ENV_SEED_STRIDE``
#: further on, so it does not replay the first run's episode starts. The
#: first prime above 10^4: above the ``world_size * num_envs`` consecutive
#: seeds one start uses.
ENV_SEED_STRIDE = 10_007

#: Between the learner torch seeds of consecutive ``TrainerConfig.seed``
#: values (the iteration and rank offsets are added to it). The same prime
#: as `ENV_SEED_STRIDE` by history; nothing requires them to be equal.
TORCH_SEED_STRIDE = 10_007

#: Between the ranks' learner torch seeds: the 1000th prime, above the
#: number of iterations between resumes, which also moves the seed.
RANK_TORCH_SEED_STRIDE = 7_919

#: Between the torch seeds of one rank's actors (asynchronous collection):
#: the 10000th prime, never a multiple of `RANK_TORCH_SEED_STRIDE`, so that
#: no actor draws another rank's learner's or actors' stream. Actor 0 gets
#: its learner's own seed (in another process: the actor samples actions
#: with it, the learner shuffles minibatches).
ACTOR_TORCH_SEED_STRIDE = 104_729

#: Added to ``TrainerConfig.seed`` for evaluation: the first prime above
#: 10^6, away from the training environments' seeds (those of a run resumed
#: near iteration 100 come closest), so that evaluation does not replay
#: training's episode starts.
EVAL_SEED_OFFSET = 1_000_003


def learner_torch_seed(seed: int, iteration: int, rank: int) -> int:
    """The torch seed of ``rank``'s learner for a run (re)started at
    ``iteration``.

    The ``+ 1`` keeps it apart from the weights' seed (``seed`` itself)
    when everything else is 0.
    """
    return (seed * TORCH_SEED_STRIDE + iteration +
            rank * RANK_TORCH_SEED_STRIDE + 1)


def env_seed(seed: int, iteration: int, rank: int, num_envs: int) -> int:
    """The seed of ``rank``'s first environment (env ``i`` gets this
    ``+ i``) for a run (re)started at ``iteration``; ``num_envs`` is the
    environments per rank, so the ranks' blocks follow one another."""
    return seed + ENV_SEED_STRIDE * iteration + rank * num_envs


def actor_torch_seed(learner_seed: int, actor: int) -> int:
    """The torch seed of a rank's ``actor``-th actor process, from that
    rank's `learner_torch_seed`."""
    return learner_seed + ACTOR_TORCH_SEED_STRIDE * actor


def eval_seed(seed: int) -> int:
    """The seed every evaluation resets its environments and sampling
    with."""
    return seed + EVAL_SEED_OFFSET
