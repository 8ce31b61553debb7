"""alf.bin.play: the per-episode table, videos that decode to one frame per
step, the checkpoint choice and one-line errors."""
import json
import os
import re
import subprocess
import sys

import pytest

from test_train_distributed import REPO

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def cart_pole_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("play") / "run"
    res = subprocess.run(
        [sys.executable, "-m", "alf.bin.train", "--gin_file",
         "ppo_cart_pole.gin", "--root_dir", str(root), "--gin_param",
         "TrainerConfig.num_env_steps=1024", "--gin_param",
         "TrainerConfig.eval_interval=2", "--gin_param",
         "TrainerConfig.num_eval_episodes=2"],
        capture_output=True, text=True, timeout=150, cwd=REPO)
    assert res.returncode == 0, res.stderr[-3000:]
    return root


def _play(root, *args):
    return subprocess.run(
        [sys.executable, "-m", "alf.bin.play", "--root_dir", str(root),
         *args], capture_output=True, text=True, timeout=150, cwd=REPO)


def _lengths(stdout):
    """The episode lengths of the printed table."""
    rows = [ln.split() for ln in stdout.splitlines()
            if re.match(r"\s*\d+\s", ln)]
    return [int(float(r[2])) for r in rows]


def test_two_episodes_to_a_gif_of_one_frame_per_step(cart_pole_run,
                                                      tmp_path):
    from PIL import Image
    out = tmp_path / "cp.gif"
    res = _play(cart_pole_run, "--num_episodes", "2", "--record_file",
                str(out))
    assert res.returncode == 0, res.stderr[-3000:]
    lengths = _lengths(res.stdout)
    assert len(lengths) == 2 and all(n > 0 for n in lengths)
    assert re.search(r"^\s*mean\s", res.stdout, re.M)
    with Image.open(out) as gif:
        assert gif.n_frames == sum(lengths)
        assert gif.size == (600, 400)  # CartPole's rgb_array frames


def test_mp4_and_the_best_checkpoint(cart_pole_run, tmp_path):
    import imageio.v2 as imageio
    out = tmp_path / "cp.mp4"
    res = _play(cart_pole_run, "--checkpoint", "best", "--record_file",
                str(out), "--num_episodes", "1", "--sampling")
    assert res.returncode == 0, res.stderr[-3000:]
    reader = imageio.get_reader(str(out))
    assert reader.count_frames() == sum(_lengths(res.stdout))
    # Same seed, same checkpoint, deterministic policy: the same episode.
    again = [_play(cart_pole_run, "--num_episodes", "1").stdout
             for _ in range(2)]
    assert again[0] == again[1]


def test_sampling_replays_episode_by_episode(cart_pole_run):
    def rows(*args):
        res = _play(cart_pole_run, "--sampling", *args)
        assert res.returncode == 0, res.stderr[-3000:]
        return [ln.split()[1:] for ln in res.stdout.splitlines()
                if re.match(r"\s*\d+\s", ln)]

    three = rows("--seed", "5", "--num_episodes", "3")
    assert rows("--seed", "7", "--num_episodes", "1") == three[2:]
    assert rows("--seed", "5", "--num_episodes", "3") == three


@pytest.mark.parametrize("args,message", [
    (["--checkpoint", "999"], r"--checkpoint=999: no such checkpoint .* "
                              r"\(there: latest, best, 1024\)"),
    (["--checkpoint", "oldest"], r"use latest, best or a number"),
    (["--record_file", "/no/such/folder/x.gif"], r"cannot be written"),
    (["--record_file", "x.avi"], r"use a \.gif or \.mp4 file"),
    (["--held_out"], r"the run in .* has no held-out environments to "
                     r"play"),
    (["--held_out", "--split", "calibration"],
     r"--held_out with --split=calibration: give one of them"),
    # Other networks than the run trained: the first tensor that does not
    # fit, both shapes, and what to do (not a traceback).
    (["--gin_param", "ActorDistributionNetwork.hidden_sizes=(32,)"],
     r"checkpoint \S+ does not fit this config \(.*\[.*\].*\[.*\].*\); "
     r"play another checkpoint than this one \(--checkpoint"),
])
def test_bad_inputs_are_one_line_errors(cart_pole_run, args, message):
    res = _play(cart_pole_run, *args)
    assert res.returncode == 1
    assert "Traceback" not in res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert re.search(message, last), res.stderr
    assert not os.path.exists("x.avi")


def test_a_record_file_that_is_a_folder_is_named_so(tmp_path):
    """As root the folder passed the access check and was "Permission
    denied"."""
    from alf.bin.play import _VideoWriter
    from alf.utils.errors import ConfigError
    folder = tmp_path / "clips.gif"
    folder.mkdir()
    with pytest.raises(ConfigError) as info:
        _VideoWriter(str(folder), 30)
    assert str(info.value) == (
        f"--record_file={str(folder)!r} is a folder; name a file, e.g. "
        f"{folder / 'play.gif'}")
    assert os.listdir(folder) == [] and os.listdir(tmp_path) == ["clips.gif"]


def test_an_unreadable_checkpoint_says_what_play_can_do(cart_pole_run,
                                                         tmp_path):
    import shutil
    run = tmp_path / "run"
    shutil.copytree(cart_pole_run, run)
    ckpt = next(p for p in (run / "ckpt").iterdir()
                if p.name.startswith("ckpt-"))
    ckpt.write_bytes(b"not a checkpoint")
    res = _play(run, "--checkpoint", ckpt.name[len("ckpt-"):-len(".pt")])
    assert res.returncode == 1
    last = res.stderr.strip().splitlines()[-1]
    assert "is unreadable" in last and "play another" in last, res.stderr
    assert "resume" not in last, last


def test_a_negative_seed_is_a_flag_error(cart_pole_run):
    res = _play(cart_pole_run, "--seed", "-1")
    assert res.returncode == 1
    assert "Traceback" not in res.stderr
    assert "--seed=-1: -1 is not a non-negative integer" in res.stderr


def _copy_run(run, tmp_path):
    import shutil
    shutil.copytree(run, tmp_path / "run")
    return tmp_path / "run"


def _last_error(res):
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    return res.stderr.strip().splitlines()[-1]


def test_a_run_with_only_its_best_checkpoint_points_there(cart_pole_run,
                                                          tmp_path):
    """Between a run's first evaluation and first periodic checkpoint,
    ckpt/ holds best.pt alone: --checkpoint latest says best is there."""
    run = _copy_run(cart_pole_run, tmp_path)
    for p in (run / "ckpt").glob("ckpt-*.pt"):
        p.unlink()
    last = _last_error(_play(run))
    assert re.search(r"--checkpoint=latest: no such checkpoint in \S+ "
                     r"\(there: best; use --checkpoint best\)$", last), last
    res = _play(run, "--checkpoint", "best", "--num_episodes", "1")
    assert res.returncode == 0, res.stderr[-3000:]


def test_an_unreadable_best_json_is_named(cart_pole_run, tmp_path):
    run = _copy_run(cart_pole_run, tmp_path)
    (run / "ckpt" / "best.json").write_text("garbage\n")
    last = _last_error(_play(run, "--checkpoint", "best"))
    assert re.search(r"--checkpoint=best: \S+/ckpt/best\.json is "
                     r"unreadable .*play another \(there: latest, 1024\)",
                     last), last
    (run / "ckpt" / "best.json").unlink()
    last = _last_error(_play(run, "--checkpoint", "best"))
    assert re.search(r"best\.json \(best\.pt's record\) is missing", last)


def test_a_failed_or_interrupted_play_leaves_no_video(cart_pole_run,
                                                      tmp_path):
    """A play that fails (a checkpoint that does not fit) or is
    interrupted (Ctrl-C mid-episode) leaves no file under the video's name,
    and an existing video as it was."""
    out = tmp_path / "videos" / "cp.gif"
    out.parent.mkdir()
    res = _play(cart_pole_run, "--record_file", str(out), "--gin_param",
                "ActorDistributionNetwork.hidden_sizes=(32,)")
    assert res.returncode == 1 and "does not fit" in res.stderr
    assert os.listdir(out.parent) == []
    out.write_bytes(b"a good video")
    script = f"""
from alf.bin.play import play
steps = []
def interrupted(algorithm, obs, raw):
    steps.append(1)
    if len(steps) == 5:
        raise KeyboardInterrupt
    import torch
    return torch.zeros(1, dtype=torch.int64)
play({str(cart_pole_run)!r}, num_episodes=1, act=interrupted,
     record_file={str(out)!r})
"""
    res = subprocess.run([sys.executable, "-c", script], capture_output=True,
                         text=True, timeout=150, cwd=REPO)
    assert res.returncode != 0 and "KeyboardInterrupt" in res.stderr
    assert out.read_bytes() == b"a good video"
    assert os.listdir(out.parent) == ["cp.gif"]


def test_sigterm_while_recording_stops_keeping_the_old_video(cart_pole_run,
                                                            tmp_path):
    """SDL (pygame's rendering) took SIGTERM for itself: the play went on
    to its end and replaced the video."""
    import signal
    import time
    out = tmp_path / "cp.gif"
    out.write_bytes(b"a good video")
    proc = subprocess.Popen(
        [sys.executable, "-m", "alf.bin.play", "--root_dir",
         str(cart_pole_run), "--num_episodes", "50", "--record_file",
         str(out)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    try:
        deadline = time.time() + 120
        while len(os.listdir(tmp_path)) < 2 and time.time() < deadline:
            time.sleep(0.1)  # until the video's temporary file exists
        time.sleep(1.0)  # frames being written
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert err.strip().splitlines()[-1] == "alf.bin.play: SIGTERM: stopped"
    assert out.read_bytes() == b"a good video"
    assert os.listdir(tmp_path) == ["cp.gif"]


def _means(stdout):
    line = next(ln for ln in stdout.splitlines() if ln.split()[:1] == ["mean"])
    return [float(x) for x in line.split()[1:]]


def test_a_replay_of_a_checkpoint_is_its_evaluation(tmp_path):
    """By default, play's episode e starts where the run's evaluations
    started theirs, with the same noise: replaying the last checkpoint
    (sampling, as this run evaluated) gives eval.csv's last row, and
    ``--held_out`` eval_held_out.csv's. The held-out environments end
    episodes at 9 steps, so the two sets differ."""
    root = tmp_path / "run"
    res = subprocess.run(
        [sys.executable, "-m", "alf.bin.train", "--gin_file",
         "ppo_cart_pole.gin", "--root_dir", str(root), "--gin_param",
         "TrainerConfig.num_env_steps=1024", "--gin_param",
         "TrainerConfig.eval_interval=4", "--gin_param",
         "TrainerConfig.num_eval_episodes=3", "--gin_param",
         "TrainerConfig.eval_deterministic=False", "--gin_param",
         "TrainerConfig.held_out_env_load_fn=@held_out/suite_gym.load",
         "--gin_param", "held_out/suite_gym.load.max_episode_steps=9"],
        capture_output=True, text=True, timeout=150, cwd=REPO)
    assert res.returncode == 0, res.stderr[-3000:]

    def last_row(name):
        with open(root / name) as f:
            row = f.read().strip().splitlines()[-1].split(",")
        return float(row[0]), float(row[1])  # env steps, average return

    steps, evaluated = last_row("eval.csv")
    held_steps, held_evaluated = last_row("eval_held_out.csv")
    assert steps == held_steps == 1024
    replay = _play(root, "--sampling", "--num_episodes", "3")
    assert replay.returncode == 0, replay.stderr[-3000:]
    held = _play(root, "--sampling", "--num_episodes", "3", "--held_out")
    assert held.returncode == 0, held.stderr[-3000:]
    assert _means(replay.stdout)[0] == pytest.approx(evaluated, abs=1e-3)
    assert _means(held.stdout)[0] == pytest.approx(held_evaluated, abs=1e-3)
    assert held_evaluated <= 9 < evaluated
    # Another seed plays other episodes.
    other = _play(root, "--sampling", "--num_episodes", "3", "--seed", "0")
    assert _means(other.stdout)[0] != _means(replay.stdout)[0]


def test_a_folder_that_is_not_a_run(tmp_path):
    res = _play(tmp_path / "missing")
    assert res.returncode == 1 and "does not exist" in res.stderr
    res = _play(tmp_path)
    assert res.returncode == 1 and "config.gin is missing" in res.stderr
    (tmp_path / "afile").write_text("")
    res = _play(tmp_path / "afile")
    assert res.returncode == 1 and "is a file, not a run's folder" in \
        res.stderr, res.stderr


def test_a_root_dir_under_home_is_expanded(cart_pole_run, tmp_path):
    """`--root_dir=~/runs/x` (no shell expands that ~), as train and report
    read it: play said it did not exist."""
    out = tmp_path / "cp.gif"
    res = subprocess.run(
        [sys.executable, "-m", "alf.bin.play", f"--root_dir=~/{cart_pole_run.name}",
         "--num_episodes", "1", f"--record_file=~/{out.name}"],
        capture_output=True, text=True, timeout=150, cwd=REPO,
        env=dict(os.environ, HOME=str(cart_pole_run.parent)))
    assert res.returncode == 0, res.stderr[-3000:]
    written = cart_pole_run.parent / out.name
    assert res.stdout.endswith(f"wrote {written}\n"), res.stdout
    os.remove(written)


def test_an_act_function_replaces_the_policy(cart_pole_run):
    """`play`'s ``act`` hook (what benchmarks/action_probe.py plays with)
    chooses every action: always pushing left ends CartPole within a few
    steps, and it sees the raw observations the environment returned."""
    # In a process of its own, as a script would: this one's gin registry
    # holds what other tests imported.
    script = f"""
import json, torch
from alf.bin.play import play
seen = []
def left(algorithm, obs, raw):
    seen.append(raw[0, 1].item())  # the cart's velocity
    return torch.zeros(1, dtype=torch.int64)
rows = play({str(cart_pole_run)!r}, num_episodes=2, act=left)
print(json.dumps({{"lengths": [r["length"] for r in rows], "v": seen}}))
"""
    res = subprocess.run([sys.executable, "-c", script], capture_output=True,
                         text=True, timeout=150, cwd=REPO)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    lengths, velocity = out["lengths"], out["v"]
    assert all(n <= 12 for n in lengths), lengths
    assert len(velocity) == sum(lengths)
    # Pushed left every step, the cart's velocity only falls.
    first = velocity[:int(lengths[0])]
    assert all(b < a for a, b in zip(first, first[1:])), first


def test_a_checkpoint_plays_with_the_config_it_trained_with(tmp_path):
    """A run resumed at 2048 and at 4096 with other bindings: checkpoints
    up to 2048 are config.gin's, later ones the last resume's."""
    from alf.bin.play import run_config
    for name in ("config.gin", "config-resumed-2048.gin",
                 "config-resumed-4096.gin"):
        (tmp_path / name).write_text("")
    expect = {1024: "config.gin", 2048: "config.gin",
              3072: "config-resumed-2048.gin",
              4096: "config-resumed-2048.gin",
              8192: "config-resumed-4096.gin"}
    for steps, name in expect.items():
        assert run_config(str(tmp_path), steps) == str(tmp_path / name)


def test_the_clis_import_side_by_side():
    """The CLIs are for scripts too (benchmarks import `compare` and `play`):
    importing one after another (each defines --root_dir) must not clash,
    and each still parses its own flags when run."""
    res = subprocess.run(
        [sys.executable, "-c",
         "import alf.bin.train, alf.bin.compare, alf.bin.play"],
        capture_output=True, text=True, timeout=120, cwd=REPO)
    assert res.returncode == 0, res.stderr[-2000:]
    for cli, flag in (("train", "--stop_grace"), ("compare", "--tol_abs"),
                      ("play", "--record_file")):
        res = subprocess.run([sys.executable, "-m", f"alf.bin.{cli}",
                              "--help"], capture_output=True, text=True,
                             timeout=120, cwd=REPO)
        assert flag in res.stdout + res.stderr, (cli, res.stderr[-2000:])


def test_a_gymnasium_run_plays_where_metadrive_is_registered(cart_pole_run):
    """A CartPole run saves its loader as bare ``load``; a script that has
    imported suite_metadrive (a second ``load``) can still play it."""
    assert "\nload.clip_action" in (cart_pole_run / "config.gin").read_text()
    script = f"""
import alf.environments.suite_metadrive
from alf.bin.play import play
rows = play({str(cart_pole_run)!r}, num_episodes=1)
print(len(rows))
"""
    res = subprocess.run([sys.executable, "-c", script], capture_output=True,
                         text=True, timeout=150, cwd=REPO)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip().splitlines()[-1] == "1"


def test_deterministic_gap_reads_plays_mean_row(cart_pole_run):
    # benchmarks/deterministic_gap.py's cells are the mean row of one
    # alf.bin.play each (its table logic: tests/benchmarks).
    sys.path.insert(0, os.path.join(REPO, "benchmarks"))
    from deterministic_gap import play_means
    got = play_means(str(cart_pole_run), "latest", 2, True, [])
    res = _play(cart_pole_run, "--checkpoint", "latest", "--num_episodes",
                "2", "--sampling", "--seed", "0")  # deterministic_gap's
    assert res.returncode == 0, res.stderr[-3000:]
    lines = res.stdout.splitlines()
    head = [ln.split()[1:] for ln in lines if ln.split()[:1] == ["episode"]]
    mean = [ln.split()[1:] for ln in lines if ln.split()[:1] == ["mean"]]
    assert list(got) == head[-1] == ["return", "length"]
    assert list(got.values()) == [float(v) for v in mean[-1]]


def test_recording_needs_a_render_argument_of_the_load_function():
    """--record_file asks the run's load function for environments that
    render; one without the argument is refused before it is called."""
    import gin

    from alf.bin.play import _takes
    from alf.environments import suite_gym, straggler

    def mine(env_name, num_envs, seed, asynchronous):
        pass

    assert not _takes(mine, "render")
    assert _takes(lambda *a, **kw: None, "render")  # passes it on
    assert _takes(suite_gym.load, "render")
    assert _takes(straggler.straggler_load, "render")
    assert _takes(gin.external_configurable(mine, "mine_q"), "render") is \
        False


def test_latest_removed_as_play_opens_it_plays_the_new_latest(cart_pole_run,
                                                              tmp_path):
    """A run still training saves a checkpoint and removes its oldest
    between play's listing and its reading: play said the checkpoint was
    'corrupt'. Now 'latest' is looked up again; a named one that is gone
    says so."""
    import shutil
    run = tmp_path / "run"
    shutil.copytree(cart_pole_run, run)
    shutil.copy(run / "ckpt" / "ckpt-1024.pt", run / "ckpt" / "ckpt-512.pt")
    script = f"""
import os
import alf.bin.play as play_module
read = play_module.read_checkpoint
opened = []
def rotated(path):
    opened.append(os.path.basename(path))
    if len(opened) == 1:
        os.remove(path)  # as the training's rotation would
    return read(path)
play_module.read_checkpoint = rotated
rows = play_module.play({str(run)!r}, num_episodes=1)
print(opened, len(rows))
"""
    res = subprocess.run([sys.executable, "-c", script], capture_output=True,
                         text=True, timeout=150, cwd=REPO)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip() == "['ckpt-1024.pt', 'ckpt-512.pt'] 1"
    res = _play(run, "--checkpoint", "512")
    assert res.returncode == 0, res.stderr[-3000:]
    os.remove(run / "ckpt" / "ckpt-512.pt")
    (run / "ckpt" / "ckpt-512.pt").mkdir()  # listed, but not a file
    res = _play(run, "--checkpoint", "512")
    assert res.returncode == 1
    assert res.stderr == (
        f"alf.bin.play: error: checkpoint {run}/ckpt/ckpt-512.pt cannot be "
        "read (Is a directory); play another checkpoint than this one "
        "(--checkpoint latest, best or an env-step count in ckpt/) or with "
        "the config it was trained with\n")
