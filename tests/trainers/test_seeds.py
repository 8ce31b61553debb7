"""Tests of alf/trainers/seeds.py: the seeds are frozen (runs reproduce
across versions) and the streams of a run do not share a seed."""
import itertools

from alf.trainers import seeds


def test_seeds_are_those_every_earlier_run_used():
    # Changing any of these changes every run's episodes and samples.
    assert seeds.learner_torch_seed(0, 0, 0) == 1
    assert seeds.learner_torch_seed(2, 5, 3) == 2 * 10_007 + 5 + 3 * 7_919 + 1
    assert seeds.env_seed(2, 5, 3, 8) == 2 + 10_007 * 5 + 3 * 8
    assert seeds.actor_torch_seed(11, 2) == 11 + 2 * 104_729
    assert seeds.eval_seed(2) == 2 + 1_000_003


def test_streams_of_a_run_get_different_seeds():
    """For a run of 16 ranks of 64 environments and 4 actors each, resumed
    at any of its first 200 iterations: no two environments, no two
    learners or actors, and no environment and evaluation share a seed;
    a rank's actor 0 shares its learner's seed (as documented)."""
    ranks, num_envs, actors, iterations, num_eval = 16, 64, 4, 200, 100
    for seed in (0, 7):
        envs = [seeds.env_seed(seed, k, r, num_envs) + i
                for k, r, i in itertools.product(range(iterations),
                                                 range(ranks),
                                                 range(num_envs))]
        assert len(set(envs)) == len(envs)
        evals = {seeds.eval_seed(seed) + i for i in range(num_eval)}
        assert not evals & set(envs)
        learners = [seeds.learner_torch_seed(seed, k, r)
                    for k, r in itertools.product(range(iterations),
                                                  range(ranks))]
        assert seeds.actor_torch_seed(learners[5], 0) == learners[5]
        torch_seeds = learners + [seeds.actor_torch_seed(s, a)
                                  for s in learners
                                  for a in range(1, actors)]
        assert len(set(torch_seeds)) == len(torch_seeds)
        assert seed not in torch_seeds  # the weights' seed
