"""Tests of reading ``eval.csv`` (`alf.trainers.evaluator.read_eval_csv`)
when a crash or a hand edit left rows that cannot be read."""
import pytest

from alf.trainers.evaluator import read_eval_csv

HEADER = "env_steps,average_return,average_episode_length\n"


@pytest.mark.parametrize("bad, described", [
    ("6144,12", "env_steps 6144"),  # cut short mid-write: no newline
    ("6144,abc,def\n", "env_steps 6144"),  # not numeric
    ("6144,1,2,3\n", "env_steps 6144"),  # a field too many
    ("abc,1,2\n", "line 4"),  # its env steps unreadable too
    (",1,2\n", "line 4"),
    ("inf,1,2\n", "line 4"),
])
def test_unreadable_rows_are_skipped_and_named(tmp_path, bad, described):
    path = tmp_path / "eval.csv"
    path.write_text(HEADER + "2048,10,20\n4096,30,40\n" + bad)
    skipped = []
    assert read_eval_csv(str(path), skipped) == {
        "env_steps": [2048, 4096], "average_return": [10, 30],
        "average_episode_length": [20, 40]}
    assert skipped == [described]
    # Without the list, the rows are skipped just the same.
    assert read_eval_csv(str(path))["env_steps"] == [2048, 4096]


def test_a_byte_that_is_not_utf8_skips_its_row(tmp_path):
    """It was a UnicodeDecodeError, a traceback in report and compare."""
    path = tmp_path / "eval.csv"
    path.write_bytes(HEADER.encode() + b"2048,10,20\n4096,3\xff,40\n")
    skipped = []
    assert read_eval_csv(str(path), skipped)["env_steps"] == [2048]
    assert skipped == ["env_steps 4096"]


def test_a_bad_row_does_not_replace_a_good_one_of_its_step(tmp_path):
    path = tmp_path / "eval.csv"
    path.write_text(HEADER + "2048,10,20\n2048,x,20\n4096,30,40\n4096,50,60\n")
    skipped = []
    curves = read_eval_csv(str(path), skipped)
    # A step evaluated again (a resumed run) keeps its last readable row.
    assert curves["average_return"] == [10, 50]
    assert skipped == ["env_steps 2048"]


def test_only_bad_rows_reads_as_no_evaluation(tmp_path):
    path = tmp_path / "eval.csv"
    path.write_text(HEADER + "6144,12")
    skipped = []
    assert read_eval_csv(str(path), skipped)["env_steps"] == []
    assert skipped == ["env_steps 6144"]


def test_an_empty_field_is_a_metric_the_row_lacks(tmp_path):
    """`append_eval_csv` writes a metric missing from a row as an empty
    field: the row is read, the metric NaN."""
    import math

    from alf.trainers.evaluator import append_eval_csv
    append_eval_csv(str(tmp_path), 2048, {"average_return": 10.0,
                                          "average_episode_length": 20.0,
                                          "success_rate": 0.5})
    append_eval_csv(str(tmp_path), 4096, {"average_return": 30.0,
                                          "average_episode_length": 40.0})
    skipped = []
    curves = read_eval_csv(str(tmp_path / "eval.csv"), skipped)
    assert curves["env_steps"] == [2048, 4096] and skipped == []
    assert curves["success_rate"][0] == 0.5
    assert math.isnan(curves["success_rate"][1])
