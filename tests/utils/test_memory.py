"""Tests of alf/utils/memory.py: available memory and the allocation check."""
import pytest

from alf.utils import memory
from alf.utils.errors import ConfigError


def test_available_bytes_on_this_machine_is_plausible():
    available = memory.available_bytes("cpu")
    if available is None:
        pytest.skip("no /proc/meminfo here")
    assert 10**7 < available < 10**15


def test_cgroup_limit_lowers_what_is_available(monkeypatch):
    values = {"/sys/fs/cgroup/memory.max": 3000,
              "/sys/fs/cgroup/memory.current": 1000}
    monkeypatch.setattr(memory, "_read_int", values.get)
    monkeypatch.setattr(memory, "_meminfo_available", lambda: 10**9)
    assert memory.available_bytes("cpu") == 2000
    monkeypatch.setattr(memory, "_read_int", lambda path: None)  # no limit
    assert memory.available_bytes("cpu") == 10**9


def test_cuda_is_not_initialised_just_to_ask(monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert memory.available_bytes("cuda:0") is None


def test_check_allocation_names_needed_and_available(monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda device: 5 * 10**9)
    memory.check_allocation(5 * 10**9, "cpu", "x", "y")  # fits exactly
    with pytest.raises(ConfigError) as info:
        memory.check_allocation(4 * 10**9, "cpu", "the thing=7", "make it 1",
                                copies=2)
    assert str(info.value) == (
        "the thing=7 needs 8000000000 bytes (8.0 GB) (2 processes on this "
        "machine, 4000000000 bytes (4.0 GB) each) but 5000000000 bytes "
        "(5.0 GB) are available on cpu; make it 1")
    with pytest.raises(ConfigError, match="room 2500000000$"):
        memory.check_allocation(4 * 10**9, "cpu", "x",
                                lambda room: f"room {room}", copies=2)


def test_unknown_availability_lets_it_through(monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda device: None)
    memory.check_allocation(10**18, "cpu", "x", "y")
