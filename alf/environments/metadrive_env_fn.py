"""The worker side of `suite_metadrive`: one MetaDrive environment per process.

`MetaDriveEnvFn` is the picklable constructor that gymnasium's
``AsyncVectorEnv`` sends to each spawned worker. Like `env_fn`, this module
is free of torch imports, and MetaDrive (4 s to import, ~0.5 GB) is imported
only inside the functions that build an environment.

MetaDrive's engine is a per-process singleton: a second environment in one
process fails in its constructor. The engine starts at the first ``reset``;
constructing an environment object alone starts none, which is how
`MetaDriveEnvFn.describe` reads the spaces.
"""
import importlib
import os
import re
from typing import Optional, Sequence

import gymnasium as gym
import numpy as np

from alf.environments import metadrive_seeding
from alf.environments.env_fn import prepare_worker

# Info key added by `ScenarioSampling`: the episode ended in a collision.
CRASH_END = "crash_end"
# Info key added by `ScenarioSampling` on an episode's last step: the car's
# mean speed over the episode, km/h (MetaDrive's ``velocity`` is m/s).
MEAN_SPEED = "mean_speed_kmh"
# The collisions that end a MetaDriveEnv episode (with its default
# ``crash_*_done``). MetaDrive's own ``crash`` also counts touching the
# sidewalk, which ends no episode but accompanies many out-of-road ends.
_CRASH_KEYS = ("crash_vehicle", "crash_object", "crash_building",
               "crash_human")

ASSETS_HINT = "`python -m metadrive.pull_asset` downloads and installs them"


class AssetsMissingError(RuntimeError):
    """MetaDrive's 3-D assets are absent and the configuration needs them."""


class GraphicsLibraryMissingError(RuntimeError):
    """The system's OpenGL or X11 libraries are missing. MetaDrive needs
    them even when it renders nothing: its OpenCV links libGL, and its
    engine crashes when Panda3D can load no display module."""


# Panda3D's display modules on Linux: GLX (needs libGL and libX11) and
# headless EGL (needs libGL).
_PANDA_DISPLAYS = ("libpandagl.so", "libp3headlessgl.so")
# The libraries an ImportError names when they are what is missing.
_SYSTEM_GRAPHICS_LIB = re.compile(r"\blib(GL|GLX|GLdispatch|EGL|X11|Xext|xcb)\b")


def _graphics_error(why: str) -> GraphicsLibraryMissingError:
    return GraphicsLibraryMissingError(
        f"MetaDrive needs the system's OpenGL and X11 libraries even when it "
        f"renders nothing ({why}); install them, e.g. apt-get install libgl1 "
        f"libx11-6")


def missing_graphics_library() -> Optional[str]:
    """Why no Panda3D display module loads (the dynamic loader's message,
    e.g. ``libGL.so.1: cannot open shared object file``), or None if one
    does or this platform has none of them.

    MetaDrive's engine lists the graphics pipes at start-up and crashes with
    an ``IndexError`` when there are none, which is what a container
    without the system's OpenGL libraries gives.
    """
    import ctypes

    import panda3d
    errors = []
    for name in _PANDA_DISPLAYS:
        path = os.path.join(os.path.dirname(panda3d.__file__), name)
        if not os.path.exists(path):
            continue
        try:
            ctypes.CDLL(path)
            return None
        except OSError as e:
            errors.append(str(e))
    return errors[0] if errors else None


def assets_present() -> bool:
    """Whether MetaDrive's asset folder is installed (``version.txt``)."""
    from metadrive.engine.asset_loader import AssetLoader
    return os.path.exists(os.path.join(str(AssetLoader.asset_path),
                                       "version.txt"))


def _skip_asset_download() -> None:
    """Stands in for ``BaseEngine.try_pull_asset`` when the assets are absent
    and nothing is rendered in 3-D."""


class ScenarioSampling(gym.Wrapper):
    """Seeded scenario choice, and `CRASH_END` and `MEAN_SPEED` entries in
    ``info``.

    MetaDrive accepts ``reset(seed=s)`` only for ``start_seed <= s <
    start_seed + num_scenarios``, and ``reset()`` draws the scenario from an
    unseeded generator. Here ``reset(seed=s)`` drives scenario ``start_seed
    + s % num_scenarios``, and every ``reset()`` after it draws its scenario
    from a numpy generator seeded by ``s``: each environment drives its own,
    reproducible sequence of scenarios (a vector env passes ``seed + i`` to
    its ``i``-th environment). Consecutive seeds drive distinct scenarios,
    so an evaluation (environment ``i`` reset with ``seed + i``) or a replay
    (episode ``e`` with ``seed + e``) of ``num_scenarios`` episodes drives
    every scenario once: a deterministic policy's score is then exact, not
    a draw of the scenarios, provided the engine builds every episode's
    objects anew (``force_destroy``, `suite_metadrive.load`'s default for
    evaluation; without it earlier episodes change later ones). Before any
    seed, the generator is seeded from fresh entropy.

    `MEAN_SPEED`, on the step that ends an episode, is the mean of
    MetaDrive's ``velocity`` over the episode's steps, in km/h: how fast a
    policy drives (a deterministic policy can drive faster than the
    sampling one it was trained as, and leave the road in the bends).

    Args:
        env: a MetaDrive environment.
        num_scenarios: number of scenarios.
        start_seed: index of the first scenario.
        info_keys: if given, ``step`` and ``reset`` return only these
            entries of MetaDrive's ``info`` (MetaDrive reports ~30, each of
            which the vector env batches at every step).
    """

    def __init__(self, env: gym.Env, num_scenarios: int, start_seed: int,
                 info_keys: Optional[Sequence[str]] = None):
        super().__init__(env)
        self._num_scenarios = num_scenarios
        self._start_seed = start_seed
        self._info_keys = None if info_keys is None else tuple(info_keys)
        self._rng = None
        self._speed_sum, self._steps = 0.0, 0

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self._rng = np.random.default_rng(seed)
            index = seed % self._num_scenarios
        else:
            if self._rng is None:
                self._rng = np.random.default_rng()
            index = int(self._rng.integers(self._num_scenarios))
        scenario = self._start_seed + index
        obs, info = self.env.reset(seed=scenario)
        self._speed_sum, self._steps = 0.0, 0
        return obs, self._filter(info)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        ended = bool(terminated or truncated)
        info[CRASH_END] = ended and any(info.get(k, False)
                                        for k in _CRASH_KEYS)
        self._speed_sum += float(info.get("velocity", 0.0))
        self._steps += 1
        if ended:
            info[MEAN_SPEED] = 3.6 * self._speed_sum / self._steps
        return obs, reward, terminated, truncated, self._filter(info)

    def _filter(self, info: dict) -> dict:
        if self._info_keys is None:
            return info
        return {k: info[k] for k in self._info_keys if k in info}


class TopDownFrames(gym.Wrapper):
    """Renders MetaDrive's 2-D top-down view (pygame, no window, no 3-D
    assets needed) as RGB frames, whatever the observation is: roads,
    the ego car and its recent trail, traffic.

    Args:
        env: a `make_env` environment.
        size: frames are ``size x size`` pixels.
    """

    render_mode = "rgb_array"

    def __init__(self, env: gym.Env, size: int = 400):
        super().__init__(env)
        self._size = size

    def render(self):
        return self.env.unwrapped.render(
            mode="topdown", window=False, screen_size=(self._size,
                                                       self._size),
            film_size=(2000, 2000), scaling=4, num_stack=25,
            target_agent_heading_up=False)


class OmitPreviousAction(gym.ObservationWrapper):
    """Drops the previous action (steering, throttle) from MetaDrive's state
    observation.

    The state observation echoes the policy's own last output, so a
    sampling policy sees its own noise there. Leaving it out was measured
    not to make the deterministic policy drive (docs/metadrive.md); it
    remains an option for policies that should not see their output. The
    current wheel angle, which follows the steering command with a lag,
    stays: it is the car's state, not an echo.

    Args:
        env: a `make_env` environment with the state observation.
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        config = env.unwrapped.config  # type: ignore[attr-defined]
        side = config["vehicle_config"]["side_detector"]
        # MetaDrive's StateObservation.vehicle_state: [vehicle length and
        # width], side detector rays or 2 road distances, heading
        # difference, speed, wheel angle, then the previous action.
        start = 2 if config["random_agent_model"] else 0
        start += (side["num_lasers"]
                  if side["num_lasers"] > 0 and side["distance"] > 0 else 2)
        start += 3
        space = env.observation_space
        assert isinstance(space, gym.spaces.Box)
        self._keep = np.delete(np.arange(space.shape[0]), [start, start + 1])
        self.observation_space = gym.spaces.Box(
            space.low[self._keep], space.high[self._keep],
            dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        # MetaDrive's reset takes no ``options``, which gymnasium's
        # ObservationWrapper.reset always passes on.
        del options
        obs, info = self.env.reset(seed=seed)
        return self.observation(obs), info

    def observation(self, observation):
        return observation[self._keep]


class _Spaces(gym.Env):
    """Stand-in environment that only has spaces (see `MetaDriveEnvFn`)."""

    metadata = {"render_modes": []}

    def __init__(self, observation_space, action_space):
        self.observation_space = observation_space
        self.action_space = action_space


class MetaDriveEnvFn:
    """A picklable constructor of one MetaDrive environment.

    Called in a worker subprocess, it makes the worker ignore Ctrl-C and die
    with its parent (as `env_fn.EnvFn` does), sets ``SDL_AUDIODRIVER`` and
    ``SDL_VIDEODRIVER`` to ``dummy`` (unless set), and builds the
    environment wrapped in `ScenarioSampling`. If MetaDrive's assets are
    absent and nothing is rendered in 3-D, it turns the engine's asset
    download into a no-op in that process (the engine would otherwise try
    to download them and fail without a network); if 3-D rendering is
    needed, it raises `AssetsMissingError`.

    gymnasium's ``AsyncVectorEnv`` also calls its first constructor once in
    the process that creates it, to read the spaces. A MetaDrive engine
    there would take the process's only engine, so that call returns a
    stand-in that has only ``spaces`` (from `describe`).

    Args:
        env_class: ``"module:Class"`` of a MetaDrive environment.
        config: the environment's config (``num_scenarios`` and
            ``start_seed`` are used for the scenario seeds).
        info_keys: see `ScenarioSampling`.
        spaces: ``(observation_space, action_space)`` for the stand-in.
        observe_previous_action: keep the previous action in the state
            observation (see `OmitPreviousAction`).
        in_process: build the environment in the calling process (an
            actor process of asynchronous collection, which holds no other
            engine).
    """

    def __init__(self, env_class: str, config: dict,
                 info_keys: Optional[Sequence[str]] = None,
                 spaces: Optional[tuple] = None, in_process: bool = False,
                 render: bool = False,
                 observe_previous_action: bool = True):
        self.render = render
        self.observe_previous_action = observe_previous_action
        self.env_class = env_class
        self.config = dict(config)
        self.info_keys = info_keys
        self.spaces = spaces
        self._owner_pid = os.getpid()
        self._in_process = in_process

    def __call__(self) -> gym.Env:
        if self._in_process:
            env = self._make(self.info_keys)
            return TopDownFrames(env) if self.render else env
        if os.getpid() == self._owner_pid:
            if self.spaces is None:
                raise RuntimeError(
                    "MetaDriveEnvFn builds MetaDrive only in a worker "
                    "subprocess (one engine per process)")
            return _Spaces(*self.spaces)
        prepare_worker()
        env = self._make(self.info_keys)
        return TopDownFrames(env) if self.render else env

    def _make(self, info_keys: Optional[Sequence[str]] = None) -> gym.Env:
        return make_env(self.env_class, self.config, info_keys,
                        self.observe_previous_action)

    def describe(self):
        """Builds the environment without starting an engine and returns
        ``(observation_space, action_space, assets_present)``; run it in a
        throwaway process (it imports MetaDrive).

        Raises:
            AssetsMissingError: the assets are absent and the configuration
                renders in 3-D (a camera, ``use_render``).
        """
        env = self._make()
        try:
            return env.observation_space, env.action_space, assets_present()
        finally:
            env.close()


def make_env(env_class: str, config: dict,
             info_keys: Optional[Sequence[str]] = None,
             observe_previous_action: bool = True) -> gym.Env:
    """Builds a MetaDrive environment in this process, wrapped in
    `ScenarioSampling` (see `MetaDriveEnvFn` for the arguments) and, without
    ``observe_previous_action``, in `OmitPreviousAction`.

    If MetaDrive's assets are absent and the configuration renders nothing
    in 3-D, this process's engine will skip their download.

    Raises:
        AssetsMissingError: the assets are absent and the configuration
            renders in 3-D (a camera, ``use_render``).
        GraphicsLibraryMissingError: the system's OpenGL libraries are
            missing (see `missing_graphics_library`).
    """
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    module, name = env_class.split(":")
    try:
        env_cls = getattr(importlib.import_module(module), name)
    except ImportError as e:
        # MetaDrive's OpenCV (not the headless build) links libGL.
        if _SYSTEM_GRAPHICS_LIB.search(str(e)):
            raise _graphics_error(str(e)) from e
        raise
    env = env_cls(dict(config))
    # Same random streams, 7-19% less CPU per reset (metadrive_seeding).
    metadrive_seeding.install()
    why = missing_graphics_library()
    if why is not None:
        env.close()
        raise _graphics_error(why)
    if not assets_present():
        from metadrive.constants import RENDER_MODE_NONE
        mode = env.config["_render_mode"]
        if mode != RENDER_MODE_NONE:
            env.close()
            raise AssetsMissingError(
                f"MetaDrive's assets are not installed and this "
                f"configuration renders in 3-D ({mode!r}: use_render or "
                f"a camera): {ASSETS_HINT}")
        from metadrive.engine.base_engine import BaseEngine
        BaseEngine.try_pull_asset = staticmethod(_skip_asset_download)
    if not observe_previous_action:
        env = OmitPreviousAction(env)
    return ScenarioSampling(env, config.get("num_scenarios", 1),
                            config.get("start_seed", 0), info_keys)
