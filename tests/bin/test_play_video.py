"""alf.bin.play's video writer: frames written as they come (memory stays
flat however long the play), to a temporary file renamed into place only
at the end (a failed or interrupted play leaves nothing under the user's
name). Playing a run into a video: test_play.py."""
import errno
import gc
import os
import tracemalloc

import numpy as np
import pytest

from alf.bin.play import _VideoWriter
from alf.utils.errors import ConfigError

pytestmark = pytest.mark.timeout(120)

SHAPE = (120, 160, 3)


def _frames(n):
    # Few colours, so that a GIF's palette holds them exactly.
    rng = np.random.default_rng(0)
    colours = rng.integers(0, 255, (8, 3), dtype=np.uint8)
    base = colours[rng.integers(0, 8, SHAPE[:2])]
    for i in range(n):
        frame = base.copy()
        frame[10:30, i % 140:i % 140 + 20] = (255, 0, 0)  # a moving box
        yield frame


@pytest.mark.parametrize("ext", [".gif", ".mp4"])
def test_frames_are_not_kept_in_memory(tmp_path, ext):
    """300 frames held would be 17 MB; written as they come, what Python
    holds after them is a few frames' worth (numpy reports its arrays to
    tracemalloc)."""
    frame_bytes = int(np.prod(SHAPE))
    writer = _VideoWriter(str(tmp_path / f"v{ext}"), fps=30)
    writer.add(next(_frames(1)))  # the encoder's one-off set-up
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for frame in _frames(300):
            writer.add(frame)
        gc.collect()  # Pillow's per-frame classes are freed in cycles
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    writer.close()
    assert held < 5 * frame_bytes, held
    assert _count_frames(tmp_path / f"v{ext}") == 301


def _count_frames(path):
    if path.suffix == ".gif":
        from PIL import Image
        with Image.open(path) as gif:
            return gif.n_frames
    import imageio.v2 as imageio
    return imageio.get_reader(str(path)).count_frames()


def test_a_gif_decodes_to_the_frames_written(tmp_path):
    """Each frame stores only the box that changed: decoded, every frame
    is whole (but the time strip along the bottom edge)."""
    from PIL import Image
    frames = list(_frames(20))
    frames[5] = frames[4].copy()  # a still frame still takes its step
    writer = _VideoWriter(str(tmp_path / "v.gif"), fps=30)
    for frame in frames:
        writer.add(frame)
    writer.close()
    with Image.open(tmp_path / "v.gif") as gif:
        assert gif.n_frames == len(frames)
        for i, frame in enumerate(frames):
            gif.seek(i)
            got = np.asarray(gif.convert("RGB"))
            assert (got[:-3] == frame[:-3]).all(), i


@pytest.mark.parametrize("ext", [".gif", ".mp4"])
def test_an_aborted_video_leaves_no_file(tmp_path, ext):
    path = tmp_path / f"v{ext}"
    writer = _VideoWriter(str(path), fps=30)
    for frame in _frames(5):
        writer.add(frame)
    writer.abort()
    assert os.listdir(tmp_path) == []
    # An existing video stays as it was, until a new one is complete.
    path.write_bytes(b"a good video")
    writer = _VideoWriter(str(path), fps=30)
    writer.add(next(_frames(1)))
    assert path.read_bytes() == b"a good video"
    writer.abort()
    assert path.read_bytes() == b"a good video"
    assert os.listdir(tmp_path) == [path.name]
    writer = _VideoWriter(str(path), fps=30)
    writer.add(next(_frames(1)))
    writer.close()
    writer.abort()  # after close: nothing to do
    assert _count_frames(path) == 1
    assert os.listdir(tmp_path) == [path.name]


def _cut_after_close(writer):
    """Cuts the temporary file in half once its writer closed, as a disk
    that filled while ffmpeg wrote the trailer leaves it (imageio ignores
    ffmpeg's exit status)."""
    close = writer._out.close

    def cut():
        close()
        with open(writer._tmp, "r+b") as f:
            f.truncate(os.path.getsize(writer._tmp) // 2)

    writer._out.close = cut


def _fail_writes(writer):
    def full(frame):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    writer._out.append_data = full


@pytest.mark.parametrize("ext, damage", [(".mp4", _cut_after_close),
                                         (".gif", _fail_writes),
                                         (".mp4", _fail_writes)])
def test_a_video_that_could_not_be_written_whole_is_an_error(tmp_path, ext,
                                                             damage):
    """It printed 'wrote' and exited 0, and put an MP4 no player opens in
    place of the user's video; a GIF's full disk was a traceback."""
    path = tmp_path / f"v{ext}"
    path.write_bytes(b"a good video")
    writer = _VideoWriter(str(path), fps=30)
    for frame in _frames(20):
        writer.add(frame)
    damage(writer)
    with pytest.raises(ConfigError) as info:
        try:  # as play does
            writer.add(next(_frames(1)))
            writer.close()
        finally:
            writer.abort()
    said = str(info.value)
    assert said.startswith(f"--record_file={str(path)!r} could not be "
                           "written ("), said
    assert said.endswith("); a file already there is kept"), said
    assert "\n" not in said
    assert path.read_bytes() == b"a good video"
    assert os.listdir(tmp_path) == [path.name]


def test_a_video_gets_the_mode_a_plain_file_would(tmp_path):
    umask = os.umask(0o022)
    try:
        writer = _VideoWriter(str(tmp_path / "v.gif"), fps=30)
        writer.add(next(_frames(1)))
        writer.close()
    finally:
        os.umask(umask)
    assert os.stat(tmp_path / "v.gif").st_mode & 0o777 == 0o644


def test_a_killed_plays_temporary_video_is_removed_by_the_next(tmp_path,
                                                                 capsys):
    import subprocess
    import sys
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a process id that no process holds now
    orphan = tmp_path / f".v.gif.{dead.pid}.abcd_123.tmp.gif"
    live = tmp_path / f".v.gif.{os.getpid()}.efgh_456.tmp.gif"
    other = tmp_path / f".w.gif.{dead.pid}.abcd_123.tmp.gif"
    for f in (orphan, live, other):
        f.write_bytes(b"GIF89a")
    writer = _VideoWriter(str(tmp_path / "v.gif"), fps=30)
    writer.add(np.zeros((8, 8, 3), np.uint8))
    writer.close()
    assert not orphan.exists()
    assert live.exists() and other.exists()  # a live play's; another video's
    assert f"removed {orphan.name}" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [live.name, other.name, "v.gif"])


@pytest.mark.parametrize("recording", [True, False])
def test_a_missing_rendering_package_names_the_video_install(
        recording, monkeypatch):
    """suite_gym turns gymnasium's DependencyNotInstalled into a one-line
    AlfError of its own; a recording still names the install that has
    pygame, and a play without one keeps suite_gym's line."""
    import types

    import gymnasium as gym
    import torch

    from alf.bin.play import VIDEO_INSTALL, _play
    from alf.utils.errors import AlfError

    def load(env_name, num_envs=1, seed=None, asynchronous=False,
             render=False):
        try:
            raise gym.error.DependencyNotInstalled("pygame is not installed")
        except gym.error.DependencyNotInstalled as e:
            raise AlfError(f"environment {env_name} cannot be built") from e

    from alf.environments import env_fn
    # _play marks its process as the environments' own, and sets SDL's
    # variables: this test's process is a pytest worker's.
    monkeypatch.setattr(env_fn, "_environment_process", False)
    for name in ("SDL_VIDEODRIVER", "SDL_NO_SIGNAL_HANDLERS",
                 "SDL_AUDIODRIVER"):
        monkeypatch.setenv(name, os.environ.get(name, "dummy"))
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)
    cfg = types.SimpleNamespace(seed=0, torch_num_threads=1,
                                env_name="Toy-v0")
    with pytest.raises(AlfError) as info:
        _play(cfg, {}, "ckpt.pt", load, 1, False,
              object() if recording else None, 0, None)
    if recording:
        assert isinstance(info.value, ConfigError)
        assert str(info.value).startswith(
            "rendering Toy-v0 needs a package that is missing (pygame is "
            "not installed)")
        assert VIDEO_INSTALL in str(info.value)
    else:
        assert str(info.value) == "environment Toy-v0 cannot be built"
