"""What a built run is made of: each part made once by a build step and passed on by argument, never read back
from a half-built recipe. Callbacks and the CLI take these parts, not the recipe that built them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from honing.config import RunConfig
    from honing.data.finetune_data import RunData
    from honing.methods.base import BaseTrainModule
    from honing.parallel_dims import ParallelDims
    from honing.run.outputs import RunOutputs

#: ``(prompt, expected answer)`` pairs of the generation eval: a prompt is a conversation's messages, or its text
HeldOutAnswers = list[tuple[Any, str]]


@dataclass(frozen=True)
class ModelAssets:
    """What reads and writes the run's text: the processor (a tokenizer, or a multimodal processor holding one),
    its tokenizer, and the chat template of the chat methods (None for plain text)."""

    processor: Any
    tokenizer: Any
    chat_template: str | None = None


@dataclass(frozen=True)
class RunParts:
    """A built run: the config as applied, where it runs, the model and its reference, the data, the train module,
    what exports and generates (``outputs``), and the generation eval's held-out answers (read when asked for)."""

    config: RunConfig
    device: torch.device
    precision: str
    parallel_dims: ParallelDims
    assets: ModelAssets
    model: torch.nn.Module
    reference_model: torch.nn.Module | None
    data: RunData
    train_module: BaseTrainModule
    outputs: RunOutputs
    held_out_answers: Callable[[], HeldOutAnswers]

    @property
    def tokenizer(self) -> Any:
        """The run's tokenizer (the processor's, for a multimodal model)."""
        return self.assets.tokenizer

    @property
    def eval_batches(self) -> Any:
        """The validation batches (None without validation data)."""
        return self.data.eval_batches


@dataclass(frozen=True)
class TrainInputs:
    """What a method's train module is built from: the model assets, the model to train (parallelised), its frozen
    reference or teacher (None without one) and the data (its collator and validation batches)."""

    assets: ModelAssets
    model: torch.nn.Module
    reference_model: torch.nn.Module | None
    data: RunData


@dataclass(frozen=True)
class Placement:
    """Where a run computes: its device, its precision and its parallel layout."""

    device: torch.device
    precision: str
    parallel_dims: ParallelDims
