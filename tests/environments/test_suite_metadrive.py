"""`alf.environments.suite_metadrive` with real MetaDrive workers.

Every test runs without network access: the workers inherit proxy settings
that point at a closed port, so a worker that tried to download MetaDrive's
assets would fail. Episodes are cut at `HORIZON` steps. The loads share one
configuration, so the spaces are read (in a throwaway process) only once.
"""
import contextlib
import importlib.util
import math
import os
import signal

import numpy as np
import pytest
import torch

# Like pytest.importorskip("metadrive"), without importing MetaDrive into
# this process (4 s and 0.45 GB; only the workers need it).
METADRIVE = importlib.util.find_spec("metadrive")
if METADRIVE is None:
    pytest.skip("metadrive-simulator is not installed",
                allow_module_level=True)

import gymnasium as gym  # noqa: E402

from alf.environments import suite_metadrive  # noqa: E402
from alf.environments.env_fn import evaluation_environments  # noqa: E402
from alf.environments.metadrive_env_fn import (  # noqa: E402
    CRASH_END, MEAN_SPEED, GraphicsLibraryMissingError, ScenarioSampling,
    make_env, missing_graphics_library)
from alf.utils.errors import AlfError  # noqa: E402

pytestmark = pytest.mark.timeout(120)

HORIZON = 25
OBS_SIZE = 259
START, NUM_SCENARIOS = 100, 10
CONFIG = dict(horizon=HORIZON, start_seed=START, num_scenarios=NUM_SCENARIOS,
              traffic_density=0.1)
NO_NETWORK = {"HTTP_PROXY": "http://127.0.0.1:9",
              "HTTPS_PROXY": "http://127.0.0.1:9",
              "http_proxy": "http://127.0.0.1:9",
              "https_proxy": "http://127.0.0.1:9"}


@pytest.fixture(scope="module", autouse=True)
def no_network():
    with pytest.MonkeyPatch.context() as mp:
        for k, v in NO_NETWORK.items():
            mp.setenv(k, v)
        yield


def _random_actions(n: int, generator: torch.Generator) -> torch.Tensor:
    return torch.rand(n, 2, generator=generator) * 2 - 1


def _sigint_ignored(pid: int) -> bool:
    with open(f"/proc/{pid}/status") as f:
        line = next(ln for ln in f if ln.startswith("SigIgn:"))
    return bool(int(line.split()[1], 16) & (1 << (signal.SIGINT - 1)))


def _close_and_check_reaped(env) -> None:
    processes = list(env._env.processes)
    env.close()
    for p in processes:
        p.join(timeout=10)
        assert p.exitcode is not None, f"worker {p.pid} still running"


@pytest.fixture(scope="module")
def env2():
    handler = signal.getsignal(signal.SIGINT)
    env = suite_metadrive.load(num_envs=2, seed=0, **CONFIG)
    # Building the envs leaves this process's Ctrl-C handling alone.
    assert signal.getsignal(signal.SIGINT) is handler
    yield env
    _close_and_check_reaped(env)


def test_smoke(env2):
    """Spaces, observations and rewards through two worker processes (one
    environment is what the MetaDrive config test trains with)."""
    assert env2.num_envs == 2
    assert env2.observation_space.shape == (OBS_SIZE, )
    assert env2.observation_space.dtype == np.float32
    assert env2.action_space.shape == (2, )
    assert env2.episode_info == tuple(suite_metadrive.EPISODE_INFO)
    ts = env2.reset(seed=11)
    assert ts.observation.shape == (2, OBS_SIZE)
    assert ts.observation.dtype == torch.float32
    g = torch.Generator().manual_seed(1)
    rewards = []
    for _ in range(20):
        ts = env2.step(_random_actions(2, g))
        assert ts.observation.shape == (2, OBS_SIZE)
        assert ts.observation.dtype == torch.float32
        assert ((ts.observation >= 0) & (ts.observation <= 1)).all()
        assert ts.reward.shape == (2, ) and ts.reward.dtype == torch.float32
        assert ts.terminated.dtype == torch.bool
        rewards.append(ts.reward)
    rewards = torch.stack(rewards)
    assert torch.isfinite(rewards).all()
    # A random car moves a little: some reward, far below 1 per step.
    assert rewards.abs().sum() > 0 and rewards.abs().max() < 1
    # Ctrl-C reaches the process that owns the workers, not the workers.
    assert all(_sigint_ignored(p.pid) for p in env2._env.processes)


def test_a_scenario_replays_exactly_after_other_episodes():
    """MetaDrive reuses the objects of earlier episodes unless it destroys
    them (``force_destroy``, alf's default for evaluation): scenario 3
    driven again after other scenarios must see the same observations, bit
    for bit (without it they differ by ~1e-7 within 70 steps, and grow)."""
    with evaluation_environments():
        env = suite_metadrive.load(num_envs=1, seed=0,
                                   **dict(CONFIG, horizon=150))

    def drive(seed):
        observations = [env.reset(seed=seed).observation]
        for i in range(150):
            ts = env.step(torch.tensor([[0.02 * math.sin(i / 10), 0.6]]))
            if ts.done.any():
                break
            observations.append(ts.observation)
        return torch.cat(observations)

    try:
        first = drive(3)
        drive(7)
        drive(1)
        again = drive(3)
        assert len(first) > 20 and torch.equal(again, first)
    finally:
        _close_and_check_reaped(env)


def _until_done(env, actions):
    """Steps with ``actions(i)`` until some environment's episode ends."""
    for i in range(HORIZON + 1):
        ts = env.step(actions(i))
        if ts.done.any():
            return i + 1, ts
    raise AssertionError(f"no episode ended within {HORIZON + 1} steps")


def test_horizon_truncates_with_final_observation(env2):
    env2.reset(seed=5)
    # Full brake: the car stays on its spawn point, so only the horizon
    # ends the episodes.
    brake = torch.tensor([[0.0, -1.0]] * 2)
    steps, ts = _until_done(env2, lambda i: brake)
    assert steps == HORIZON
    assert ts.truncated.all() and not ts.terminated.any()
    assert ts.final_observation.shape == (2, OBS_SIZE)
    # `observation` starts the next episode; `final_observation` is the
    # last one of the truncated episode.
    assert not torch.equal(ts.final_observation, ts.observation)
    info = ts.episode_info
    assert set(info) == set(suite_metadrive.EPISODE_INFO)
    for name in ("success_rate", "crash_rate", "out_of_road_rate"):
        assert info[name].tolist() == [0.0, 0.0], name
    assert ((info["route_completion"] > -0.1) &
            (info["route_completion"] < 0.1)).all()
    # A braking car barely moves (it spawns at a few km/h).
    assert ((info["mean_speed_kmh"] >= 0) &
            (info["mean_speed_kmh"] < 5)).all()


def test_episode_info_only_at_episode_ends(env2):
    env2.reset(seed=8)
    g = torch.Generator().manual_seed(2)
    ended = 0
    for _ in range(HORIZON + 2):
        ts = env2.step(_random_actions(2, g))
        for name, value in ts.episode_info.items():
            assert torch.isfinite(value[ts.done]).all(), name
            assert torch.isnan(value[~ts.done]).all(), name
        ended += int(ts.done.sum())
    assert ended >= 2


def _scenarios(env, seed):
    """Scenario index of each environment after ``reset(seed=seed)``."""
    _, info = env._env.reset(seed=seed)
    return info["env_seed"].tolist()


def test_seeds_pick_scenarios_reproducibly(env2):
    a = env2.reset(seed=5).observation
    assert torch.equal(a, env2.reset(seed=5).observation)
    first = _scenarios(env2, 5)
    assert first == _scenarios(env2, 5)
    # Environment i gets seed + i: env 0 at seed 6 is env 1 at seed 5,
    # although another process runs it.
    assert _scenarios(env2, 6)[0] == first[1]
    drawn = sum((_scenarios(env2, s) for s in range(5)), [])
    assert all(START <= d < START + NUM_SCENARIOS for d in drawn), drawn
    # Different seeds, different scenarios (10 scenarios; these seeds draw
    # at least four distinct ones).
    assert len(set(drawn)) >= 4, drawn


def test_autoreset_continues_the_seeded_sequence(env2):
    brake = torch.tensor([[0.0, -1.0]] * 2)

    def second_episode_start():
        env2.reset(seed=21)
        _, ts = _until_done(env2, lambda i: brake)
        assert ts.done.all()
        return ts.observation

    first = second_episode_start()
    assert torch.equal(first, second_episode_start())


def test_topdown_observation():
    env = suite_metadrive.load(num_envs=1, seed=0, observation="topdown",
                               topdown_resolution=48, **CONFIG)
    try:
        assert env.observation_space.shape == (48, 48, 5)
        ts = env.reset()
        g = torch.Generator().manual_seed(3)
        for _ in range(5):
            ts = env.step(_random_actions(1, g))
        obs = ts.observation
        assert obs.shape == (1, 48, 48, 5) and obs.dtype == torch.float32
        assert ((obs >= 0) & (obs <= 1)).all()
        assert obs[0, ..., 0].max() > 0  # the road is drawn
    finally:
        _close_and_check_reaped(env)


def _observe_with_and_without_previous_action(actions):
    """Both loads, in one process that holds its engines itself (as an
    actor does): one MetaDrive import, no throwaway description."""
    from alf.environments import env_fn
    env_fn.set_environment_process()
    shapes, observations = {}, {}
    for observe in (True, False):
        env = suite_metadrive.load(num_envs=1, seed=0,
                                   observe_previous_action=observe, **CONFIG)
        try:
            shapes[observe] = env.observation_space.shape
            env.reset(seed=7)
            observations[observe] = [env.step(a[None]).observation[0]
                                     for a in actions]
        finally:
            env.close()
    return shapes, observations


def test_previous_action_left_out_of_the_state_observation():
    """The same seed and actions give the full observation less its two
    previous-action floats; with it, they are the last action, scaled to
    [0, 1]."""
    import concurrent.futures
    import multiprocessing
    actions = torch.tensor([[0.5, 0.3], [-0.8, 1.0], [0.2, -0.6]])
    with concurrent.futures.ProcessPoolExecutor(
            1, mp_context=multiprocessing.get_context("spawn")) as pool:
        shapes, observations = pool.submit(
            _observe_with_and_without_previous_action, actions).result(
                timeout=100)
    assert shapes == {True: (OBS_SIZE, ), False: (OBS_SIZE - 2, )}
    keep = [i for i in range(OBS_SIZE) if i not in (5, 6)]
    for a, full, omitted in zip(actions, observations[True],
                                observations[False]):
        torch.testing.assert_close(full[5:7], (a + 1) / 2)
        assert torch.equal(full[keep], omitted)


def test_one_description_serves_every_scenario_range():
    """Training, evaluation and held-out environments differ only in what
    picks scenarios and ends episodes: one throwaway process describes
    them all. What shapes an observation keeps its own description."""
    from alf.environments.metadrive_env_fn import MetaDriveEnvFn
    state, _ = suite_metadrive.OBSERVATIONS["state"]
    topdown, _ = suite_metadrive.OBSERVATIONS["topdown"]

    def key(env_class=state, observe_previous_action=True, **config):
        return suite_metadrive._description_key(MetaDriveEnvFn(
            env_class, dict(CONFIG, **config),
            observe_previous_action=observe_previous_action))

    training = key(start_seed=1000, num_scenarios=10, force_destroy=False,
                   map=3)
    assert key(start_seed=0, num_scenarios=200, force_destroy=True,
               traffic_density=0.3, horizon=1000, map=4) == training
    assert key(observe_previous_action=False) != training
    assert key(env_class=topdown, resolution_size=48) != training
    assert key(env_class=topdown, resolution_size=48) != key(
        env_class=topdown, resolution_size=84)
    assert key(vehicle_config={"lidar": {"num_lasers": 72}}) != training
    # A mistyped value is described anew (MetaDrive names it, one line).
    assert key(start_seed="1000") != training


def test_bad_arguments():
    with pytest.raises(AlfError, match="unknown MetaDrive environment"):
        suite_metadrive.load(env_name="CARLA")
    with pytest.raises(AlfError, match="unknown MetaDrive observation.*"
                       "state"):
        suite_metadrive.load(observation="rgb")
    with pytest.raises(AlfError, match="observe_previous_action=False "
                       "applies to the 'state' observation"):
        suite_metadrive.load(observation="topdown",
                             observe_previous_action=False)


def test_an_actor_with_more_than_one_environment_names_the_setting(
        monkeypatch):
    """An actor process (daemonic) cannot start engine workers: more
    than one environment there is refused with the setting to change,
    not a multiprocessing error from deep inside the loader."""
    from alf.environments import env_fn
    monkeypatch.setattr(env_fn, "_environment_process", True)
    with pytest.raises(AlfError, match="not 2; set "
                       "TrainerConfig.envs_per_actor=1"):
        suite_metadrive.load(num_envs=2)


class _Built(Exception):
    pass


@pytest.mark.parametrize("evaluation, given, expected", [
    (False, None, False), (True, None, True),
    (False, True, True), (True, False, False)])
def test_episodes_are_built_anew_for_evaluation_only(monkeypatch, evaluation,
                                                     given, expected):
    """By default training environments reuse MetaDrive's objects (~9 ms
    less per reset) and evaluation environments build each episode anew
    (exact scores); a value given explicitly wins."""
    configs = []

    def env_fn_recorder(env_class, config, **kwargs):
        configs.append(config)
        raise _Built

    monkeypatch.setattr(suite_metadrive, "MetaDriveEnvFn", env_fn_recorder)
    with contextlib.ExitStack() as stack:
        if evaluation:
            stack.enter_context(evaluation_environments())
        with pytest.raises(_Built):
            suite_metadrive.load(force_destroy=given, **CONFIG)
    assert configs[0]["force_destroy"] is expected


@pytest.mark.skipif(
    os.path.exists(os.path.join(METADRIVE.submodule_search_locations[0],
                                "assets", "version.txt")),
    reason="MetaDrive's assets are installed")
def test_3d_rendering_without_assets_names_the_fix():
    with pytest.raises(AlfError, match="metadrive.pull_asset"):
        suite_metadrive.load(env_config=dict(use_render=True), **CONFIG)


def test_panda3d_loads_a_display_module_here():
    assert missing_graphics_library() is None


_NO_GL = "libGL.so.1: cannot open shared object file: No such file or directory"


def test_missing_opengl_names_the_fix(monkeypatch, tmp_path):
    # MetaDrive's OpenCV fails to import without libGL.
    (tmp_path / "md_without_gl.py").write_text(f"raise ImportError({_NO_GL!r})")
    (tmp_path / "md_other_import_error.py").write_text(
        "raise ImportError('No module named shapely')")
    (tmp_path / "md_stand_in.py").write_text(
        "import gymnasium as gym\n\n"
        "class Env(gym.Env):\n"
        "    def __init__(self, config):\n"
        "        pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(GraphicsLibraryMissingError,
                       match=r"\(libGL.so.1: .*apt-get install libgl1"):
        make_env("md_without_gl:Env", {})
    with pytest.raises(ImportError, match="No module named shapely"):
        make_env("md_other_import_error:Env", {})

    # With the headless OpenCV, the import succeeds and Panda3D's display
    # modules fail to load (MetaDrive's engine would crash on no pipes).
    import ctypes

    def no_gl(path, *args, **kwargs):
        raise OSError(_NO_GL)

    monkeypatch.setattr(ctypes, "CDLL", no_gl)
    assert missing_graphics_library() == _NO_GL
    with pytest.raises(GraphicsLibraryMissingError,
                       match=r"renders nothing \(libGL.so.1: .*libx11-6"):
        make_env("md_stand_in:Env", {})


# ---- ScenarioSampling on a scripted stand-in (no MetaDrive) ----------------


class _ScriptedMetaDrive(gym.Env):
    """Records reset seeds; ``step`` returns the scripted (terminated,
    truncated, info) triples in order."""

    observation_space = gym.spaces.Box(0, 1, (1, ), np.float32)
    action_space = gym.spaces.Box(-1, 1, (2, ), np.float32)

    def __init__(self, script=()):
        self.seeds, self._script = [], list(script)

    def reset(self, seed=None):  # MetaDrive's signature: no options
        self.seeds.append(seed)
        return np.zeros(1, np.float32), {"env_seed": seed, "other": 1}

    def step(self, action):
        terminated, truncated, info = self._script.pop(0)
        return (np.zeros(1, np.float32), 0.0, terminated, truncated,
                dict(info, other=1))


def test_scenario_sampling_seeds_every_reset():
    draws = []
    for _ in range(2):
        env = ScenarioSampling(_ScriptedMetaDrive(), num_scenarios=7,
                               start_seed=40)
        env.reset(seed=3)
        for _ in range(20):
            env.reset()
        draws.append(env.unwrapped.seeds)
    assert draws[0] == draws[1]  # the seed fixes the whole sequence
    assert all(40 <= s < 47 for s in draws[0])
    assert len(set(draws[0])) >= 5
    env.reset(seed=4)
    env.reset()
    assert env.unwrapped.seeds[-2:] != draws[0][:2]


def test_consecutive_seeds_drive_every_scenario_once():
    # As an evaluation resets environment i with seed + i (and alf.bin.play
    # episode e with seed + e): num_scenarios seeds, every scenario once.
    env = ScenarioSampling(_ScriptedMetaDrive(), num_scenarios=7,
                           start_seed=40)
    for s in range(12, 19):
        env.reset(seed=s)
    assert sorted(env.unwrapped.seeds) == list(range(40, 47))
    assert env.unwrapped.seeds[0] == 40 + 12 % 7


def test_scenario_sampling_crash_end_and_info_keys():
    script = [
        (False, False, {"crash_vehicle": True}),  # a crash that goes on
        (True, False, {"out_of_road": True, "crash_sidewalk": True}),
        (True, False, {"crash_vehicle": True}),
        (False, True, {"crash_object": True}),  # at the horizon
        (False, True, {}),
    ]
    env = ScenarioSampling(_ScriptedMetaDrive(script), 1, 0,
                           info_keys=(CRASH_END, "out_of_road", "env_seed"))
    _, info = env.reset(seed=0)
    assert info == {"env_seed": 0}
    got = [env.step(np.zeros(2))[4] for _ in script]
    assert [i[CRASH_END] for i in got] == [False, False, True, True, False]
    assert "other" not in got[0] and got[1]["out_of_road"]



def test_scenario_sampling_mean_speed_per_episode():
    # velocity is m/s; the mean covers one episode's steps and restarts
    # with the next episode.
    script = [(False, False, {"velocity": 10.0}),
              (True, False, {"velocity": 20.0}),
              (False, False, {"velocity": 5.0}),
              (False, True, {"velocity": 5.0})]
    env = ScenarioSampling(_ScriptedMetaDrive(script), 1, 0,
                           info_keys=(MEAN_SPEED, ))
    env.reset(seed=0)
    got = [env.step(np.zeros(2))[4] for _ in range(2)]
    assert MEAN_SPEED not in got[0]
    assert got[1][MEAN_SPEED] == pytest.approx(3.6 * 15.0)
    env.reset()
    got = [env.step(np.zeros(2))[4] for _ in range(2)]
    assert got[1][MEAN_SPEED] == pytest.approx(3.6 * 5.0)
