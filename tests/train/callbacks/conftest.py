"""A stand-in for the Trainer: the attributes callbacks read, and metrics through the real MetricsBuffer."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from honing.train.metrics import MetricsBuffer


class FakeTrainer:
    """Steps, tokens and recorded metrics, driven by the test one event at a time."""

    def __init__(
        self, *, stop_step=None, metrics_collect_interval=10, save_folder="/tmp/run", flops_per_token=None, seq_len=None
    ):
        self.global_step = 0
        self.global_train_tokens_seen = 0
        self.step_skipped = False
        self.device = torch.device("cpu")
        self.stop_step = stop_step
        self.max_steps = stop_step
        self.config = SimpleNamespace(metrics_collect_interval=metrics_collect_interval)
        self.save_folder = save_folder
        self.canceled = False
        self.callbacks = {}
        self.data_loader = SimpleNamespace(seq_len=seq_len)
        self.train_module = SimpleNamespace(num_flops_per_token=lambda seq_len: flops_per_token)
        self._metrics = MetricsBuffer()

    def add_callback(self, name, callback):
        callback.attach(self)
        self.callbacks[name] = callback
        return callback

    def record_metric(self, name, value, reduce_type=None):
        self._metrics.record(self.global_step, name, value, reduce_type)

    def collect(self):
        """Every recorded metric so far, by step, as floats (what on_log would receive)."""
        return self._metrics.collect()

    def emit(self, event, *args):
        for callback in self.callbacks.values():
            getattr(callback, event)(*args)


class FakeClock:
    """A ``time`` stand-in whose ``perf_counter`` only moves when the test says so."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def make_trainer():
    return FakeTrainer
