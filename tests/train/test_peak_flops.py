from __future__ import annotations

import json
import logging

import pytest
import torch

from honing.train import peak_flops as pf
from honing.train.cpu_load import CpuLoad


@pytest.mark.parametrize(
    "name, precision, expected",
    [
        ("NVIDIA A100-SXM4-80GB", "bf16", 312e12),
        ("NVIDIA A100-SXM4-80GB", "fp32", 19.5e12),
        ("NVIDIA H100 80GB HBM3", "bf16-mixed", 989e12),
        ("NVIDIA H100 PCIe", "bf16", 756e12),
        ("NVIDIA H100 NVL", "bf16", 835e12),
        ("NVIDIA H200", "bf16", 989e12),
        ("NVIDIA B200", "bf16", 2250e12),
        ("NVIDIA L40S", "bf16", 362e12),  # not caught by "L4"
        ("NVIDIA L4", "bf16", 121e12),
        ("NVIDIA A10G", "bf16", 70e12),  # not caught by "A100"
        ("NVIDIA GeForce RTX 4090", "bf16", 165.2e12),
        ("NVIDIA GeForce RTX 3090", "fp32", 35.6e12),
        ("Tesla V100-SXM2-16GB", "bf16", 125e12),
        ("Tesla V100-PCIE-32GB", "fp32", 14e12),
        ("Tesla T4", "bf16", 65e12),
    ],
)
def test_gpu_table_lookup_by_name(name, precision, expected):
    assert pf.gpu_peak_flops(name, precision) == expected


def test_unknown_gpu_has_no_peak(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA GeForce GTX 1080")
    assert pf.peak_flops(torch.device("cuda", 0), "bf16") is None


def test_cuda_device_is_looked_up_by_its_name(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 PCIe")
    assert pf.peak_flops("cuda:0", "fp32") == 51e12


def test_unknown_precision_is_an_error():
    with pytest.raises(ValueError, match="int8"):
        pf.precision_dtype("int8")


def test_other_devices_have_no_peak():
    assert pf.peak_flops("meta", "fp32") is None


def test_matmul_probe_measures_a_positive_rate():
    assert pf.measure_matmul_flops(torch.float32, size=128, seconds=0.02) > 1e6


def test_matmul_probe_leaves_the_global_random_state_alone():
    """The probe runs on a machine's first run only: drawing from the global generator would make that run's dropout
    and sampling differ from every rerun's (a fresh-cache run then lost exact reproduction)."""
    torch.manual_seed(3)
    expected = torch.rand(4)
    torch.manual_seed(3)
    pf.measure_matmul_flops(torch.float32, size=64, seconds=0.01)
    assert torch.equal(torch.rand(4), expected)


@pytest.fixture
def probe_calls(tmp_path, monkeypatch):
    """A fresh cache folder, and a fast real probe that counts its runs."""
    monkeypatch.setenv("HONING_CACHE_DIR", str(tmp_path))
    calls = []
    real = pf.measure_matmul_flops

    def probe(dtype):
        calls.append(dtype)
        return real(dtype, size=128, seconds=0.02)

    monkeypatch.setattr(pf, "measure_matmul_flops", probe)
    monkeypatch.setattr(pf, "current_load", lambda: CpuLoad(cores=torch.get_num_threads() + 1, other_load=0.3))
    return calls


def test_cpu_probe_is_cached_and_reused(tmp_path, probe_calls, monkeypatch):
    first = pf.peak_flops("cpu", "bf16-mixed")
    assert probe_calls == [torch.bfloat16]
    cache = json.loads((tmp_path / "peak_flops.json").read_text())
    key = f"{pf.cpu_model_name()} | threads={torch.get_num_threads()} | bfloat16"
    assert cache == {key: {"flops": first, "other_load": 0.3}}

    monkeypatch.setattr(pf, "measure_matmul_flops", lambda dtype: pytest.fail("measured again"))
    assert pf.peak_flops("cpu", "bf16") == first


def test_cache_is_keyed_by_dtype_and_threads(tmp_path, probe_calls, monkeypatch):
    pf.peak_flops("cpu", "fp32")
    pf.peak_flops("cpu", "bf16")
    threads = torch.get_num_threads()
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads + 1)
    pf.peak_flops("cpu", "fp32")
    assert probe_calls == [torch.float32, torch.bfloat16, torch.float32]
    assert len(json.loads((tmp_path / "peak_flops.json").read_text())) == 3


def test_a_damaged_cache_is_measured_again_and_rewritten(tmp_path, probe_calls):
    (tmp_path / "peak_flops.json").write_text("{not json")
    flops = pf.peak_flops("cpu", "fp32")
    assert probe_calls == [torch.float32]
    assert list(json.loads((tmp_path / "peak_flops.json").read_text()).values()) == [
        {"flops": flops, "other_load": 0.3}
    ]


def busy(monkeypatch):
    """Other processes keep every core busy (issue 45: a peak measured so made the run's MFU exceed 1)."""
    threads = torch.get_num_threads()
    monkeypatch.setattr(pf, "current_load", lambda: CpuLoad(cores=threads, other_load=threads + 0.8))


def test_a_busy_machine_gives_no_peak_and_caches_nothing(tmp_path, probe_calls, monkeypatch, caplog):
    busy(monkeypatch)
    with caplog.at_level(logging.INFO, logger="honing.train.peak_flops"):
        assert pf.peak_flops("cpu", "fp32") is None
        assert pf.peak_flops("cpu", "fp32") is None
    assert probe_calls == [torch.float32, torch.float32]  # measured each time, never kept
    assert not (tmp_path / "peak_flops.json").exists()
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 2 and "throughput/mfu not recorded" in messages[0]
    assert "callbacks.speed_monitor.peak_flops" in messages[0]
    assert pf.cpu_matmul_flops(torch.float32) > 0  # the rate itself still answers bf16's slowdown


def test_a_quiet_measure_cached_earlier_serves_a_busy_start(tmp_path, probe_calls, monkeypatch):
    first = pf.peak_flops("cpu", "fp32")
    busy(monkeypatch)
    assert pf.peak_flops("cpu", "fp32") == first
    assert probe_calls == [torch.float32]


def test_a_bare_number_cached_before_the_load_was_checked_is_measured_again(tmp_path, probe_calls):
    key = f"{pf.cpu_model_name()} | threads={torch.get_num_threads()} | float32"
    (tmp_path / "peak_flops.json").write_text(json.dumps({key: 1.0}))  # perhaps a busy machine's
    flops = pf.peak_flops("cpu", "fp32")
    assert probe_calls == [torch.float32] and flops > 1.0
