"""How far the run is and how far it goes: the step, tokens and epoch reached, batch sizes, durations in steps
and tokens, the stop step. The Trainer's ``progress``."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, Protocol

from honing.config.schema import TrainerSection
from honing.distributed import get_world_size
from honing.train.duration import Duration, DurationUnit


class DataLoaderLike(Protocol):
    """What the Trainer asks of its data loader (``tokens_per_batch``, ``batches_per_epoch`` ... are read when the
    loader has them)."""

    epoch: int

    def __iter__(self) -> Iterator[Any]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class Progress:
    """The run's counters (OLMo-core's Trainer fields) and its durations as steps and tokens, from the trainer
    section's ``max_duration`` and ``hard_stop`` (``model_params``: for "chinchilla" durations)."""

    def __init__(self, config: TrainerSection, data_loader: DataLoaderLike, model_params: int | None = None):
        self.data_loader = data_loader
        self.model_params = model_params
        self.max_duration = Duration.parse(config.max_duration, model_params=model_params)
        self.hard_stop = Duration.parse(config.hard_stop, model_params=model_params) if config.hard_stop else None
        self.global_step = 0
        self.global_train_tokens_seen = 0
        # counted when the train module knows its FLOPs per token and the data its sequence length
        self.global_train_petaflops = 0.0
        self.epoch = 1

    @property
    def tokens_per_batch(self) -> int | None:
        """Global tokens per step when the data loader knows it ahead of time."""
        return getattr(self.data_loader, "tokens_per_batch", None)

    def steps_for(self, duration: Duration) -> int | None:
        """The step at which ``duration`` is reached, when it can be known in advance."""
        if duration.unit == DurationUnit.steps:
            return duration.value
        if duration.unit == DurationUnit.epochs:
            steps_per_epoch = self.steps_per_epoch
            return None if steps_per_epoch is None else duration.epoch_steps(steps_per_epoch)
        if self.tokens_per_batch:
            return math.ceil(duration.value / self.tokens_per_batch)
        return None

    def convert_duration_to_steps(self, duration: Duration | str) -> int:
        """The number of steps ``duration`` lasts (OLMo-core's): steps as they are, epochs times the steps of an
        epoch, tokens over the tokens of a batch; RuntimeError when the data loader cannot tell (as OLMo-core)."""
        duration = Duration.parse(duration, model_params=self.model_params)
        if duration.unit == DurationUnit.epochs and self.steps_per_epoch is None:
            raise RuntimeError(
                f"the number of steps of {duration} cannot be known: the data loader does not know its batches "
                "per epoch"
            )
        steps = self.steps_for(duration)
        if steps is None:
            raise RuntimeError(
                f"the number of steps of {duration} cannot be known: batches do not all hold the same number of tokens"
            )
        return steps

    @property
    def max_steps(self) -> int | None:
        """The total number of steps of this run's schedule (``max_duration``, not ``hard_stop``)."""
        return self.steps_for(self.max_duration)

    @property
    def global_batch_size(self) -> int | None:
        """The global batch size in tokens, as OLMo-core's (the data loader's ``global_batch_size`` counts
        rows): known when every batch holds the same number of tokens, else None (e.g. padded rows)."""
        return self.tokens_per_batch

    @property
    def rank_batch_size(self) -> int | None:
        """This rank's share of ``global_batch_size``, in tokens (None when that is unknown)."""
        tokens = self.global_batch_size
        world = getattr(self.data_loader, "world_size", None) or get_world_size()
        return None if tokens is None else tokens // world

    @property
    def steps_per_epoch(self) -> int | None:
        """Training steps in one epoch, when the data loader knows it (its ``batches_per_epoch``, or
        ``total_batches``: a loader written for OLMo-core)."""
        steps = getattr(self.data_loader, "batches_per_epoch", None)
        return getattr(self.data_loader, "total_batches", None) if steps is None else steps

    @property
    def tokens_per_epoch(self) -> int | None:
        """Tokens in one epoch (left-over rows not counted), when batches have a fixed token count."""
        steps, tokens = self.steps_per_epoch, self.tokens_per_batch
        return None if steps is None or tokens is None else steps * tokens

    @property
    def max_tokens(self) -> int | None:
        """The tokens this run's ``max_duration`` trains on: the tokens seen so far plus the remaining
        steps' tokens; None when that cannot be known ahead (an epoch or step duration over batches whose
        token count varies)."""
        if self.max_duration.unit == DurationUnit.tokens:
            return self.max_duration.value
        max_steps, tokens = self.max_steps, self.tokens_per_batch
        if max_steps is None or tokens is None:
            return None
        return self.global_train_tokens_seen + max(max_steps - self.global_step, 0) * tokens

    @property
    def stop_step(self) -> int | None:
        """The step training will actually stop at (the earlier of duration and hard stop)."""
        steps = [s for s in (self.max_steps, self.steps_for(self.hard_stop) if self.hard_stop else None) if s]
        return min(steps) if steps else None

    def due(self, duration: Duration | None) -> bool:
        """Whether ``duration`` (None: never) is reached at the current step, tokens and epoch."""
        return duration is not None and duration.due(
            step=self.global_step,
            tokens=self.global_train_tokens_seen,
            epoch=self.data_loader.epoch,
            steps_per_epoch=self.steps_per_epoch,
        )
