"""A write into the run's folder that fails (a full disk, a file made
unwritable): training ends with one line that fits the cause and says what
is kept, and nothing prints a traceback (alf/trainers/trainer.py and
alf/trainers/reporting.py)."""
import errno
import os
import threading

import pytest
import torch
from tensorboard.compat.tensorflow_stub.io.gfile import LocalFileSystem

from alf.algorithms import PPOAlgorithm
from alf.trainers import Trainer, TrainerConfig, reporting
from alf.trainers.checkpointer import Checkpointer
from alf.trainers.collection_counts import CollectionCounts
from alf.trainers.episode_stats import EpisodeStats
from alf.utils.errors import TrainingError

from test_trainer import SPI, clean_gin  # noqa: F401 - an autouse fixture


@pytest.fixture
def thread_failures(monkeypatch):
    """The thread failures that reach ``threading.excepthook`` (which
    would print them as "Exception in thread ...")."""
    seen = []
    monkeypatch.setattr(threading, "excepthook", seen.append)
    return seen


class Disk:
    """The TensorBoard writer thread's appends fail with ENOSPC once
    ``full`` is set."""

    full = False


@pytest.fixture
def disk(monkeypatch):
    append = LocalFileSystem.append

    def fill_up(fs, filename, content, binary_mode=False):
        if Disk.full:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return append(fs, filename, content, binary_mode)

    monkeypatch.setattr(LocalFileSystem, "append", fill_up)
    monkeypatch.setattr(Disk, "full", False)
    return Disk


def tiny_config(**kw) -> TrainerConfig:
    args = dict(algorithm_ctor=PPOAlgorithm, env_name="CartPole-v1",
                num_envs=2, unroll_length=16, minibatch_size=32,
                num_epochs=1, num_env_steps=4 * SPI,
                eval_interval=0, num_eval_episodes=1, summary_interval=1,
                checkpoint_interval=100, log_interval_seconds=1000.0)
    args.update(kw)
    return TrainerConfig(**args)


def train_until_error(root, cfg, capfd, thread_failures) -> str:
    """Trains; returns the `TrainingError` it must end with, after checking
    that it is one line and that nothing printed a traceback."""
    with pytest.raises(TrainingError) as info:
        Trainer(str(root), config=cfg).train()
    msg = str(info.value)
    assert "\n" not in msg
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception in thread" not in err, err
    assert thread_failures == []
    return msg


def reporter(root):
    episodes = EpisodeStats(num_envs=2)
    episodes.update(torch.tensor([1.0, 2.0]), torch.tensor([True, True]))
    counts = CollectionCounts(32, 0, 1, False)
    return reporting.Reporter(str(root), episodes, counts, lambda: None,
                              torch.device("cpu"), 128, 1000.0,
                              is_chief=True, world_size=1)


# ---- the reporter -------------------------------------------------------
def test_a_full_disk_in_the_writer_thread_is_raised_once_unprinted(
        tmp_path, disk, thread_failures, capfd):
    r = reporter(tmp_path)
    r.open(0)
    disk.full = True
    with pytest.raises(OSError) as info:
        r.summarize(SPI, {"loss": torch.tensor(1.0)})
    # The thread's error names no file: the folder it writes is named.
    assert info.value.errno == errno.ENOSPC
    assert info.value.filename == str(tmp_path / "train")
    r.close()  # the writer raises its failure again: not raised twice
    r.close()
    assert thread_failures == []
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception in thread" not in err, err


def test_other_threads_failures_are_still_printed(tmp_path, thread_failures):
    r = reporter(tmp_path)
    r.open(0)  # installs the hook

    def fail():
        raise OSError(errno.ENOSPC, "not tensorboard's")

    t = threading.Thread(target=fail)
    t.start()
    t.join()
    r.close()
    assert [str(a.exc_value) for a in thread_failures] == [
        "[Errno 28] not tensorboard's"]


def test_close_closes_every_writer_and_raises_a_new_failure(tmp_path,
                                                            monkeypatch):
    from torch.utils.tensorboard import SummaryWriter
    r = reporter(tmp_path)
    r.open(0)
    r.record_evaluation("eval", {"average_return": 1.0,
                                 "average_episode_length": 1.0}, SPI)
    closed = []
    close = SummaryWriter.close

    def full(w):
        closed.append(os.path.basename(w.log_dir))
        close(w)
        raise OSError(errno.ENOSPC, "No space left on device", w.log_dir)

    monkeypatch.setattr(SummaryWriter, "close", full)
    with pytest.raises(OSError) as info:
        r.close()
    assert info.value.filename == str(tmp_path / "train")
    assert closed == ["train", "eval"]
    r.close()  # closed: nothing more to do
    assert closed == ["train", "eval"]


# ---- training -------------------------------------------------------------
def test_full_disk_for_summaries_before_any_checkpoint(
        tmp_path, disk, monkeypatch, thread_failures, capfd):
    start_clock = reporting.Reporter.start_clock

    def then_full(self, *args):  # the disk fills once training starts
        start_clock(self, *args)
        disk.full = True

    monkeypatch.setattr(reporting.Reporter, "start_clock", then_full)
    msg = train_until_error(tmp_path, tiny_config(), capfd, thread_failures)
    assert msg.startswith(f"cannot write {tmp_path}/train: No space left on "
                          "device ("), msg
    assert "bytes free); no checkpoint was saved yet; free some space" in msg
    assert "intact" not in msg
    assert msg.endswith("run the same command to start again"), msg


def test_full_disk_for_summaries_after_a_checkpoint(
        tmp_path, disk, monkeypatch, thread_failures, capfd):
    save = Checkpointer.save

    def then_full(self, state, env_steps):  # the checkpoint still fits
        path = save(self, state, env_steps)
        disk.full = True
        return path

    monkeypatch.setattr(Checkpointer, "save", then_full)
    msg = train_until_error(tmp_path, tiny_config(checkpoint_interval=1),
                            capfd, thread_failures)
    latest = tmp_path / "ckpt" / f"ckpt-{SPI}.pt"
    assert msg.startswith(f"cannot write {tmp_path}/train: No space left on "
                          "device ("), msg
    assert f"; the checkpoints saved (the latest {latest}) are intact; " in msg
    assert msg.endswith("run the same command to resume"), msg
    Checkpointer.load(str(latest))  # intact
    assert Trainer(str(tmp_path), config=tiny_config(
        num_env_steps=SPI)).train() == {}  # and resumable: it had finished


ADVICE = {
    errno.ENOSPC: "free some space, or use another --root_dir",
    errno.EDQUOT: "free some space within your disk quota",
    errno.EPERM: "make it writable (check its owner, mode and attributes",
    errno.EACCES: "give this user write permission to it",
    errno.EROFS: "remount the file system read-write",
    errno.EIO: "check the disk",
}


@pytest.mark.parametrize("code", list(ADVICE), ids=errno.errorcode.get)
def test_an_unwritable_eval_csv_gets_advice_for_its_errno(
        tmp_path, monkeypatch, code, thread_failures, capfd):
    def refuse(root_dir, env_steps, metrics, name="eval.csv"):
        path = os.path.join(root_dir, name)
        raise (PermissionError if code in (errno.EPERM, errno.EACCES) else
               OSError)(code, os.strerror(code), path)

    monkeypatch.setattr(reporting, "append_eval_csv", refuse)
    msg = train_until_error(tmp_path, tiny_config(eval_interval=1), capfd,
                            thread_failures)
    assert msg.startswith(f"cannot write {tmp_path}/eval.csv: "
                          f"{os.strerror(code)}"), msg
    assert ADVICE[code] in msg
    space = code in (errno.ENOSPC, errno.EDQUOT)
    assert ("bytes free" in msg) == space
    assert ("free some space" in msg) == space


def test_a_permission_error_outside_the_run_is_not_a_write_failure(
        tmp_path, monkeypatch):
    def refuse(root_dir, env_steps, metrics, name="eval.csv"):
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(reporting, "append_eval_csv", refuse)
    with pytest.raises(PermissionError):
        Trainer(str(tmp_path), config=tiny_config(eval_interval=1)).train()


def test_closing_after_a_failure_does_not_hide_it(
        tmp_path, monkeypatch, thread_failures, capfd):
    from torch.utils.tensorboard import SummaryWriter

    def refuse(root_dir, env_steps, metrics, name="eval.csv"):
        path = os.path.join(root_dir, name)
        raise PermissionError(errno.EPERM, "Operation not permitted", path)

    def full(w):
        raise OSError(errno.ENOSPC, "No space left on device", w.log_dir)

    monkeypatch.setattr(reporting, "append_eval_csv", refuse)
    monkeypatch.setattr(SummaryWriter, "close", full)
    msg = train_until_error(tmp_path, tiny_config(eval_interval=1), capfd,
                            thread_failures)
    assert msg.startswith(f"cannot write {tmp_path}/eval.csv: Operation not "
                          "permitted; "), msg


def test_the_last_summaries_failing_at_the_end_fail_the_run(
        tmp_path, monkeypatch, thread_failures, capfd):
    from torch.utils.tensorboard import SummaryWriter
    close = SummaryWriter.close

    def full(w):
        close(w)
        raise OSError(errno.ENOSPC, "No space left on device", w.log_dir)

    monkeypatch.setattr(SummaryWriter, "close", full)
    msg = train_until_error(tmp_path, tiny_config(), capfd, thread_failures)
    latest = tmp_path / "ckpt" / f"ckpt-{4 * SPI}.pt"
    assert msg.startswith(f"cannot write {tmp_path}/train: No space left on "
                          "device ("), msg
    assert f"(the latest {latest}) are intact" in msg
