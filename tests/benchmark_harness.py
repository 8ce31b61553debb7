"""Runs a script of benchmarks/ as a user would, for tests/benchmarks."""
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCHMARKS = os.path.join(REPO, "benchmarks")


def run_script(script: str, *args: str, timeout: float) -> str:
    """``python benchmarks/SCRIPT ARGS...`` from the repository's root;
    its stdout, once it has exited 0 (else the test fails with the ends of
    its output)."""
    res = subprocess.run(
        [sys.executable, os.path.join(BENCHMARKS, script), *args],
        capture_output=True, text=True, timeout=timeout, cwd=REPO)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    return res.stdout
