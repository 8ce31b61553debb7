"""Shared pytest set-up: makes tests/ importable (for distributed_harness);
fixtures used across folders."""
import os
import sys
import types

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def pytest_configure(config):
    """Compiles alf's bytecode once, in the controlling process: where
    PYTHONDONTWRITEBYTECODE is set (as on the CI machines) none is cached,
    and each of the suite's hundreds of processes (CLI runs, ranks,
    actors) compiled alf again, ~0.25 s each."""
    if hasattr(config, "workerinput"):  # a pytest-xdist worker
        return
    import compileall
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    compileall.compile_dir(os.path.join(repo, "alf"), quiet=1)


@pytest.fixture
def fast_processes(monkeypatch):
    """Makes the collector's actors and inference workers fork from the
    harness's preloaded forkserver instead of spawning (the CLI tests keep
    the spawn path)."""
    import alf.trainers.collector
    from distributed_harness import fast_context
    monkeypatch.setattr(alf.trainers.collector, "mp", types.SimpleNamespace(
        get_context=lambda method: fast_context()))


@pytest.fixture(autouse=True)
def _end_cli_sessions():
    """A CLI run (tests/bin/cli_harness.py) that its test left running, on
    a failure or a timeout, is killed with its whole session."""
    yield
    harness = sys.modules.get("cli_harness")
    if harness is not None:
        harness.end_sessions_left()
