"""Record throughput (tokens/s, steps/s, MFU) and peak memory (MiB) every step."""

from __future__ import annotations

import logging
import time

import torch

from honing.distributed import get_world_size
from honing.train.callbacks.base import Callback
from honing.train.callbacks.order import PRIORITY
from honing.train.metrics import ReduceType
from honing.train.peak_flops import peak_flops
from honing.train.precision import emulates_bf16
from honing.train.process_memory import process_memory

log = logging.getLogger(__name__)

MIB = 2**20


class SpeedMonitorCallback(Callback):
    """Records ``throughput/*`` (tokens/s, steps/s, step time, total tokens, MFU) and ``system/*`` peak memory.

    Timing never adds a host-device sync. On CPU the work is done when ``train_batch`` returns,
    so a step is timed from ``on_step_begin`` to ``on_step_end``. On CUDA (and other async devices)
    ``on_step_end`` is reached once the kernels are queued, so a step is timed from the previous
    step's end to this one: the wall time per step then includes the work, because the trainer's
    periodic metric collection syncs and that wait lands in the step that pays it. Single CUDA
    steps are therefore noisy; the running average is not.

    The first ``warmup_steps`` after ``on_train_begin`` (which follows any checkpoint load) are
    still recorded but left out of ``throughput/avg_tokens_per_s``: they pay for allocator and
    kernel warm-up. MFU is ``flops_per_token * tokens_per_s / (peak_flops * world_size)``, with
    the peak from ``peak_flops`` (given, the GPU table, or the CPU probe) and the FLOPs from the
    TrainModule's ``num_flops_per_token(seq_len)``; it is not recorded when either is unknown, nor for
    bf16 on a CPU that only emulates it (the probed bf16 rate there is no honest peak: part of the step
    runs in fp32), and it stops being recorded, with a warning, if it ever comes out above 1.

    A step in the trainer's ``steps_to_skip`` consumes its batch without training on it: it records 0 tokens/s and
    0 MFU (no token was trained on; its batch's tokens still count in ``throughput/total_tokens``), stays out of
    the running average, and the next step is timed from its end.

    Memory is in MiB: ``system/peak_rss_mib`` (the process's peak resident set, from ``getrusage``),
    ``system/rss_mib`` (the resident set at the step's end), ``system/anon_rss_mib`` (its anonymous part: what no file
    backs, so not the pages of a memory-mapped checkpoint) and ``system/peak_anon_rss_mib`` (the largest anonymous
    figure seen at a step's end: a sample, the kernel keeps no anonymous peak); on Linux only, the last three. On
    CUDA, ``system/cuda_max_allocated_mib`` (``torch.cuda.max_memory_allocated``).
    """

    priority = PRIORITY["speed_monitor"]
    warmup_steps = 2

    def __init__(
        self,
        *,
        seq_len: int | None = None,
        peak_flops: float | None = None,
        precision: str = "fp32",
        device: torch.device | None = None,
    ):
        self.seq_len = seq_len
        self.peak_flops = peak_flops
        self.precision = precision
        self.device = device
        # both known after on_train_begin
        self.flops_per_token: float | None = None
        self.peak: float | None = None
        self._device = torch.device("cpu")
        self._synchronous = True
        self._step_begin = 0.0
        self._last_step_end = 0.0
        self._tokens_at_last_end = 0
        self._steps_timed = 0
        self._avg_tokens = 0
        self._avg_seconds = 0.0
        self._peak_anon_rss = 0

    def on_train_begin(self) -> None:
        device = torch.device(self.device if self.device is not None else self.trainer.device)
        self._synchronous = device.type == "cpu"
        self.flops_per_token = self._model_flops_per_token()
        # only probe or look up a peak when MFU can be computed from it, and only an honest one
        if self.flops_per_token and self.peak_flops:
            self.peak = self.peak_flops
        elif self.flops_per_token and not (emulates_bf16(device, self.precision)):
            self.peak = peak_flops(device, self.precision)
        self._device = device
        self._last_step_end = time.perf_counter()
        self._tokens_at_last_end = self.trainer.global_train_tokens_seen
        self._steps_timed = 0
        self._avg_tokens = 0
        self._avg_seconds = 0.0

    def on_step_begin(self) -> None:
        self._step_begin = time.perf_counter()

    def on_step_end(self) -> None:
        now = time.perf_counter()
        step_time = now - (self._step_begin if self._synchronous else self._last_step_end)
        self._last_step_end = now
        total_tokens = self.trainer.global_train_tokens_seen
        tokens = total_tokens - self._tokens_at_last_end
        self._tokens_at_last_end = total_tokens
        skipped = self.trainer.step_skipped  # its batch was consumed, not trained on: no token to time
        if skipped:
            tokens = 0
        else:
            self._steps_timed += 1

        record = self.trainer.record_metric
        record("throughput/total_tokens", total_tokens, ReduceType.max)
        self._record_memory()
        if step_time <= 0:
            return
        tokens_per_s = tokens / step_time
        record("throughput/step_time_s", step_time, ReduceType.max)
        record("throughput/steps_per_s", 1.0 / step_time, ReduceType.mean)
        record("throughput/tokens_per_s", tokens_per_s, ReduceType.mean)
        if self._steps_timed > self.warmup_steps and not skipped:
            self._avg_tokens += tokens
            self._avg_seconds += step_time
            record("throughput/avg_tokens_per_s", self._avg_tokens / self._avg_seconds, ReduceType.mean)
        if self.flops_per_token and self.peak:
            # tokens are global, the peak is one device's
            mfu = self.flops_per_token * tokens_per_s / (self.peak * get_world_size())
            if mfu > 1.0:  # a peak that the run beats is no peak: say so once, then leave MFU out
                log.warning(
                    "throughput/mfu came out at %.2f (> 1) against a peak of %.3g FLOP/s, so that peak is "
                    "not this run's; MFU is no longer recorded (set callbacks.speed_monitor.peak_flops)",
                    mfu,
                    self.peak,
                )
                self.peak = None
                return
            record("throughput/mfu", mfu, ReduceType.mean)

    def _record_memory(self) -> None:
        record = self.trainer.record_metric
        memory = process_memory()
        if memory.peak_rss is not None:
            record("system/peak_rss_mib", memory.peak_rss / MIB, ReduceType.max)
        if memory.rss is not None:
            record("system/rss_mib", memory.rss / MIB, ReduceType.max)
        if memory.anon_rss is not None:
            self._peak_anon_rss = max(self._peak_anon_rss, memory.anon_rss)
            record("system/anon_rss_mib", memory.anon_rss / MIB, ReduceType.max)
            record("system/peak_anon_rss_mib", self._peak_anon_rss / MIB, ReduceType.max)
        if self._device.type == "cuda":
            allocated = torch.cuda.max_memory_allocated(self._device)  # host-side counter: no sync
            self.trainer.record_metric("system/cuda_max_allocated_mib", allocated / MIB, ReduceType.max)

    def _model_flops_per_token(self) -> float | None:
        seq_len = self.seq_len or getattr(self.trainer.data_loader, "seq_len", None)
        flops_fn = getattr(self.trainer.train_module, "num_flops_per_token", None)
        if not seq_len or flops_fn is None:
            return None
        return flops_fn(seq_len)
