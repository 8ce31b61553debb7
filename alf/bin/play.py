r"""Play a trained policy: a per-episode table, optionally a video.

    python -m alf.bin.play --root_dir DIR [--checkpoint latest|best|N] \
        [--num_episodes 3] [--sampling] [--record_file out.gif|out.mp4] \
        [--split training|held_out|calibration] [--gin_param ...] [--seed S]

Rebuilds the run from ``DIR/config.gin`` (or, for a checkpoint taken after
the run was resumed with other bindings, the ``config-resumed-S.gin`` it
trained with; plus ``--gin_param``), loads a
checkpoint of ``DIR/ckpt`` (weights only: a checkpoint cannot run code),
plays ``--num_episodes`` episodes in one environment in this process and
prints each one's return, length and the environment's episode metrics
(MetaDrive: success, route completion, ...), then their means. Episode
``e`` starts from seed ``--seed + e``, and so does the sampling policy's
noise, so a replay is reproducible, episode by episode. ``--seed``
defaults to the run's evaluation seed, where the trainer's evaluations
start their episode ``e`` with the same noise (`evaluator.act_per_episode`):
the first ``num_eval_episodes`` episodes of a replay of checkpoint N are
the evaluation at N, episode by episode, and their means its row of
``eval.csv`` (``--split held_out``, or ``--held_out``: the held-out
environments, ``eval_held_out.csv``; ``--split calibration``: the
environments a calibrating run chooses its offset on, where the first
``num_calibration_episodes`` episodes, played with a candidate's
``--gin_param PPOAlgorithm.deterministic_offset=...``, are that
candidate's row of ``calibration.csv``).

``--record_file`` writes one frame per step, the state the policy acted on
(so an episode of length L gives L frames): gymnasium's ``rgb_array``
rendering, or
MetaDrive's top-down view (for state-observation policies too). A ``.gif``
is written with Pillow; an ``.mp4`` needs the ``[video]`` extra
(imageio with its ffmpeg binary). Frames are written as they come (memory
stays flat however long the play), to a hidden temporary file beside it
that is renamed into place at the end: a failed or interrupted play
leaves no file, and an existing one as it was (a play killed outright
leaves its hidden file, which the next play to the same file removes).

Exit codes: 0, 1 for a bad input (one line: a missing run, checkpoint,
unwritable file), 130 on Ctrl-C.
"""
import contextlib
import errno
import inspect
import math
import os
import re
import sys
import tempfile
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import gymnasium as gym
import numpy as np
import torch
from absl import app, flags

from alf.bin import cli
from alf.utils.errors import (AlfError, CheckpointError, ConfigError, one_line,
                              run_cli)


def define_flags() -> None:
    """The CLI's flags: defined when run as a program, not on import, so
    that `play` can be imported beside another alf CLI (``alf.bin.train``
    defines ``--root_dir`` too)."""
    flags.DEFINE_string("root_dir", None,
                        "The run's folder (config.gin, ckpt/).")
    flags.DEFINE_string("checkpoint", "latest", "latest, best (the best "
                        "evaluation's, ckpt/best.pt) or N (ckpt/ckpt-N.pt).")
    flags.DEFINE_integer("num_episodes", 3, "Episodes to play.",
                         lower_bound=1)
    flags.DEFINE_bool("sampling", False, "Act with the sampling policy that "
                      "collected training data, not the deterministic one.")
    flags.DEFINE_string("record_file", None, "Write a video: .gif or .mp4.")
    flags.DEFINE_integer("fps", 30, "Frames per second of the video.",
                         lower_bound=1)
    flags.DEFINE_integer("seed", None, "Episode e starts from seed + e "
                         "(default: the run's evaluation seed, so the "
                         "episodes are its evaluations').", lower_bound=0)
    flags.DEFINE_enum("split", "training", SPLITS, "Which of the run's "
                      "environments: its training ones, its held-out ones "
                      "(TrainerConfig.held_out_env_load_fn) or those its "
                      "evaluations calibrate on "
                      "(TrainerConfig.calibration_env_load_fn).")
    flags.DEFINE_bool("held_out", False, "Short for --split held_out.")
    flags.DEFINE_multi_string("gin_param", None, "Gin bindings applied "
                              "after the run's config.gin.")


VIDEO_FORMATS = (".gif", ".mp4")
#: The environments `play` can load, as the run's config made them.
SPLITS = ("training", "held_out", "calibration")
#: What a checkpoint that cannot be played leaves the user to do.
#: How to add what recording needs, as the README installs alf.
VIDEO_INSTALL = ("pip install -c constraints.txt -e '.[video]' in alf's "
                 "checkout")
PLAY_ADVICE = ("play another checkpoint than this one (--checkpoint "
               "latest, best or an env-step count in ckpt/) or with the "
               "config it was trained with")


def checkpoint_path(root_dir: str, which: str) -> str:
    """The file of checkpoint ``which`` (latest, best or N) of a run.

    Raises:
        ConfigError: naming what exists instead.
    """
    return _checkpoint(root_dir, which)[0]


def read_checkpoint(path: str) -> dict:
    """The checkpoint file ``path``, checked to be a trainer's.

    Raises:
        CheckpointError: naming the file and why it cannot be played.
    """
    from alf.trainers.checkpointer import Checkpointer
    from alf.trainers.run_state import CHECKPOINT_LAYOUT
    return Checkpointer.load(path, CHECKPOINT_LAYOUT, advice=PLAY_ADVICE)


def load_algorithm(cfg, path: str, observation_space, action_space,
                   state: Optional[dict] = None):
    """``cfg``'s algorithm (a `TrainerConfig`) for these spaces, with the
    weights of the checkpoint file ``path`` (``state``: already read with
    `read_checkpoint`), in eval mode."""
    from alf.trainers.run_state import load_weights
    if state is None:
        state = read_checkpoint(path)
    algorithm = cfg.algorithm_ctor(observation_space=observation_space,
                                   action_space=action_space, config=cfg)
    load_weights(algorithm, state["algorithm"], path, PLAY_ADVICE)
    algorithm.act_as_trained(int(state.get("counters", {}).get("env_steps",
                                                               0)))
    algorithm.eval()
    return algorithm


def _checkpoint(root_dir: str, which: str) -> Tuple[str, int]:
    """`checkpoint_path` and the env steps the checkpoint was taken at."""
    from alf.trainers.checkpointer import Checkpointer
    ckpt = Checkpointer(os.path.join(root_dir, "ckpt"))
    saved = ckpt.saved()
    record, unreadable = ckpt.best_record()
    best = record and (record["path"], record["env_steps"])
    have = ", ".join((["latest"] if saved else []) +
                     (["best"] if best else []) + [str(s) for s in saved])
    path, steps = None, -1
    if which == "latest":
        path = ckpt.latest()
        steps = max((s for s, p in saved.items() if p == path), default=-1)
    elif which == "best":
        if unreadable:
            raise ConfigError(f"--checkpoint=best: {unreadable}; play "
                              f"another (there: {have or 'none'})")
        path, steps = best or (None, -1)
    elif which.isdigit():
        path, steps = saved.get(int(which)), int(which)
    else:
        raise ConfigError(f"--checkpoint={which!r}: use latest, best or a "
                          f"number of env steps ({have or 'none there'})")
    if path is None:
        # A run between its first evaluation and first periodic checkpoint
        # has only best.pt: point there rather than say "none".
        hint = ("; use --checkpoint best" if best and not saved else
                f"; {unreadable}" if unreadable else "")
        raise ConfigError(f"--checkpoint={which}: no such checkpoint in "
                          f"{ckpt.ckpt_dir} (there: {have or 'none'}{hint})")
    return path, steps


def run_config(root_dir: str, env_steps: int) -> str:
    """The config a run trained its checkpoint at ``env_steps`` with:
    ``config.gin``, or the ``config-resumed-S.gin`` of the last resume
    before it (a run resumed at S with other bindings writes that file;
    its checkpoints after S are the new config's)."""
    from alf.trainers.run_state import resumed_configs
    before = [path for steps, path in resumed_configs(root_dir)
              if steps < env_steps]
    return before[-1] if before else os.path.join(root_dir, "config.gin")


def play(root_dir: str, checkpoint: str = "latest", num_episodes: int = 3,
         sampling: bool = False, record_file: Optional[str] = None,
         gin_params: Sequence[str] = (), seed: Optional[int] = None,
         fps: int = 30, act: Optional[Callable] = None,
         split: str = "training") -> List[Dict[str, float]]:
    """Plays a run's checkpoint; returns one row per episode (``return``,
    ``length`` and the episode metrics) and writes ``record_file``.

    ``seed`` None: the run's evaluation seed (`seeds.eval_seed`).
    ``split``: which of the run's environments (`SPLITS`): its training
    ones, its held-out ones or those its calibrations play (the training
    ones where it sets no ``calibration_env_load_fn``, as the trainer).

    ``act`` (for scripts that probe a policy, e.g.
    ``benchmarks/action_probe.py``): ``act(algorithm, observation,
    raw_observation) -> action`` replaces the policy's choice (the
    deterministic or, with ``sampling``, the sampling one); torch's RNG is
    then seeded per episode as for ``sampling``.

    Raises:
        AlfError: one line, for a missing run, checkpoint or config, an
            unwritable or unknown ``record_file``, an unknown ``split``
            or ``held_out`` for a run without held-out environments, a
            negative ``seed``.
    """
    if seed is not None and seed < 0:  # the CLI's flag refuses it too
        raise ConfigError(f"--seed={seed}: a seed is 0 or more")
    for tries_left in (2, 1, 0):
        path, cfg, load_fn = open_run(root_dir, checkpoint, split,
                                      gin_params)
        try:  # now: a run still training removes its older checkpoints
            state = read_checkpoint(path)
            break
        except CheckpointError:
            if (checkpoint != "latest" or not tries_left
                    or os.path.exists(path)):
                raise
            # That training just saved a newer one: play it instead.
    writer = _VideoWriter(record_file, fps) if record_file else None
    try:
        rows = _play(cfg, state, path, load_fn, num_episodes, sampling,
                     writer, seed, act)
        if writer:
            writer.close()
    finally:
        if writer:
            writer.abort()  # a failure or Ctrl-C; nothing left after close
    return rows


def _play(cfg, state: dict, path: str, load_fn, num_episodes: int,
          sampling: bool, writer: Optional["_VideoWriter"],
          seed: Optional[int], act: Optional[Callable]
          ) -> List[Dict[str, float]]:
    """`play`'s episodes, once the run is open (``state``: the checkpoint
    file ``path``) and the video started."""
    from alf.environments import env_fn
    from alf.environments.batched import check_environment
    from alf.trainers import seeds
    if seed is None:
        seed = seeds.eval_seed(cfg.seed)
    torch.set_num_threads(cfg.torch_num_threads)
    # One environment, built here (MetaDrive's one engine, no worker).
    env_fn.set_environment_process()
    # pygame renders off-screen: no window, no sound device.
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    # SDL (pygame's rendering) would take SIGTERM for itself: a play that
    # is told to stop would go on to its end.
    os.environ.setdefault("SDL_NO_SIGNAL_HANDLERS", "1")
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    kwargs = {"render": True} if writer else {}
    if writer and not _takes(load_fn, "render"):
        name = getattr(load_fn, "__name__", repr(load_fn))
        raise ConfigError(
            f"{name} takes no 'render' argument, so it cannot record: give "
            "it `render: bool = False` (True: environments whose render() "
            "returns RGB frames), or play without --record_file")
    try:
        with env_fn.evaluation_environments():
            env = load_fn(cfg.env_name, num_envs=1, seed=seed,
                          asynchronous=False, **kwargs)
    except (gym.error.DependencyNotInstalled, AlfError) as e:
        # suite_gym says a missing extra in one line of its own; what a
        # recording misses (pygame) is named with the install that has it.
        missing = e if isinstance(e, gym.error.DependencyNotInstalled) else (
            e.__cause__)
        if not (writer and isinstance(missing,
                                      gym.error.DependencyNotInstalled)):
            raise
        raise ConfigError(f"rendering {cfg.env_name} needs a package that "
                          f"is missing ({one_line(missing)}): "
                          f"{VIDEO_INSTALL}") from e
    check_environment(env, load_fn)
    assert cfg.algorithm_ctor is not None  # TrainerConfig refuses None
    try:
        algorithm = load_algorithm(cfg, path, env.observation_space,
                                   env.action_space, state)
        return [_episode(env, algorithm, seed + e, sampling, writer, act)
                for e in range(num_episodes)]
    finally:
        env.close()


def _split_load_fn(cfg, split: str, root_dir: str):
    """The load function of ``split``'s environments in the run ``cfg``.

    Raises:
        ConfigError: ``held_out`` for a run without held-out environments.
    """
    if split == "held_out":
        if cfg.held_out_env_load_fn is None:
            raise ConfigError(f"the run in {root_dir} has no held-out "
                              "environments to play "
                              "(TrainerConfig.held_out_env_load_fn is unset)")
        return cfg.held_out_env_load_fn
    if split == "calibration":
        return cfg.calibration_env_load_fn or cfg.env_load_fn
    return cfg.env_load_fn


def open_run(root_dir: str, checkpoint: str, split: str,
             gin_params: Sequence[str] = ()):
    """The run's configuration as of ``checkpoint``, parsed into gin:
    (the checkpoint's file, its `TrainerConfig`, the load function of
    ``split``'s environments). `play` starts here, and a tool that plays a
    split last (``alf.bin.calibrate --held_out``) calls it first, so that
    a split the run lacks fails before minutes of play.

    Raises:
        ConfigError: an unknown ``split``, a folder that is not a run, or
            ``held_out`` for a run without held-out environments (and as
            `checkpoint_path`).
    """
    from alf.trainers.config_parser import parse_run_config
    from alf.trainers.trainer_config import TrainerConfig
    if split not in SPLITS:
        raise ConfigError(f"--split={split!r}; valid: {', '.join(SPLITS)}")
    config_file = os.path.join(root_dir, "config.gin")
    if not os.path.isdir(root_dir):
        raise ConfigError(f"--root_dir={root_dir!r} " + (
            "is a file, not a run's folder" if os.path.exists(root_dir)
            else "does not exist"))
    if os.path.isdir(config_file):
        raise ConfigError(f"{config_file} is a folder, not the run's "
                          "config.gin")
    if not os.path.isfile(config_file):
        raise ConfigError(f"{config_file} is missing: --root_dir must be a "
                          "run's folder (alf.bin.train writes it)")
    path, steps = _checkpoint(root_dir, checkpoint)
    parse_run_config(run_config(root_dir, steps), gin_params)
    cfg = TrainerConfig()
    return path, cfg, _split_load_fn(cfg, split, root_dir)


@torch.inference_mode()
def _episode(env, algorithm, seed: int, sampling: bool, writer,
             act: Optional[Callable] = None):
    ts = env.reset(seed=seed)
    if sampling or act is not None:
        # The episode's own action noise, as the evaluator gives its
        # episode e: a replay of episode e alone (--seed e --num_episodes
        # 1) plays it again.
        torch.manual_seed(seed)
        from alf.trainers.evaluator import noise_carriers
        for module in noise_carriers(algorithm):
            module.set_noise_state(None)
    total, length, row = 0.0, 0, {}
    while True:
        if writer:
            writer.add(env.render())
        obs = algorithm.observe(ts.observation, update=False)
        if act is not None:
            action = act(algorithm, obs, ts.observation)
        else:
            action = (algorithm.rollout_step(obs) if sampling else
                      algorithm.predict_step(obs)).output
        ts = env.step(action)
        total += float(ts.reward[0])
        length += 1
        if bool(ts.done[0]):
            # No frame after the last step: the environment has already
            # reset to the next episode (gymnasium's same-step autoreset).
            row = {k: float(v[0]) for k, v in ts.episode_info.items()}
            return {"return": total, "length": float(length), **row}


def _require(*modules: str) -> None:
    import importlib
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise ConfigError(f"--record_file needs {name.split('.')[0]}: "
                              f"{VIDEO_INSTALL}") from e


def _takes(fn: Callable, name: str) -> bool:
    """Whether ``fn`` accepts the keyword argument ``name``."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # no signature to read: let it try
        return True
    return name in params or any(p.kind is p.VAR_KEYWORD
                                 for p in params.values())


def _remove_orphans(folder: str, name: str, ext: str) -> None:
    """Removes the temporary videos for ``name`` that a play killed outright
    (out of memory, SIGKILL) left behind: hidden, a video's size each. The
    writer's process id is in the name; a live one's file stays."""
    pattern = re.compile(rf"\.{re.escape(name)}\.(\d+)\.\w+\.tmp"
                         rf"{re.escape(ext)}")
    for entry in os.listdir(folder):
        m = pattern.fullmatch(entry)
        if m is None or _alive(int(m.group(1))):
            continue
        with contextlib.suppress(OSError):
            os.remove(os.path.join(folder, entry))
            print(f"removed {entry}, the unfinished video of a play that "
                  "was killed", file=sys.stderr)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


class _VideoWriter:
    """Writes frames as they come as a GIF (Pillow) or an MP4 (imageio +
    ffmpeg, the ``video`` extra), holding one frame at a time.

    The frames go to a hidden temporary file beside ``path`` that `close`
    renames into place: a failed or interrupted play (`abort`) leaves
    ``path`` as it was, never empty or cut short.
    """

    def __init__(self, path: str, fps: int):
        ext = os.path.splitext(path)[1].lower()
        if ext not in VIDEO_FORMATS:
            raise ConfigError(f"--record_file={path!r}: use a "
                              f"{' or '.join(VIDEO_FORMATS)} file")
        _require(*(("imageio.v2", "imageio_ffmpeg") if ext == ".mp4" else
                   ("PIL",)))
        # Refused before playing, not after, and without creating ``path``.
        folder, name = os.path.split(os.path.abspath(path))
        if os.path.isdir(path):
            raise ConfigError(f"--record_file={path!r} is a folder; name a "
                              f"file, e.g. {os.path.join(path, 'play' + ext)}")
        try:
            if os.path.exists(path) and not os.access(path, os.W_OK):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
            _remove_orphans(folder, name, ext)
            fd, self._tmp = tempfile.mkstemp(
                prefix=f".{name}.{os.getpid()}.", suffix=".tmp" + ext,
                dir=folder)
        except OSError as e:
            raise ConfigError(f"--record_file={path!r} cannot be written "
                              f"({e.strerror or e})") from e
        self.path, self.count = path, 0
        # mkstemp's file is the owner's alone: give the video the mode a
        # plain open() would.
        umask = os.umask(0)
        os.umask(umask)
        self._mode = 0o666 & ~umask
        self._out: Any  # a _GifStream or imageio's writer: append_data, close
        if ext == ".gif":
            self._out = _GifStream(os.fdopen(fd, "wb"), fps)
            return
        os.close(fd)
        try:
            import imageio.v2 as imageio
            self._out = imageio.get_writer(self._tmp, fps=fps,
                                           macro_block_size=1)
        except BaseException:
            os.remove(self._tmp)
            raise

    def add(self, frame: np.ndarray) -> None:
        frame = np.array(frame, dtype=np.uint8)
        # A time strip along the bottom edge, one pixel longer each frame
        # (wrapping): a car standing still still visibly plays, and GIF
        # tools that merge equal consecutive frames keep one per step.
        tick = self.count % frame.shape[1]
        frame[-3:, :tick + 1] = 255
        frame[-3:, tick + 1:] = 0
        try:
            self._out.append_data(frame)
        except OSError as e:  # a full disk; ffmpeg gone (a broken pipe)
            raise self._failed(e) from None
        self.count += 1

    def close(self) -> None:
        """Finishes the file, checks it and renames it to ``path``.

        Raises:
            ConfigError: if the video could not be written whole (a full
                disk); ``path`` stays as it was.
        """
        try:
            try:
                self._out.close()
                self._check()
            except OSError as e:
                raise self._failed(e) from None
            os.chmod(self._tmp, self._mode)
            os.replace(self._tmp, self.path)
        except BaseException:
            self.abort()
            raise

    def _check(self) -> None:
        """Refuses an MP4 that ffmpeg did not finish: imageio ignores
        ffmpeg's exit status, and one that could not write its trailer (a
        full disk) leaves a file no player opens."""
        if not self._tmp.endswith(".mp4"):
            return  # Pillow's and the GIF stream's writes raise themselves
        import imageio_ffmpeg

        from alf.trainers.checkpointer import free_space
        space = free_space(os.path.dirname(os.path.abspath(self._tmp)))
        try:
            frames, _ = imageio_ffmpeg.count_frames_and_secs(self._tmp)
        except (RuntimeError, OSError) as e:
            raise OSError(errno.EIO,
                          f"ffmpeg could not finish it, {space}") from e
        if frames != self.count:
            raise OSError(errno.EIO, f"it holds {frames} of its "
                          f"{self.count} frames, {space}")

    def _failed(self, error: OSError) -> ConfigError:
        reason = error.strerror or one_line(error)
        return ConfigError(f"--record_file={self.path!r} could not be "
                           f"written ({reason}); a file already there is "
                           "kept")

    def abort(self) -> None:
        """Removes the temporary file; ``path`` stays as it was."""
        if not os.path.exists(self._tmp):
            return  # closed (renamed) or aborted already
        try:
            self._out.close()
        except Exception:  # a half-written video: removed anyway
            pass
        os.remove(self._tmp)


class _GifStream:
    """An animated GIF written frame by frame (Pillow's own writer wants
    every frame at once). As Pillow's, a frame stores only the box that
    changed, and its own palette only where it differs from the first's."""

    def __init__(self, file, fps: int):
        self._file = file
        self._ms = max(1000 // fps, 20)  # browsers play shorter delays slow
        self._last: Optional[np.ndarray] = None
        self._palette: Optional[list] = None

    def append_data(self, frame: np.ndarray) -> None:
        from PIL import GifImagePlugin, Image
        top, left = 0, 0
        if self._last is not None and self._last.shape == frame.shape:
            rows, cols = np.nonzero(np.any(frame != self._last, axis=-1))
            if rows.size:
                top, left = rows.min(), cols.min()
                box = frame[top:rows.max() + 1, left:cols.max() + 1]
            else:  # a frame all the same still takes its time
                box = frame[:1, :1]
        else:
            box = frame
        self._last = frame
        im = Image.fromarray(box).convert("P",
                                          palette=Image.Palette.ADAPTIVE)
        if self._palette is None:
            header, _ = GifImagePlugin.getheader(im, info={"loop": 0})
            self._file.writelines(header)
            self._palette = im.getpalette()
        self._file.writelines(GifImagePlugin.getdata(
            im, (int(left), int(top)), duration=self._ms, disposal=1,
            include_color_table=im.getpalette() != self._palette))

    def close(self) -> None:
        if not self._file.closed:
            self._file.write(b";")  # the GIF trailer
            self._file.close()


def format_table(rows: List[Dict[str, float]]) -> str:
    """The per-episode table and the means, as text."""
    means = mean_row(rows)
    names = list(means)
    head = f"{'episode':>7} " + " ".join(f"{n:>16}" for n in names)
    lines = [head]
    for i, row in enumerate(rows):
        lines.append(f"{i:>7} " + " ".join(
            f"{row.get(n, math.nan):16.3f}" for n in names))
    lines.append(f"{'mean':>7} " + " ".join(f"{means[n]:16.3f}"
                                            for n in names))
    return "\n".join(lines)


def mean_row(rows: List[Dict[str, float]]) -> Dict[str, float]:
    """The mean of every column of `play`'s rows (a column some episodes
    lack averages over those that have it), in the table's order."""
    names = list(rows[0])
    for row in rows[1:]:
        names += [n for n in row if n not in names]
    return {n: float(np.nanmean([r.get(n, math.nan) for r in rows]))
            for n in names}


def _split(split: str, held_out: bool) -> str:
    """``--split``, with ``--held_out`` its shorthand."""
    if held_out and split not in ("training", "held_out"):
        raise ConfigError(f"--held_out with --split={split}: give one of "
                          "them")
    return "held_out" if held_out else split


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    FLAGS = flags.FLAGS
    # A video being written is removed, an existing one kept.
    cli.exit_on_stop_signals("alf.bin.play")
    # As train and report: `--root_dir=~/runs/x` reaches it unexpanded.
    record_file = FLAGS.record_file and os.path.expanduser(FLAGS.record_file)
    rows = run_cli("alf.bin.play", play, os.path.expanduser(FLAGS.root_dir),
                   FLAGS.checkpoint, FLAGS.num_episodes, FLAGS.sampling,
                   record_file,
                   FLAGS.gin_param or (), FLAGS.seed, FLAGS.fps,
                   split=run_cli("alf.bin.play", _split, FLAGS.split,
                                 FLAGS.held_out))
    print(format_table(rows))
    if record_file:
        print(f"wrote {record_file}")


if __name__ == "__main__":
    define_flags()
    flags.mark_flag_as_required("root_dir")
    cli.run(main, __name__)
