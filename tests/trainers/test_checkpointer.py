"""Tests of alf/trainers/checkpointer.py."""
import errno
import os
import re

import pytest
import torch

from alf.trainers.checkpointer import Checkpointer, aside_name
from alf.utils.errors import CheckpointError


class NotAWeight:
    """An arbitrary Python object: unpickling it could run code."""

    def __init__(self):
        self.payload = "anything"


def _state(x):
    return {"w": torch.full((3,), float(x)), "counters": {"env_steps": x}}


def _names(ckpt_dir):
    return sorted(os.listdir(ckpt_dir))


def test_save_creates_folder_and_roundtrips(tmp_path):
    ckpt_dir = tmp_path / "run" / "ckpt"
    c = Checkpointer(str(ckpt_dir))
    assert c.latest() is None  # folder does not exist yet
    path = c.save(_state(7), env_steps=7)
    assert path == str(ckpt_dir / "ckpt-7.pt")
    assert c.latest() == path
    loaded = Checkpointer.load(path)
    assert torch.equal(loaded["w"], torch.full((3,), 7.0))
    assert loaded["counters"] == {"env_steps": 7}
    assert _names(ckpt_dir) == ["ckpt-7.pt"]  # no temporary left behind


def test_latest_orders_by_env_steps_not_by_name(tmp_path):
    c = Checkpointer(str(tmp_path), max_to_keep=None)
    # Saved out of order; "ckpt-900" > "ckpt-1000" as strings.
    for steps in (1000, 900, 20000, 5):
        c.save(_state(steps), steps)
    assert c.latest() == str(tmp_path / "ckpt-20000.pt")
    assert Checkpointer.load(c.latest())["counters"]["env_steps"] == 20000


def test_max_to_keep_prunes_oldest(tmp_path):
    c = Checkpointer(str(tmp_path), max_to_keep=2)
    for steps in (100, 200, 300, 400):
        c.save(_state(steps), steps)
    assert _names(tmp_path) == ["ckpt-300.pt", "ckpt-400.pt"]
    assert c.latest() == str(tmp_path / "ckpt-400.pt")


def test_max_to_keep_none_keeps_all(tmp_path):
    c = Checkpointer(str(tmp_path), max_to_keep=None)
    for steps in range(1, 8):
        c.save(_state(steps), steps)
    assert len(_names(tmp_path)) == 7


def test_leftover_tmp_is_never_latest(tmp_path):
    c = Checkpointer(str(tmp_path))
    good = c.save(_state(100), 100)
    # A crash in the middle of writing ckpt-200 leaves its temporary file.
    (tmp_path / "ckpt-200.pt.tmp").write_bytes(b"half a checkpoint")
    assert c.latest() == good
    # Other stray files that are not checkpoints are ignored too.
    (tmp_path / "ckpt-300.pt.bak").write_bytes(b"x")
    (tmp_path / "ckpt-latest.pt").write_bytes(b"x")
    assert c.latest() == good
    # The next save of that step replaces the temporary file atomically.
    path = c.save(_state(200), 200)
    assert c.latest() == path
    assert "ckpt-200.pt.tmp" not in _names(tmp_path)


def test_only_tmp_means_no_checkpoint(tmp_path):
    (tmp_path / "ckpt-50.pt.tmp").write_bytes(b"half")
    assert Checkpointer(str(tmp_path)).latest() is None


@pytest.mark.parametrize("content", [b"this is not a checkpoint" * 4, b""])
def test_load_garbage_raises_and_keeps_file(tmp_path, content):
    path = tmp_path / "ckpt-10.pt"
    path.write_bytes(content)
    with pytest.raises(CheckpointError) as info:
        Checkpointer.load(str(path))
    assert str(path) in str(info.value)
    assert path.read_bytes() == content  # left untouched


def test_load_of_a_file_gone_or_not_a_file_says_so(tmp_path):
    """Not 'corrupt': the file was removed (a run still training rotates
    its checkpoints) or is a folder."""
    path = tmp_path / "ckpt-10.pt"
    with pytest.raises(CheckpointError) as info:
        Checkpointer.load(str(path), advice="play another")
    assert str(info.value) == (
        f"checkpoint {path} is gone (a run still training keeps only its "
        "last TrainerConfig.max_checkpoints); play another")
    path.mkdir()
    with pytest.raises(CheckpointError) as info:
        Checkpointer.load(str(path), advice="play another")
    assert str(info.value) == (
        f"checkpoint {path} cannot be read (Is a directory); play another")


def test_load_truncated_checkpoint_raises(tmp_path):
    c = Checkpointer(str(tmp_path))
    path = c.save(_state(3), 3)
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(data[:len(data) // 2])
    with pytest.raises(CheckpointError, match="ckpt-3.pt"):
        Checkpointer.load(path)
    assert os.path.getsize(path) == len(data) // 2


def test_load_refuses_pickled_python_object(tmp_path):
    path = tmp_path / "ckpt-1.pt"
    torch.save({"w": torch.zeros(2), "obj": NotAWeight()}, str(path))
    # Sanity: the file is a valid (unsafe) pickle.
    assert isinstance(torch.load(str(path), weights_only=False)["obj"],
                      NotAWeight)
    with pytest.raises(CheckpointError) as info:
        Checkpointer.load(str(path))
    assert str(path) in str(info.value)
    assert path.exists()


def test_refusal_message_is_plain_and_gives_no_unsafe_advice(tmp_path):
    path = tmp_path / "ckpt-1.pt"
    torch.save({"obj": NotAWeight()}, str(path))
    with pytest.raises(CheckpointError) as info:
        Checkpointer.load(str(path))
    msg = str(info.value)
    assert "\x1b" not in msg
    assert "weights_only" not in msg and "can still be loaded" not in msg


# ---- structure (issue 11) ----------------------------------------------------
LAYOUT = {"algorithm": dict, "counters": {"env_steps": int}}


@pytest.mark.parametrize("content,problem", [
    ({"a": 1}, "no 'algorithm' in it; it has 'a'"),
    ([1, 2], "it is a list"),
    (torch.zeros(3), "it is a Tensor"),
    ({"algorithm": 5, "counters": {"env_steps": 1}},
     "'algorithm' is a int, not a dict"),
    ({"algorithm": {}, "counters": {}}, "no 'counters.env_steps' in it"),
    ({"algorithm": {}, "counters": {"env_steps": "7"}},
     "'counters.env_steps' is a str, not a int"),
    ({"algorithm": {}, "counters": [1]}, "'counters' is a list")])
def test_load_refuses_wrong_structure_in_one_line(tmp_path, content,
                                                  problem):
    path = tmp_path / "ckpt-100.pt"
    torch.save(content, path)  # weights_only can load all of these
    before = path.read_bytes()
    with pytest.raises(CheckpointError) as info:
        Checkpointer.load(str(path), LAYOUT)
    msg = str(info.value)
    assert problem in msg and str(path) in msg and "\n" not in msg, msg
    assert path.read_bytes() == before


def test_load_accepts_the_layout(tmp_path):
    path = tmp_path / "ckpt-1.pt"
    torch.save({"algorithm": {"w": torch.ones(1)}, "counters":
                {"env_steps": 3}, "extra": 1}, path)
    assert Checkpointer.load(str(path), LAYOUT)["counters"]["env_steps"] == 3


def test_describe_mismatch_names_tensor_and_shapes():
    from alf.trainers.checkpointer import describe_mismatch
    ckpt = {"a.weight": torch.zeros(64, 4), "b": torch.zeros(2),
            "old": torch.zeros(1)}
    now = {"a.weight": torch.zeros(32, 4), "b": torch.zeros(2),
           "new": torch.zeros(1)}
    assert describe_mismatch(ckpt, now) == (
        "size mismatch for a.weight: checkpoint [64, 4], this config "
        "[32, 4] (and 2 more)")
    assert describe_mismatch(now, now) is None


# ---- a write that fails (issue 11) -------------------------------------------
def _fill_disk_after(monkeypatch, room):
    import alf.trainers.checkpointer as module
    from bin.full_disk import FullDisk  # tests/bin/full_disk.py
    monkeypatch.setattr(module, "open",
                        lambda p, m: FullDisk(p, m, room), raising=False)


@pytest.mark.parametrize("room", [0, 100])
def test_full_disk_removes_tmp_and_says_so_in_one_line(tmp_path, monkeypatch,
                                                       room):
    ckpt = Checkpointer(str(tmp_path / "ckpt"))
    first = ckpt.save(_state(1), 1)
    before = open(first, "rb").read()
    _fill_disk_after(monkeypatch, room)
    with pytest.raises(CheckpointError) as info:
        ckpt.save(_state(2), 2)
    msg = str(info.value)
    path = str(tmp_path / "ckpt" / "ckpt-2.pt")
    assert f"cannot write checkpoint {path}: the disk is full" in msg, msg
    assert re.search(r"it needs more than its tensors. \d+ bytes, \d+ bytes "
                     r"free\)", msg), msg
    assert "\n" not in msg
    assert _names(tmp_path / "ckpt") == ["ckpt-1.pt"]  # no .tmp left
    assert open(first, "rb").read() == before
    assert ckpt.latest() == first


def test_other_write_errors_and_interrupts_also_remove_tmp(tmp_path,
                                                          monkeypatch):
    ckpt = Checkpointer(str(tmp_path))

    def failing_fsync(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(CheckpointError, match="the write failed") as info:
        ckpt.save(_state(1), 1)
    assert _names(tmp_path) == []
    assert "check the disk" in str(info.value)
    assert "free some space" not in str(info.value)

    def not_permitted(fd):
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "fsync", not_permitted)
    with pytest.raises(CheckpointError, match=r"the write failed \(Operation "
                       r"not permitted\); nothing was saved .*; make it "
                       r"writable"):
        ckpt.save(_state(1), 1)

    def interrupted(fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ckpt.save(_state(1), 1)
    assert _names(tmp_path) == []


def test_set_aside_best_moves_only_a_later_best_and_never_overwrites(
        tmp_path, monkeypatch):
    c = Checkpointer(str(tmp_path))
    assert c.set_aside_best(0) is None  # no best yet
    c.save_best(_state(400), 400, "average_return", 9.0)
    assert c.set_aside_best(400) is None  # evaluated at the checkpoint
    assert c.best()["env_steps"] == 400
    # Two set-asides within one second get different names.
    monkeypatch.setattr("time.strftime", lambda fmt: "20260101-000000")
    first = c.set_aside_best(300)
    assert first == str(tmp_path / "best-discarded-20260101-000000.pt")
    assert c.best() is None
    c.save_best(_state(500), 500, "average_return", 3.0)
    second = c.set_aside_best(300)
    assert second == str(tmp_path / "best-discarded-20260101-000000-2.pt")
    assert torch.load(first, weights_only=True)["counters"]["env_steps"] == 400
    assert torch.load(second, weights_only=True)["counters"]["env_steps"] == 500
    assert _names(tmp_path) == [
        "best-discarded-20260101-000000-2.json",
        "best-discarded-20260101-000000-2.pt",
        "best-discarded-20260101-000000.json",
        "best-discarded-20260101-000000.pt"]


@pytest.mark.parametrize("record", ["not json", "[1]", '{"value": 1.0}',
                                    '{"env_steps": "x"}'])
def test_set_aside_best_leaves_a_record_it_cannot_read(tmp_path, record):
    (tmp_path / "best.json").write_text(record)
    assert Checkpointer(str(tmp_path)).set_aside_best(0) is None
    assert _names(tmp_path) == ["best.json"]


def test_aside_name_skips_a_name_taken_by_any_extension(tmp_path,
                                                        monkeypatch):
    monkeypatch.setattr("time.strftime", lambda fmt: "T")
    (tmp_path / "x-T.json").write_text("")
    (tmp_path / "x-T-2.pt").write_text("")
    assert aside_name(str(tmp_path), "x", (".pt", ".json")) == str(
        tmp_path / "x-T-3")
    assert aside_name(str(tmp_path), "x", (".gin",)) == str(tmp_path / "x-T")


def test_a_ranks_local_states_keep_the_newest_two(tmp_path):
    """The previous one serves the previous checkpoint, should rank 0 fail
    to write this one; rank 0 removes those of ranks the run lost."""
    ckpt = Checkpointer(str(tmp_path))
    state = {"x": torch.arange(3)}
    ckpt.save_local(state, 100, 2, 3)
    for steps in (100, 200, 300):
        for rank in (1, 0):
            ckpt.save_local(state, steps, rank, 2)
    names = sorted(os.listdir(tmp_path))
    assert names == ["local-200-rank0.pt", "local-200-rank1.pt",
                     "local-300-rank0.pt", "local-300-rank1.pt"]
    assert torch.equal(ckpt.load_local(300, 1, 2)["x"], state["x"])
    assert ckpt.load_local(100, 0, 2) is None
    with pytest.raises(CheckpointError, match="run of 2 processes, not 1"):
        ckpt.load_local(300, 0, 1)
    (tmp_path / "local-300-rank0.pt").write_bytes(b"cut short")
    with pytest.raises(CheckpointError, match="unreadable.*it is ignored"):
        ckpt.load_local(300, 0, 2)


def test_a_set_of_more_ranks_stays_whole_while_rank_0s_part_does(tmp_path):
    """A 2-process run's set resumed by mistake with 1 process: rank 1's
    part was deleted at once and rank 0's kept, so that a resume with 2
    again found half a set (both ranks started with empty buffers)."""
    ckpt = Checkpointer(str(tmp_path))
    state = {"x": torch.arange(3)}
    for rank in (0, 1):
        ckpt.save_local(state, 2816, rank, 2)
    ckpt.save_local(state, 3072, 0, 1)
    assert sorted(os.listdir(tmp_path)) == [
        "local-2816-rank0.pt", "local-2816-rank1.pt", "local-3072-rank0.pt"]
    ckpt.save_local(state, 3328, 0, 1)  # the set is no longer "previous"
    assert sorted(os.listdir(tmp_path)) == ["local-3072-rank0.pt",
                                            "local-3328-rank0.pt"]


def test_local_states_from_discarded_training_do_not_count(tmp_path):
    """A run resumed from an older checkpoint (the newest moved aside) left
    its later local states: they counted among the newest two, and the one
    of the previous checkpoint, which a failed save falls back to, was
    deleted."""
    ckpt = Checkpointer(str(tmp_path))
    state = {"x": torch.arange(3)}
    for steps in (300, 400):  # training the resumed run discards
        ckpt.save_local(state, steps, 0, 1)
    for steps in (200, 250):  # resumed from 200's checkpoint
        ckpt.save_local(state, steps, 0, 1)
    assert sorted(os.listdir(tmp_path)) == ["local-200-rank0.pt",
                                            "local-250-rank0.pt"]


def test_best_record_says_what_is_wrong_with_best_json(tmp_path):
    ckpt = Checkpointer(str(tmp_path))
    assert ckpt.best_record() == (None, None)  # no best.pt
    ckpt.save_best({"w": torch.zeros(1)}, 300, "average_return", 42.0)
    record, reason = ckpt.best_record()
    assert reason is None and record == {
        "env_steps": 300, "metric": "average_return", "value": 42.0,
        "path": str(tmp_path / "best.pt")}
    assert ckpt.best() == record
    info = tmp_path / "best.json"
    for text, says in (("[1, 2]", "not alf's best.json"),
                       ('{"metric": "x"}', "not alf's best.json"),
                       ("{", "not alf's best.json")):
        info.write_text(text)
        assert ckpt.best_record() == (None, f"{info} is unreadable ({says})")
        assert ckpt.best() is None
    info.unlink()
    assert ckpt.best_record() == (None, f"{info} (best.pt's record) is "
                                  "missing")


def test_a_large_state_is_streamed_to_the_file_not_copied_in_memory(
        tmp_path):
    """A replay buffer's file must not double the process's memory while
    it is written (it was serialised into a BytesIO first)."""
    import tracemalloc
    state = {"storage": torch.ones(8 * 2**20)}  # 32 MB
    ckpt = Checkpointer(str(tmp_path))
    tracemalloc.start()
    try:
        path = ckpt.save_local(state, 100, rank=0, world_size=1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * 2**20, f"{peak} bytes held while writing 32 MB"
    assert torch.equal(Checkpointer.load(path)["state"]["storage"],
                       state["storage"])


def test_a_ctrl_c_during_the_write_stays_a_ctrl_c(tmp_path, monkeypatch):
    """Before, torch replaced it with "unexpected pos" (a RuntimeError)
    when its zip writer closed the file: a stop read as a crash."""
    import alf.trainers.checkpointer as module
    from bin.full_disk import FullDisk

    class Interrupted(FullDisk):
        def write(self, data):
            if len(bytes(data)) > self._room:
                raise KeyboardInterrupt
            return super().write(data)

    monkeypatch.setattr(module, "open",
                        lambda p, m: Interrupted(p, m, 100_000),
                        raising=False)
    with pytest.raises(KeyboardInterrupt):
        Checkpointer(str(tmp_path)).save({"x": torch.zeros(1_000_000)}, 1)
    assert _names(tmp_path) == []  # the .tmp removed


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EACCES])
def test_a_failed_replay_save_says_what_would_help(tmp_path, monkeypatch,
                                                   code):
    """Before, every failure advised checkpoint_replay=False (which only
    helps a full disk), and a run without checkpoints was told that its
    earlier ones were untouched and to resume."""
    c = Checkpointer(str(tmp_path))

    def failing(f):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(CheckpointError) as info:
        c.save_local({"x": torch.zeros(3)}, 100, 0, 1)
    message = str(info.value)
    assert ("checkpoint_replay=False" in message) == (code == errno.ENOSPC)
    assert "the run has no checkpoint yet" in message
    assert message.endswith("run the same command to start again") or \
        message.endswith("(TrainerConfig.checkpoint_replay=False)"), message
    monkeypatch.undo()
    c.save(_state(100), 100)
    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(CheckpointError, match="earlier checkpoints are "
                       "untouched.*run the same command to resume"):
        c.save_local({"x": torch.zeros(3)}, 200, 0, 1)
