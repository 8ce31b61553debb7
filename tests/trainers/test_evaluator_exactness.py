"""The evaluator's exactness: an episode scores what a replay of it alone
scores (as ``alf.bin.play`` plays it), whichever environment, batch or
queue position plays it, deterministic or sampling, gSDE included."""
import gymnasium as gym
import numpy as np
import pytest
import torch

from alf.data_structures import AlgStep
from alf.environments import suite_gym
from alf.trainers.evaluator import Evaluator, evaluate_together


class _Drift(gym.Env):
    """Continuous actions, episodes of ``length`` steps. The reward is made
    of the actions' last bits (a difference of one in the last place of an
    action changes it by ~0.1), so two plays of an episode return the same
    only if they acted alike to the last bit, as a simulator such as
    MetaDrive needs to drive the same episode."""

    observation_space = gym.spaces.Box(-1, 1, (64, ), np.float32)
    action_space = gym.spaces.Box(-1, 1, (3, ), np.float32)

    def __init__(self, length):
        self.length = length

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def _obs(self):
        return self.np_random.uniform(-1, 1, 64).astype(np.float32)

    def step(self, action):
        self.t += 1
        bits = (np.asarray(action, np.float64) * 2.0**22) % 1.0
        return (self._obs(), float(bits.sum()), self.t == self.length,
                False, {})


class _Mlp:
    """A policy whose matrix products round differently in batches of
    different sizes (as alf's networks do on CPU)."""

    def __init__(self):
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(64, 256), torch.nn.Tanh(),
            torch.nn.Linear(256, 256), torch.nn.Tanh(),
            torch.nn.Linear(256, 3))

    def observe(self, obs, update=True):
        return obs

    def predict_step(self, obs):
        return AlgStep(output=self.net(obs))

    def rollout_step(self, obs):
        mean = self.net(obs)
        return AlgStep(output=mean + 0.1 * torch.randn_like(mean))


def _drift_groups(lengths):
    return [suite_gym.GymEnvironment(gym.vector.SyncVectorEnv(
        [lambda n=n: _Drift(n)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)) for n in lengths]


@torch.inference_mode()
def _replay(policy, length, seed, sampling):
    """One episode in one environment, as ``alf.bin.play`` plays it."""
    env = _drift_groups([length])[0]
    ts = env.reset(seed=seed)
    if sampling:
        torch.manual_seed(seed)
    total = torch.zeros(1)  # the evaluator's precision
    while True:
        obs = policy.observe(ts.observation, update=False)
        action = (policy.rollout_step(obs) if sampling
                  else policy.predict_step(obs)).output
        ts = env.step(action)
        total += ts.reward
        if bool(ts.done[0]):
            return total.item()


def _returns(evaluators, policy, monkeypatch):
    """Per evaluator, its episodes' returns (not only their mean)."""
    import alf.trainers.evaluator as ev
    seen = []
    play = ev._play_sets

    def spy(*args):
        out = play(*args)
        seen.append(sum((returns.tolist() for returns, _, _ in out), []))
        return out

    monkeypatch.setattr(ev, "_play_sets", spy)
    evaluate_together(evaluators, policy)
    return seen


@pytest.mark.parametrize("sampling", [False, True])
def test_an_episode_scores_what_a_replay_of_it_alone_scores(sampling,
                                                            monkeypatch):
    """Episodes of different lengths (so the batch of episodes still playing
    shrinks), a held-out set beside them, and each one's return to the last
    bit equal to a replay of that episode alone in one environment. Acting
    for the whole batch at once fails this: the sums differ in their last
    digits."""
    policy = _Mlp()
    train_lengths, held_lengths = [3, 17, 9, 30], [25, 4, 12]
    train = Evaluator(_drift_groups(train_lengths), seed=3,
                      deterministic=not sampling)
    held = Evaluator(_drift_groups(held_lengths), seed=40,
                     deterministic=not sampling)
    (together, ) = _returns([train, held], policy, monkeypatch)
    replays = ([_replay(policy, n, 3 + e, sampling)
                for e, n in enumerate(train_lengths)] +
               [_replay(policy, n, 40 + e, sampling)
                for e, n in enumerate(held_lengths)])
    assert together == replays
    (alone, ) = _returns([Evaluator(_drift_groups(train_lengths), seed=3,
                                    deterministic=not sampling)], policy,
                         monkeypatch)
    assert alone == together[:4]


class _Gsde(torch.nn.Module):
    """A sampling policy whose noise is carried from sample to sample
    (gSDE: new draws every 4 samples)."""

    def __init__(self):
        super().__init__()
        from alf.networks.actor import ActorDistributionNetwork
        torch.manual_seed(1)
        self.actor = ActorDistributionNetwork(
            _Drift.observation_space, _Drift.action_space,
            hidden_sizes=(32, ), gsde_interval=4)

    def observe(self, obs, update=True):
        return obs

    def rollout_step(self, obs):
        return AlgStep(output=self.actor(obs).sample())


def test_gsde_episodes_keep_their_own_noise_and_trainings(monkeypatch):
    """Each episode starts gSDE's draws afresh and keeps its own between
    samples, as a replay of it alone does; training's draws (a batch of
    another size) are where they were after the evaluation."""
    policy = _Gsde()
    lengths = [6, 11, 3]
    with torch.inference_mode():
        policy.rollout_step(torch.zeros(5, 64))  # training's draws
    before = policy.actor.noise_state()
    evaluator = Evaluator(_drift_groups(lengths), seed=8,
                          deterministic=False)
    (returns, ) = _returns([evaluator], policy, monkeypatch)
    after = policy.actor.noise_state()
    assert after[0] is before[0] and after[1] == before[1]

    def replay(n, seed):
        policy.actor.set_noise_state(None)
        return _replay(policy, n, seed, sampling=True)

    assert returns == [replay(n, 8 + e) for e, n in enumerate(lengths)]
