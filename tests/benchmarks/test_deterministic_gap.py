"""benchmarks/deterministic_gap.py: which plays it runs, the table it
prints from their means, and its one-line error (plays stubbed; the real
``play_means`` is checked against alf.bin.play in tests/bin/test_play.py)."""
import os
import re
import sys

import pytest

BENCHMARKS = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks")
sys.path.insert(0, BENCHMARKS)
import deterministic_gap  # noqa: E402


def _run(monkeypatch, means, *args, root_dir):
    calls = []

    def play_means(root_dir, checkpoint, episodes, sampling, params):
        calls.append((checkpoint, episodes, sampling, tuple(params)))
        return means(checkpoint, sampling, params)

    monkeypatch.setattr(deterministic_gap, "play_means", play_means)
    monkeypatch.setattr(sys, "argv", ["deterministic_gap.py", "--root_dir",
                                      str(root_dir), *args])
    deterministic_gap.main()
    return calls


def _run_dir(tmp_path, steps):
    (tmp_path / "ckpt").mkdir()
    for s in steps:
        (tmp_path / "ckpt" / f"ckpt-{s}.pt").write_bytes(b"")
    return tmp_path


def test_each_checkpoint_and_set_is_played_both_ways_side_by_side(
        monkeypatch, capsys, tmp_path):
    def means(checkpoint, sampling, params):
        held = "held=1" in params
        return {"route_completion": 0.5 + 0.25 * sampling + 0.125 * held +
                (0.0625 if checkpoint == "7" else 0.0),
                "success_rate": 0.5}

    calls = _run(monkeypatch, means, "--checkpoints", "7,latest",
                 "--episodes", "3", "--sampling_episodes", "6",
                 "--held_out_param", "held=1", "--held_out_episodes", "4",
                 "--gin_param", "x=2", "--parallel", "1",
                 root_dir=_run_dir(tmp_path, [7]))
    assert sorted(calls) == sorted(
        (ck, n, sampling, params) for ck in ("7", "latest")
        for (n, sampling, params) in ((3, False, ("x=2", )),
                                      (6, True, ("x=2", )),
                                      (4, False, ("x=2", "held=1")),
                                      (4, True, ("x=2", "held=1"))))
    rows = {m.group(1, 2): [float(v) for v in m.group(3).split()]
            for m in re.finditer(r"^\s*(\S+)\s+(training|held out)\s+(.*)$",
                                 capsys.readouterr().out, re.M)}
    assert rows[("7", "training")] == [0.562, 0.812, -0.25, 0.5, 0.5, 0.0]
    assert rows[("7", "held out")] == [0.688, 0.938, -0.25, 0.5, 0.5, 0.0]
    assert rows[("latest", "training")][:3] == [0.5, 0.75, -0.25]


def test_a_metric_that_play_does_not_print_is_a_one_line_error(
        monkeypatch, tmp_path):
    with pytest.raises(SystemExit) as e:
        _run(monkeypatch, lambda *_: {"return": 1.0, "length": 9.0},
             "--checkpoints", "latest", "--metrics", "return,speed",
             root_dir=_run_dir(tmp_path, [1]))
    assert str(e.value) == ("deterministic_gap: --metrics 'speed' not in "
                            "alf.bin.play's table; valid: return, length")


def test_a_pruned_checkpoint_is_a_one_line_error_before_any_play(
        monkeypatch, tmp_path):
    def means(*_):
        raise AssertionError("no play may start")

    with pytest.raises(SystemExit) as e:
        _run(monkeypatch, means, "--checkpoints", "latest,3,9",
             root_dir=_run_dir(tmp_path, [5, 9]))
    assert str(e.value) == (
        f"deterministic_gap: --checkpoint=3: no such checkpoint in "
        f"{tmp_path}/ckpt (there: latest, 5, 9)")


def test_a_failed_play_leaves_the_plays_queued_behind_it_unplayed(
        monkeypatch, tmp_path):
    calls = []

    def means(checkpoint, sampling, params):
        calls.append(checkpoint)
        if len(calls) == 1:
            raise RuntimeError("play failed")
        return {"route_completion": 0.5, "success_rate": 0.5}

    with pytest.raises(RuntimeError, match="play failed"):
        _run(monkeypatch, means, "--checkpoints", "saved", "--parallel", "1",
             root_dir=_run_dir(tmp_path, [1, 2, 3, 4]))
    # The one play the pool had started beside the failing one may finish;
    # the other seven never run.
    assert len(calls) <= 2
