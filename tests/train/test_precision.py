"""The precision a run gets on its device, with the capability checks mocked."""

import logging

import torch

from honing.train.callbacks.speed_monitor import SpeedMonitorCallback
from honing.train.precision import choose_precision, describe_device, emulates_bf16
from tests.helpers import make_trainer

CPU = torch.device("cpu")


def test_bf16_on_a_cpu_without_native_bf16_warns_with_the_measured_factor():
    choice = choose_precision("bf16-mixed", CPU, policy="warn", native_bf16=lambda: False, slowdown=lambda: 12.4)
    assert choice.precision == "bf16-mixed" and "12x slower than fp32" in choice.warning
    assert "trainer.emulated_bf16=fp32" in choice.warning


def test_fp32_policy_falls_back():
    choice = choose_precision("bf16", CPU, policy="fp32", native_bf16=lambda: False, slowdown=lambda: 9.0)
    assert choice.precision == "fp32" and "training in fp32 instead" in choice.warning


def test_native_bf16_fp32_requests_and_gpus_are_left_alone():
    never = lambda: (_ for _ in ()).throw(AssertionError("no probe needed"))  # noqa: E731
    assert choose_precision("bf16-mixed", CPU, native_bf16=lambda: True, slowdown=never).warning is None
    assert choose_precision("fp32", CPU, native_bf16=lambda: False, slowdown=never).precision == "fp32"
    assert (
        choose_precision("bf16-mixed", torch.device("cuda"), native_bf16=lambda: False, slowdown=never).warning is None
    )
    assert emulates_bf16(CPU, "bf16", native_bf16=lambda: False)
    assert not emulates_bf16(CPU, "bf16", native_bf16=lambda: True)


def test_header_names_the_cpu_and_its_bf16_support():
    assert "bf16 emulated" in describe_device(CPU, native_bf16=lambda: False)
    assert "native bf16" in describe_device(CPU, native_bf16=lambda: True)


def test_mfu_is_left_out_for_emulated_bf16_and_never_above_one(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr("honing.train.callbacks.speed_monitor.emulates_bf16", lambda device, precision: True)
    emulated = SpeedMonitorCallback(seq_len=16, precision="bf16-mixed", device=CPU)
    make_trainer(tmp_path / "a", max_duration="3steps", callbacks={"speed": emulated}).fit()
    assert emulated.flops_per_token and emulated.peak is None  # no honest peak: no MFU
    tiny_peak = SpeedMonitorCallback(seq_len=16, peak_flops=1.0, device=CPU)  # any real run beats 1 FLOP/s
    with caplog.at_level(logging.WARNING):
        make_trainer(tmp_path / "b", max_duration="3steps", callbacks={"speed": tiny_peak}).fit()
    assert "> 1" in caplog.text and tiny_peak.peak is None
    rows = (tmp_path / "b" / "metrics.jsonl").read_text()
    assert "throughput/mfu" not in rows and "throughput/tokens_per_s" in rows
