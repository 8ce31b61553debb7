"""alf/bin/cli.py: every command's --help prints its usage and flags and
exits 0 (absl exited 1, and ``alf-train --help`` printed neither)."""
import os
import shutil
import subprocess
import sys

import pytest

COMMANDS = ["train", "play", "compare", "report", "calibrate"]


def _run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=100)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", COMMANDS)
def test_help_prints_the_usage_and_the_commands_flags(command):
    res = _run([sys.executable, "-m", f"alf.bin.{command}", "--help"])
    assert res.returncode == 0, res.stderr[-2000:]
    assert f"python -m alf.bin.{command}" in res.stdout
    assert "--root_dir" in res.stdout
    # Only the command's own flags: absl's and torch's are --helpfull's.
    assert "absl.logging:" not in res.stdout


@pytest.mark.timeout(120)
def test_the_console_script_and_the_other_help_flags():
    script = shutil.which("alf-train", path=os.path.dirname(sys.executable))
    assert script, "alf-train is not installed beside this python"
    for flag in ("--help", "-h"):
        res = _run([script, flag])
        assert res.returncode == 0 and "--gin_file" in res.stdout, res
    full = _run([sys.executable, "-m", "alf.bin.train", "--helpfull"])
    assert full.returncode == 0 and "absl.logging:" in full.stdout
    # After "--" it is an argument, not a flag: the usual usage error.
    res = _run([sys.executable, "-m", "alf.bin.train", "--", "--help"])
    assert res.returncode == 1 and "unexpected arguments" in res.stderr


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command, args, error", [
    ("train", ["--distributed", "bogus"], "flag --distributed=bogus: value "
     "should be one of <none|multi-gpu|multi-process>"),
    ("train", ["--gin_file", "x.gin", "--root_dir", "r", "extra"],
     "unexpected arguments: ['extra']"),
    ("play", ["--root_dir", "r", "--seed", "-1"], "flag --seed=-1: -1 is "
     "not a non-negative integer"),
    ("report", [], "--root_dir is required"),
    ("play", ["--root_dir", "r", "extra"], "unexpected arguments: ['extra']"),
    ("calibrate", ["--root_dir", "r", "extra"],
     "unexpected arguments: ['extra']"),
])
def test_a_bad_flag_or_argument_is_one_line(tmp_path, command, args, error):
    """absl printed two lines for a bad flag, the whole help for an
    argument too many."""
    res = subprocess.run([sys.executable, "-m", f"alf.bin.{command}", *args],
                         capture_output=True, text=True, timeout=100,
                         cwd=tmp_path)
    assert res.returncode == 1
    assert res.stderr == (f"alf.bin.{command}: error: {error} (--help lists "
                          "the flags)\n"), res.stderr
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("install", ["interrupt_on_stop_signals",
                                     "exit_on_stop_signals"])
def test_a_tool_started_in_the_background_still_stops_on_sigint(install):
    """A job started with ``&`` in a script inherits SIGINT ignored:
    ``kill -INT`` left alf.bin.compare running to its end."""
    import signal

    from alf.bin import cli
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM,
                                              signal.SIGHUP)}
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        getattr(cli, install)(*(["alf.bin.play"] if install.startswith(
            "exit") else []))
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        custom = lambda signum, frame: None  # noqa: E731
        signal.signal(signal.SIGINT, custom)  # a handler of the caller's
        getattr(cli, install)(*(["alf.bin.play"] if install.startswith(
            "exit") else []))
        assert signal.getsignal(signal.SIGINT) is custom
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("module", ["launch", "cli", "curves"])
def test_a_library_module_run_as_a_command_says_so(module):
    """``python -m alf.bin.launch`` exited 0 having done nothing."""
    res = _run([sys.executable, "-m", f"alf.bin.{module}", "--help"])
    assert res.returncode == 1, res
    assert res.stderr.startswith(f"alf.bin.{module} is ") and (
        "not a command: run " in res.stderr), res.stderr
