"""benchmarks/metadrive_reset_cost.py runs its four variants and prints
them against MetaDrive's defaults."""
import importlib.util
import re

import pytest

from benchmark_harness import run_script

if importlib.util.find_spec("metadrive") is None:
    pytest.skip("metadrive-simulator is not installed",
                allow_module_level=True)


@pytest.mark.timeout(120)
def test_it_prints_every_variant_against_metadrives_defaults():
    out = run_script("metadrive_reset_cost.py", "--blocks", "1",
                     "--resets", "2", "--episode_steps", "50", timeout=110)
    rows = re.findall(r"^(metadrive|alf)\s+(True|False)\s+([\d.]+)\s+"
                      r"([\d.]+)\s+([\d.]+)", out, re.M)
    assert len(rows) == 4, out
    for seeding, destroy, ms, ratio, per_step in rows:
        assert float(ms) > 0
        assert float(per_step) == pytest.approx(float(ms) / 50, abs=2e-3)
        if (seeding, destroy) == ("metadrive", "True"):
            assert ratio == "1.00"
