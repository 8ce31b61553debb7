"""TrainerConfig: device resolution (GPU cases simulated where none exists)."""
import pytest
import torch

from alf.algorithms.ppo_algorithm import PPOAlgorithm
from alf.trainers.trainer_config import TrainerConfig
from alf.utils.errors import ConfigError


def _config(device):
    return TrainerConfig(algorithm_ctor=PPOAlgorithm, device=device)


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


@pytest.fixture
def two_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)


@pytest.mark.parametrize("bad", ["gpu", "tpu:0", "cuda:x", 3])
def test_unknown_device_name_is_refused_at_construction(bad):
    with pytest.raises(ConfigError, match="'auto', 'cpu', 'cuda'"):
        _config(bad)


def test_auto_is_the_cpu_without_gpu(no_gpu):
    assert _config("auto").resolve_device("none") == torch.device("cpu")


def test_cuda_without_gpu_names_the_setting(no_gpu):
    with pytest.raises(ConfigError, match="device='cuda' but no GPU"):
        _config("cuda").resolve_device("none")


def test_auto_single_process_takes_a_visible_gpu(two_gpus):
    assert _config("auto").resolve_device("none").type == "cuda"


def test_gpu_index_out_of_range(two_gpus):
    with pytest.raises(ConfigError, match="cuda:0 .. cuda:1"):
        _config("cuda:2").resolve_device("none")
    assert _config("cuda:1").resolve_device("none") == torch.device("cuda", 1)


def test_cpu_ranks_stay_on_cpu_even_with_gpus(two_gpus):
    assert _config("auto").resolve_device("gloo") == torch.device("cpu")
    with pytest.raises(ConfigError, match="multi-gpu"):
        _config("cuda").resolve_device("gloo")


def test_gpu_ranks_take_their_own_gpu(two_gpus):
    assert _config("auto").resolve_device("nccl").type == "cuda"
    assert _config("cpu").resolve_device("nccl") == torch.device("cpu")
    with pytest.raises(ConfigError, match="its own GPU"):
        _config("cuda:1").resolve_device("nccl")


def test_inside_a_gloo_group_auto_is_the_cpu(two_gpus, monkeypatch):
    from alf.utils import distributed
    monkeypatch.setattr(distributed, "is_distributed", lambda: True)
    monkeypatch.setattr(distributed, "uses_gpus", lambda: False)
    assert _config("auto").resolve_device() == torch.device("cpu")


def test_inside_a_nccl_group_auto_is_the_local_gpu(two_gpus, monkeypatch):
    from alf.utils import distributed
    from alf.utils.distributed import group
    monkeypatch.setattr(distributed, "is_distributed", lambda: True)
    for module in (distributed, group):  # local_device reads group's
        monkeypatch.setattr(module, "uses_gpus", lambda: True)
    monkeypatch.setattr(group, "_LOCAL_RANK", 1)
    assert _config("auto").resolve_device() == torch.device("cuda", 1)


def test_per_rank_runs_the_algorithms_own_check():
    # An N-process launch refuses sizes PPO cannot use before it spawns.
    from alf.utils.errors import ConfigError
    cfg = TrainerConfig(algorithm_ctor=PPOAlgorithm, num_envs=4,
                        unroll_length=8, mini_batch_size=64)
    with pytest.raises(ConfigError, match="per process, 32 of 16"):
        cfg.per_rank(2)
    ok = TrainerConfig(algorithm_ctor=PPOAlgorithm, num_envs=4,
                       unroll_length=8, mini_batch_size=32)
    assert ok.per_rank(2).mini_batch_size == 16
    # A constructor without the hook (a plain function) is fine.
    TrainerConfig(algorithm_ctor=lambda **kw: None).per_rank(2)
