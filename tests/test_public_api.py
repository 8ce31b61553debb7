"""The names users write code against are importable from `alf`."""
import subprocess
import sys

import alf
from alf.utils import distributed


def test_distributed_api_is_reexported():
    for name in ("data_distributed", "data_distributed_when",
                 "make_ddp_performer", "activate_ddp"):
        assert getattr(alf, name) is getattr(distributed, name)


def test_importing_alf_does_not_import_torch():
    """Environment workers import alf's torch-free modules; they must stay
    light."""
    code = ("import sys, alf, alf.environments.env_fn; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, check=True).stdout.strip()
    assert out == "False"
