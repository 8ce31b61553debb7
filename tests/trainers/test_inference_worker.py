"""An inference worker's loop, driven over real pipes from this process:
batching, the acting policy's log-probabilities, the version bound."""
import multiprocessing as mp
import threading
import time

import gymnasium as gym
import numpy as np
import pytest
import torch

from alf.algorithms.ppo_algorithm import PPOAlgorithm
from alf.trainers.actor import decode, encode
from alf.trainers.inference_worker import (InferenceWorkerDied, RemotePolicy,
                                           _serve)
from alf.trainers.trainer_config import TrainerConfig

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def served():
    """A worker's `_serve` in a thread at version 0, 3 actors' pipes, the
    learner's pipe and the algorithm it serves (a copy of the learner's)."""
    torch.manual_seed(0)
    cfg = TrainerConfig(algorithm_ctor=PPOAlgorithm, num_envs=3)
    alg = PPOAlgorithm(gym.spaces.Box(-1, 1, (4, ), np.float32),
                       gym.spaces.Discrete(3), cfg)
    learner, worker_end = mp.Pipe()
    pipes = [mp.Pipe() for _ in range(3)]

    def serve():
        with torch.inference_mode():  # as in the worker's process
            _serve(worker_end, [w for _, w in pipes], alg, 0)

    thread = threading.Thread(target=serve, daemon=True)
    yield thread, learner, [a for a, _ in pipes], alg
    learner.send_bytes(encode(("stop", )))
    thread.join(10)
    assert not thread.is_alive()


def test_ready_requests_are_acted_on_in_one_batch(served):
    thread, _, actors, alg = served
    obs = [torch.randn(n, 4) for n in (1, 2, 1)]  # an actor may send a few
    for conn, o in zip(actors, obs):
        conn.send_bytes(encode(("act", 0, o)))
    thread.start()  # all three are waiting when it first looks
    for conn, o in zip(actors, obs):
        version, action, log_prob, batch, held, cpu = decode(
            conn.recv_bytes())
        assert version == 0 and batch == 3 and held == 0.0 and cpu >= 0
        assert action.shape == (o.shape[0], )
        with torch.no_grad():
            expect = alg.actor(o).log_prob(action)
        torch.testing.assert_close(log_prob, expect)


def test_a_request_waits_for_the_version_it_needs(served):
    thread, learner, actors, alg = served
    thread.start()
    actors[0].send_bytes(encode(("act", 1, torch.randn(1, 4))))
    actors[1].send_bytes(encode(("act", 0, torch.randn(1, 4))))
    assert decode(actors[1].recv_bytes())[0] == 0  # served at once
    assert not actors[0].poll(0.3)  # held: version 0 < 1
    with torch.no_grad():
        for p in alg.actor.parameters():
            p.add_(1.0)
    learner.send_bytes(encode(("state", 1, alg.acting_state())))
    version, _, _, batch, held, _ = decode(actors[0].recv_bytes())
    assert version == 1 and batch == 1 and held >= 0.3


def test_an_actor_whose_worker_is_gone_says_so():
    mine, theirs = mp.Pipe()
    theirs.close()
    with pytest.raises(InferenceWorkerDied, match="inference worker"):
        RemotePolicy(mine).act(torch.zeros(1, 4), 0)


def test_the_worker_ends_when_its_actors_have_all_gone(served):
    thread, _, actors, _ = served
    thread.start()
    for conn in actors:
        conn.close()
    deadline = time.time() + 10
    while thread.is_alive() and time.time() < deadline:
        time.sleep(0.05)
    assert not thread.is_alive()
