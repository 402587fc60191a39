from __future__ import annotations

import resource
import sys
from types import SimpleNamespace

import pytest
import torch

from honing.train import process_memory
from honing.train.callbacks import speed_monitor
from honing.train.callbacks.speed_monitor import SpeedMonitorCallback


def run_steps(trainer, clock, steps):
    """Each step is (data-load seconds, compute seconds, tokens); the clock moves accordingly."""
    for load_seconds, compute_seconds, tokens in steps:
        clock.now += load_seconds
        trainer.global_step += 1
        trainer.global_train_tokens_seen += tokens
        trainer.emit("on_step_begin")
        clock.now += compute_seconds
        trainer.emit("on_step_end")
    return trainer.collect()


@pytest.fixture
def setup(make_trainer, clock, monkeypatch):
    monkeypatch.setattr(speed_monitor, "time", clock)

    def build(**kwargs):
        trainer_kwargs = {k: kwargs.pop(k) for k in ("flops_per_token", "seq_len") if k in kwargs}
        trainer = make_trainer(**trainer_kwargs)
        callback = trainer.add_callback("speed_monitor", SpeedMonitorCallback(**kwargs))
        trainer.emit("on_train_begin")
        return trainer, callback

    return build


def test_cpu_throughput_is_tokens_over_step_time(setup, clock):
    trainer, _ = setup()
    logs = run_steps(trainer, clock, [(0.5, 0.5, 1000), (0.0, 0.25, 1000), (0.1, 1.0, 1000), (0.1, 0.5, 1000)])
    # on CPU a step is timed from its begin to its end: data loading is not in it
    assert logs[1]["throughput/step_time_s"] == pytest.approx(0.5)
    assert logs[1]["throughput/tokens_per_s"] == pytest.approx(2000)
    assert logs[1]["throughput/steps_per_s"] == pytest.approx(2.0)
    assert logs[2]["throughput/tokens_per_s"] == pytest.approx(4000)
    assert logs[3]["throughput/tokens_per_s"] == pytest.approx(1000)
    assert [logs[s]["throughput/total_tokens"] for s in (1, 2, 3, 4)] == [1000, 2000, 3000, 4000]
    # the running average skips the first two (warm-up) steps
    assert "throughput/avg_tokens_per_s" not in logs[1] and "throughput/avg_tokens_per_s" not in logs[2]
    assert logs[3]["throughput/avg_tokens_per_s"] == pytest.approx(1000)
    assert logs[4]["throughput/avg_tokens_per_s"] == pytest.approx(2000 / 1.5)
    assert "throughput/mfu" not in logs[4]  # no FLOPs per token known


def test_counting_restarts_after_train_begin_from_a_loaded_checkpoint(setup, clock, make_trainer, monkeypatch):
    monkeypatch.setattr(speed_monitor, "time", clock)
    trainer = make_trainer()
    trainer.global_step, trainer.global_train_tokens_seen = 100, 10**8  # as loaded from a checkpoint
    trainer.add_callback("speed_monitor", SpeedMonitorCallback())
    trainer.emit("on_train_begin")
    logs = run_steps(trainer, clock, [(0.0, 1.0, 500)] * 3)
    assert logs[101]["throughput/tokens_per_s"] == pytest.approx(500)
    # past 2**24 a float32 would round the count; it is recorded exactly
    assert logs[103]["throughput/total_tokens"] == 10**8 + 1500
    assert "throughput/avg_tokens_per_s" not in logs[102] and "throughput/avg_tokens_per_s" in logs[103]


def test_mfu_is_model_flops_over_peak(setup, clock):
    trainer, callback = setup(seq_len=16, flops_per_token=6000, peak_flops=1e8)
    logs = run_steps(trainer, clock, [(0.0, 0.5, 1000)])
    assert callback.flops_per_token == 6000
    assert logs[1]["throughput/mfu"] == pytest.approx(6000 * 2000 / 1e8)


def test_peak_comes_from_the_device_when_not_given(setup, clock, monkeypatch):
    calls = []
    monkeypatch.setattr(speed_monitor, "peak_flops", lambda device, precision: calls.append((device, precision)) or 4e8)
    monkeypatch.setattr(speed_monitor, "emulates_bf16", lambda device, precision: False)  # a CPU with bf16 units
    trainer, callback = setup(seq_len=16, flops_per_token=6000, precision="bf16", device=torch.device("cpu"))
    logs = run_steps(trainer, clock, [(0.0, 1.0, 1000)])
    assert calls == [(torch.device("cpu"), "bf16")]
    assert callback.peak == 4e8
    assert logs[1]["throughput/mfu"] == pytest.approx(6000 * 1000 / 4e8)


def test_no_peak_lookup_without_model_flops(setup, monkeypatch):
    monkeypatch.setattr(speed_monitor, "peak_flops", lambda *a: pytest.fail("probed a peak MFU cannot use"))
    _, callback = setup(seq_len=16)
    assert callback.peak is None


def test_async_device_times_from_step_end_to_step_end(setup, clock, monkeypatch):
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: 3 * 2**30)
    trainer, _ = setup(device=torch.device("cuda"), peak_flops=1e12)
    logs = run_steps(trainer, clock, [(0.5, 0.5, 1000), (0.25, 0.25, 1000)])
    # with queued kernels, begin-to-end is launch time only; end-to-end includes the work
    assert logs[1]["throughput/step_time_s"] == pytest.approx(1.0)  # from train begin
    assert logs[2]["throughput/step_time_s"] == pytest.approx(0.5)
    assert logs[2]["throughput/tokens_per_s"] == pytest.approx(2000)
    assert logs[2]["system/cuda_max_allocated_mib"] == pytest.approx(3072.0)


def test_peak_rss_is_recorded_in_mib(setup, clock, monkeypatch):
    # Linux reports ru_maxrss in KiB: 3,145,728 KiB is 3072 MiB
    fake = SimpleNamespace(RUSAGE_SELF=resource.RUSAGE_SELF, getrusage=lambda who: SimpleNamespace(ru_maxrss=3 * 2**20))
    monkeypatch.setattr(process_memory, "resource", fake)
    trainer, _ = setup()
    logs = run_steps(trainer, clock, [(0.0, 1.0, 10)])
    assert logs[1]["system/peak_rss_mib"] == 3072.0
    assert "system/cuda_max_allocated_mib" not in logs[1]


def test_resident_and_anonymous_memory_now_and_the_anonymous_peak(setup, clock, monkeypatch, tmp_path):
    # /proc/self/status in kB; the anonymous peak is the largest figure seen at a step's end
    statuses = iter([(4096, 1024), (8192, 3072), (6144, 2048)])

    def status_file():
        rss, anon = next(statuses)
        path = tmp_path / "status"
        path.write_text(f"Name:\tpython\nVmHWM:\t 99999 kB\nVmRSS:\t {rss * 1024} kB\nRssAnon:\t {anon * 1024} kB\n")
        return str(path)

    trainer, _ = setup()
    real_memory = process_memory.process_memory

    def memory_from_fake_status():
        monkeypatch.setattr(process_memory, "STATUS_FILE", status_file())
        return real_memory()

    monkeypatch.setattr(speed_monitor, "process_memory", memory_from_fake_status)
    logs = run_steps(trainer, clock, [(0.0, 1.0, 10), (1.0, 2.0, 10), (2.0, 3.0, 10)])
    assert [logs[step]["system/rss_mib"] for step in (1, 2, 3)] == [4096, 8192, 6144]
    assert [logs[step]["system/anon_rss_mib"] for step in (1, 2, 3)] == [1024, 3072, 2048]
    assert [logs[step]["system/peak_anon_rss_mib"] for step in (1, 2, 3)] == [1024, 3072, 3072]


def test_the_process_memory_of_this_process_is_plausible():
    memory = process_memory.process_memory()
    assert memory.peak_rss is not None and memory.peak_rss > 0
    if sys.platform.startswith("linux"):
        assert 0 < memory.anon_rss <= memory.rss <= memory.peak_rss * 1.01


def test_a_zero_length_step_records_counts_but_no_rates(setup, clock):
    trainer, _ = setup()
    logs = run_steps(trainer, clock, [(0.0, 0.0, 10)])
    assert logs[1]["throughput/total_tokens"] == 10
    assert "throughput/tokens_per_s" not in logs[1]
