"""benchmarks/metadrive_reset_cost.py runs its four variants and prints
them against MetaDrive's defaults."""
import importlib.util
import os
import re
import subprocess
import sys

import pytest

if importlib.util.find_spec("metadrive") is None:
    pytest.skip("metadrive-simulator is not installed",
                allow_module_level=True)

BENCHMARKS = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks")


@pytest.mark.timeout(120)
def test_it_prints_every_variant_against_metadrives_defaults():
    res = subprocess.run(
        [sys.executable, os.path.join(BENCHMARKS, "metadrive_reset_cost.py"),
         "--blocks", "1", "--resets", "2", "--episode_steps", "50"],
        capture_output=True, text=True, timeout=110)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = re.findall(r"^(metadrive|alf)\s+(True|False)\s+([\d.]+)\s+"
                      r"([\d.]+)\s+([\d.]+)", res.stdout, re.M)
    assert len(rows) == 4, res.stdout
    for seeding, destroy, ms, ratio, per_step in rows:
        assert float(ms) > 0
        assert float(per_step) == pytest.approx(float(ms) / 50, abs=2e-3)
        if (seeding, destroy) == ("metadrive", "True"):
            assert ratio == "1.00"
