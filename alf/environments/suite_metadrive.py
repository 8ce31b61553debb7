"""MetaDrive driving scenarios as a `BatchedEnvironment`.

Needs the ``[metadrive]`` extra (``metadrive-simulator``); MetaDrive is
imported only in the processes that run it, never by ``import alf``.

MetaDrive's engine is a per-process singleton, so every environment runs in
its own spawned worker process (gymnasium's ``AsyncVectorEnv``, same-step
autoreset, as in `suite_gym`), whatever ``asynchronous`` says. Before the
workers start, a throwaway process reads the spaces (importing MetaDrive in
the training process would cost it ~0.5 GB); the result is cached per
configuration, so the evaluation environments of a run reuse it.

Without network access: MetaDrive downloads its 3-D assets when its first
engine starts. The lidar/state and top-down observations do not need them;
when they are absent, the workers skip the download (one warning line,
the first time a process calls `load`). A configuration that renders in 3-D (a camera,
``use_render``) without the assets fails with a line saying how to install
them.

Per-episode metrics (``TimeStep.episode_info``), from the ``info`` of an
episode's last step:

* ``success_rate``: ``arrive_dest``, the car reached its destination;
* ``crash_rate``: ``crash_end`` (added by this suite), the episode ended in
  a collision with a vehicle, object, building or pedestrian. MetaDrive's
  own ``crash`` also counts touching the sidewalk, which ends no episode but
  often comes with an out-of-road end (3 of 9 in a sample): it would count
  those twice;
* ``out_of_road_rate``: ``out_of_road``;
* ``route_completion``: ``route_completion``, the fraction of the route
  driven (MetaDrive's estimate; it can be slightly below 0 or above 1);
* ``mean_speed_kmh``: ``mean_speed_kmh`` (added by this suite), the car's
  mean speed over the episode, km/h.

An episode that hits ``horizon`` ends with ``truncated`` (not
``terminated``); then none of the first three is set, unless the car also
crashed or left the road on that step. The workers send back only these
entries of MetaDrive's ``info`` (and ``env_seed``, the scenario index): the
vector env batches every entry at every step.
"""
import concurrent.futures
import importlib.util
import multiprocessing as mp
import sys
from concurrent.futures.process import BrokenProcessPool
from typing import Dict, Optional, Tuple, Union

import gin
from absl import logging
from gymnasium.vector import (AsyncVectorEnv, AutoresetMode, SyncVectorEnv,
                               VectorEnv)

from alf.environments.env_fn import (in_environment_process,
                                     loading_evaluation_environments,
                                     prepare_worker)
from alf.environments.metadrive_env_fn import (ASSETS_HINT, CRASH_END,
                                               MEAN_SPEED, MetaDriveEnvFn)
from alf.environments.suite_gym import GymEnvironment
from alf.utils import process
from alf.utils.errors import AlfError, one_line

__all__ = ["load", "EPISODE_INFO", "OBSERVATIONS"]

EPISODE_INFO = {
    "success_rate": "arrive_dest",
    "crash_rate": CRASH_END,
    "out_of_road_rate": "out_of_road",
    "route_completion": "route_completion",
    "mean_speed_kmh": MEAN_SPEED,
}

# observation -> (MetaDrive environment class, image observation)
OBSERVATIONS = {
    "state": ("metadrive.envs.metadrive_env:MetaDriveEnv", False),
    "topdown": ("metadrive.envs.top_down_env:TopDownMetaDrive", True),
}
ENV_NAMES = ("MetaDrive", )

# The info entries that the workers send back: the episode metrics', and the
# scenario index.
_INFO_KEYS = tuple(EPISODE_INFO.values()) + ("env_seed", )

# configuration -> (observation_space, action_space, assets_present)
_DESCRIPTIONS: Dict[str, Tuple] = {}
# Settings that pick scenarios and end episodes but shape no observation:
# environments differing only in their values (training, evaluation and
# held-out ones) share one description, so one throwaway process (~10 s of
# CPU: it imports MetaDrive and builds an engine) describes them all. Their
# types stay in the key: MetaDrive checks types when it builds the
# environment, and a mistyped value must still meet that check there, as
# a one-line error, rather than in a worker.
_SCENARIO_ONLY = ("num_scenarios", "start_seed", "traffic_density",
                  "horizon", "map", "force_destroy", "log_level")
_warned_assets = False


def _describe(env_fn: MetaDriveEnvFn) -> Tuple:
    """`MetaDriveEnvFn.describe` in a throwaway spawned process, cached."""
    key = _description_key(env_fn)
    if key not in _DESCRIPTIONS:
        with concurrent.futures.ProcessPoolExecutor(
                1, mp_context=mp.get_context("spawn"),
                initializer=prepare_worker) as pool:
            try:
                _DESCRIPTIONS[key] = pool.submit(env_fn.describe).result()
            except BrokenProcessPool:
                raise
            except Exception as e:  # noqa: BLE001 - MetaDrive's, one line
                raise AlfError(f"cannot build MetaDrive environment "
                               f"{env_fn.env_class}: {one_line(e)}") from e
    return _DESCRIPTIONS[key]


def _description_key(env_fn: MetaDriveEnvFn) -> str:
    config = {k: type(v).__name__ if k in _SCENARIO_ONLY else v
              for k, v in env_fn.config.items()}
    return repr((env_fn.env_class, sorted(config.items()),
                 env_fn.observe_previous_action))


def _rank() -> int:
    if "torch.distributed" not in sys.modules:  # no group without it
        return 0
    from alf.utils import distributed
    return distributed.get_rank()


@gin.configurable(module="suite_metadrive")
def load(env_name: str = "MetaDrive",
         num_envs: int = 1,
         seed: Optional[int] = None,
         asynchronous: bool = True,
         observation: str = "state",
         num_scenarios: int = 10,
         start_seed: int = 0,
         traffic_density: float = 0.1,
         horizon: Optional[int] = 1000,
         map: Union[int, str] = 3,  # noqa: A002 - MetaDrive's name
         force_destroy: Optional[bool] = None,
         env_config: Optional[dict] = None,
         topdown_resolution: int = 84,
         log_level: int = 30,
         render: bool = False,
         observe_previous_action: bool = True) -> GymEnvironment:
    """Creates ``num_envs`` MetaDrive environments, one process each.

    Args:
        env_name: ``"MetaDrive"`` (procedurally generated maps with traffic,
            MetaDrive's ``MetaDriveEnv``).
        num_envs: number of environments (and worker processes).
        seed: if given, the first ``reset()`` seeds the environments with
            ``seed, seed + 1, ...``. Environment ``i``'s seed seeds the
            generator that picks the scenario of each of its episodes, so
            every environment (and every rank, which the trainer seeds
            differently) drives its own reproducible sequence of scenarios.
        asynchronous: ignored: MetaDrive allows one engine per process, so
            every environment always runs in its own subprocess, except
            for the one environment of an actor process of asynchronous
            collection (`env_fn.set_environment_process`), which runs in
            that process.
        observation: ``"state"``: 259 floats in [0, 1] (ego state,
            navigation, 240 lidar rays; the size changes with the lidar
            settings of ``env_config``). ``"topdown"``: MetaDrive's
            multi-channel bird's-eye view (pygame), float32 in [0, 1] of
            shape (R, R, 5), channels last (as `EncodingNetwork`'s
            convolutions take them): road network, past positions, and the
            traffic now, 5 and 10 steps ago (``TopDownMetaDrive``).
        num_scenarios: number of distinct scenarios (maps and traffic).
        start_seed: index of the first scenario; episodes use scenarios
            ``start_seed, ..., start_seed + num_scenarios - 1``.
        traffic_density: vehicles per 10 m of lane, about.
        horizon: maximum steps per episode; reaching it ends the episode
            with ``truncated``. With ``None``, random-action episodes may
            never end.
        map: number of blocks of a generated map, or a block string such as
            ``"SCrRX"``.
        force_destroy: build every episode's objects anew (MetaDrive's
            ``force_destroy``). MetaDrive otherwise reuses the vehicles of
            earlier episodes, and what they carry over changes what the
            same policy does in a scenario: one deterministic policy
            scored 0.71 and 0.80 route completion on the same 10 scenarios
            driven in two orders (docs/benchmarks.md). With it an episode
            depends only on its scenario and actions, so evaluations and
            replays are exact, at ~9 ms more per reset (42 against 33 ms;
            benchmarks/metadrive_reset_cost.py).
            None (the default): exact for environments loaded to evaluate
            or replay a policy (`env_fn.evaluation_environments`: the
            evaluators, `alf.bin.play`), reused for training, where no
            score is read and a learning policy resets every ~65 steps.
        env_config: more MetaDrive config entries; they override the
            arguments above.
        topdown_resolution: R, the image size of the top-down observation.
        log_level: MetaDrive's logging level in the workers (30: warnings).
        render: make `GymEnvironment.render` return MetaDrive's top-down
            view as RGB frames (`metadrive_env_fn.TopDownFrames`), for any
            observation.
        observe_previous_action: with ``False``, the ``"state"``
            observation leaves out the previous action (2 of its floats),
            the policy's own last output echoed back
            (`metadrive_env_fn.OmitPreviousAction`).

    Returns:
        A `GymEnvironment` reporting the metrics of `EPISODE_INFO` (see
        the module's doc). Actions are 2 floats in [-1, 1] (steering,
        throttle/brake), clipped to that range.

    Raises:
        AlfError: MetaDrive is not installed; an unknown ``env_name`` or
            ``observation``; a configuration MetaDrive rejects, or one that
            renders in 3-D while MetaDrive's assets are absent.
    """
    del asynchronous  # always one subprocess per environment
    _check_arguments(env_name, observation, num_envs, num_scenarios,
                     observe_previous_action)
    env_class, image = OBSERVATIONS[observation]
    force_destroy = resolve_force_destroy(force_destroy)
    config = dict(num_scenarios=num_scenarios, start_seed=start_seed,
                  traffic_density=traffic_density, horizon=horizon, map=map,
                  force_destroy=force_destroy, log_level=log_level,
                  use_render=False)
    if image:
        config["resolution_size"] = topdown_resolution
    config.update(env_config or {})
    # An actor of asynchronous collection runs its one engine in-process.
    in_process = in_environment_process()
    if in_process and num_envs > 1:
        # An actor is a daemonic process: it may not start the workers
        # that more engines would need.
        raise AlfError(
            f"an actor of asynchronous collection holds one MetaDrive "
            f"environment (one engine per process), not {num_envs}; set "
            f"TrainerConfig.envs_per_actor=1")
    env_fn = MetaDriveEnvFn(env_class, config, info_keys=_INFO_KEYS,
                            in_process=in_process, render=render,
                            observe_previous_action=observe_previous_action)
    vec: VectorEnv
    if in_process:
        vec = SyncVectorEnv([env_fn], autoreset_mode=AutoresetMode.SAME_STEP)
    else:
        obs_space, action_space, assets = _describe(env_fn)
        if not assets:
            _warn_assets_absent()
        env_fn.spaces = (obs_space, action_space)
        with process.run_signals_held():  # the workers' start-up
            vec = AsyncVectorEnv([env_fn] * num_envs, context="spawn",
                                 autoreset_mode=AutoresetMode.SAME_STEP)
    return GymEnvironment(vec, clip_action=True, seed=seed,
                          episode_info=EPISODE_INFO)


def resolve_force_destroy(force_destroy: Optional[bool]) -> bool:
    """`load`'s ``force_destroy`` as it builds environments here: None
    is True inside `env_fn.evaluation_environments`, False elsewhere."""
    if force_destroy is None:
        return loading_evaluation_environments()
    return force_destroy


def _check_arguments(env_name: str, observation: str, num_envs: int,
                     num_scenarios: int,
                     observe_previous_action: bool) -> None:
    if importlib.util.find_spec("metadrive") is None:
        raise AlfError("MetaDrive is not installed: pip install -c "
                       "constraints.txt -e '.[metadrive]' in alf's checkout "
                       "(metadrive-simulator)")
    if env_name not in ENV_NAMES:
        raise AlfError(f"unknown MetaDrive environment {env_name!r}; "
                       f"known: {list(ENV_NAMES)}")
    if observation not in OBSERVATIONS:
        raise AlfError(f"unknown MetaDrive observation {observation!r}; "
                       f"known: {list(OBSERVATIONS)}")
    if num_envs < 1 or num_scenarios < 1:
        raise AlfError(f"num_envs ({num_envs}) and num_scenarios "
                       f"({num_scenarios}) must be at least 1")
    if OBSERVATIONS[observation][1] and not observe_previous_action:
        raise AlfError(f"observe_previous_action=False applies to the "
                       f"'state' observation (it is {observation!r}, which "
                       f"holds no action)")


def _warn_assets_absent() -> None:
    global _warned_assets
    # Once per run: every rank of a distributed run gets here.
    if not _warned_assets and _rank() == 0:
        logging.warning(
            "MetaDrive's assets are absent: the environments skip their "
            "download (state and top-down observations do not need "
            "them; %s)", ASSETS_HINT)
        _warned_assets = True
