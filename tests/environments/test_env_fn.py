"""Environment worker set-up: what a worker does when it crashes."""
import signal
import subprocess
import sys

import pytest

from alf.environments import env_fn

pytestmark = pytest.mark.timeout(60)


def _crash_in(code: str) -> subprocess.CompletedProcess:
    """Runs ``code``, then dereferences NULL (a simulator's native crash),
    in a fresh interpreter."""
    return subprocess.run(
        [sys.executable, "-c", code + "\nimport ctypes\n"
         "def step_the_simulator():\n    ctypes.string_at(0)\n"
         "step_the_simulator()"],
        capture_output=True, text=True)


def test_a_worker_that_crashes_natively_prints_its_python_stack():
    out = _crash_in("from alf.environments import env_fn\n"
                    "env_fn.prepare_worker()")
    assert out.returncode == -signal.SIGSEGV, out
    assert "Fatal Python error: Segmentation fault" in out.stderr
    assert "step_the_simulator" in out.stderr
    # Negative control: without the set-up the stack is not printed.
    plain = _crash_in("pass")
    assert plain.returncode == -signal.SIGSEGV, plain
    assert "step_the_simulator" not in plain.stderr


def test_evaluation_environments_nest_and_close_on_errors():
    assert not env_fn.loading_evaluation_environments()
    with env_fn.evaluation_environments():
        with env_fn.evaluation_environments():
            assert env_fn.loading_evaluation_environments()
        assert env_fn.loading_evaluation_environments()
        with pytest.raises(RuntimeError):
            with env_fn.evaluation_environments():
                raise RuntimeError("a load failed")
        assert env_fn.loading_evaluation_environments()
    assert not env_fn.loading_evaluation_environments()
