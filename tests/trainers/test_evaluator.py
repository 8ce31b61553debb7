"""`set_aside_later_rows`: a run resumed from an older checkpoint keeps
eval.csv one row per step, in order, and loses no row (issue 11)."""
import csv
import os

from alf.trainers.evaluator import (append_eval_csv, read_eval_csv,
                                    set_aside_later_rows)


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


def _log(root, steps):
    for s in steps:
        append_eval_csv(str(root), s, {"average_return": s / 10,
                                       "average_episode_length": 1.0})


def test_rows_after_the_checkpoint_are_moved_aside(tmp_path):
    _log(tmp_path, [64, 128, 192, 256])
    before = _rows(tmp_path / "eval.csv")
    aside = set_aside_later_rows(str(tmp_path), 128)
    assert os.path.basename(aside).startswith("eval-discarded-")
    assert _rows(tmp_path / "eval.csv") == before[:3]  # header, 64, 128
    assert _rows(aside) == [before[0]] + before[3:]  # header, 192, 256
    _log(tmp_path, [192])  # the resumed run goes on: still monotone
    assert read_eval_csv(str(tmp_path / "eval.csv"))["env_steps"] == [
        64, 128, 192]
    assert sorted(os.listdir(tmp_path)) == sorted(
        ["eval.csv", os.path.basename(aside)])  # no .tmp left


def test_nothing_to_move_changes_nothing(tmp_path):
    assert set_aside_later_rows(str(tmp_path), 10) is None  # no eval.csv
    _log(tmp_path, [64, 128])
    before = (tmp_path / "eval.csv").read_bytes()
    assert set_aside_later_rows(str(tmp_path), 128) is None
    assert (tmp_path / "eval.csv").read_bytes() == before
    assert os.listdir(tmp_path) == ["eval.csv"]


def test_a_second_set_aside_never_overwrites_the_first(tmp_path):
    _log(tmp_path, [64, 128])
    first = set_aside_later_rows(str(tmp_path), 64)
    _log(tmp_path, [128])
    second = set_aside_later_rows(str(tmp_path), 64)
    assert first != second
    assert len(_rows(first)) == len(_rows(second)) == 2


def test_a_row_cut_short_by_a_crash_goes_aside(tmp_path):
    _log(tmp_path, [64, 128])
    with open(tmp_path / "eval.csv", "a") as f:
        f.write("19")  # half a row
    aside = set_aside_later_rows(str(tmp_path), 128)
    assert _rows(aside)[1:] == [["19"]]
    assert read_eval_csv(str(tmp_path / "eval.csv"))["env_steps"] == [64, 128]
