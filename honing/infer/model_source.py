"""``MODEL_OR_RUN``: a run folder (its ``hf/``, else its newest ``stepN/``), a run's ``best/`` or ``stepN/``
checkpoint (LoRA merged on the fly), or any Hugging Face model folder; loaded for inference."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from honing.errors import ConfigError
from honing.export.hf_folder import merged_model
from honing.hub import hub_load_error, is_hub_id, missing_export_hint
from honing.models.loading import DTYPES, auto_model_class, load_pretrained_model
from honing.run.checkpoint_model import load_model_from_checkpoint, load_processor
from honing.train.checkpoint import Checkpointer

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase, ProcessorMixin

#: what a run folder holds that marks it as one (beside a model)
RUN_MARKERS = ("config.yaml", "metrics.jsonl")
#: transformers' ``model_max_length`` of a tokenizer that sets none (``VERY_LARGE_INTEGER``, 1e30)
UNSET_MODEL_MAX_LENGTH = int(1e29)


@dataclass
class ModelSource:
    """Where a model's weights are: ``kind`` ``hf`` (a Hugging Face folder or hub id) or ``checkpoint``, and the
    run folder it belongs to (None for a folder outside a run)."""

    kind: str
    path: str
    run_folder: str | None


@dataclass
class LoadedModel:
    """A model ready to answer: evaluation mode, LoRA merged, with its processor (a tokenizer, or a multimodal
    processor whose ``tokenizer`` is one)."""

    model: torch.nn.Module
    processor: PreTrainedTokenizerBase | ProcessorMixin
    source: ModelSource

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase:
        """The text tokenizer (the processor itself for text models)."""
        return getattr(self.processor, "tokenizer", self.processor)

    @property
    def is_vision(self) -> bool:
        """True for an image-text-to-text model with a multimodal processor."""
        return hasattr(self.processor, "image_processor")

    @property
    def device(self) -> torch.device:
        """The device the weights are on."""
        return next(self.model.parameters()).device

    @property
    def context_length(self) -> int | None:
        """The positions the model was built for (None: its config does not say), read as lm-evaluation-harness
        reads them: the text config's ``n_positions``, ``max_position_embeddings`` or ``n_ctx``, else the
        tokenizer's ``model_max_length`` when it is set."""
        config = getattr(self.model, "config", None)
        config = getattr(config, "text_config", None) or config
        for name in ("n_positions", "max_position_embeddings", "n_ctx"):
            value = getattr(config, name, None)
            if isinstance(value, int) and value > 0:
                return value
        length = getattr(self.tokenizer, "model_max_length", None)
        return length if isinstance(length, int) and 0 < length < UNSET_MODEL_MAX_LENGTH else None


def _is_run_folder(folder: str) -> bool:
    return any(os.path.exists(os.path.join(folder, name)) for name in RUN_MARKERS)


def resolve_model(name: str) -> ModelSource:
    """Which weights ``name`` stands for; a one-line error naming what was expected when it is none."""
    if Checkpointer.dir_is_checkpoint(name):
        parent = os.path.dirname(os.path.normpath(name))
        return ModelSource("checkpoint", name, parent if _is_run_folder(parent) else None)
    if os.path.isfile(os.path.join(name, "config.json")):
        parent = os.path.dirname(os.path.normpath(os.path.abspath(name)))
        return ModelSource("hf", name, parent if _is_run_folder(parent) else None)
    if os.path.isdir(name):
        if os.path.isfile(os.path.join(name, "hf", "config.json")):
            return ModelSource("hf", os.path.join(name, "hf"), name)
        if Checkpointer.contains_checkpoint(name):
            return ModelSource("checkpoint", Checkpointer.latest_checkpoint(name), name)
        raise ConfigError(
            f"MODEL_OR_RUN: {name} is not a model folder (config.json), a run folder (hf/ or stepN/ inside) "
            "or a honing checkpoint"
        )
    if os.path.exists(name):
        raise ConfigError(f"MODEL_OR_RUN: {name} is a file; expected a model folder, a run folder or a checkpoint")
    if is_hub_id(name):
        return ModelSource("hf", name, None)
    raise ConfigError(f"MODEL_OR_RUN: {name} does not exist{missing_export_hint(name)}")


def pick_device(device: str) -> torch.device:
    """``auto``: the GPU when there is one, else the CPU."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"--device: {device!r} was asked for but no CUDA device is available")
    try:
        target = torch.device(device)
    except RuntimeError:  # torch's message lists every device type it was built to name
        target = None
    usable = usable_device_types()
    if target is None or target.type not in usable:
        choices = ", ".join(["auto", *usable, *(["cuda:N"] if "cuda" in usable else [])])
        raise ConfigError(f"--device: expected one of {choices} (what this machine has), got {device!r}")
    if target.type == "cuda" and target.index is not None and target.index >= torch.cuda.device_count():
        raise ConfigError(f"--device: {device!r}, but this machine has {torch.cuda.device_count()} CUDA device(s)")
    return target


def usable_device_types() -> list[str]:
    """The device types this machine can run a model on."""
    usable = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    if torch.backends.mps.is_available():
        usable.append("mps")
    if hasattr(torch, "xpu") and torch.xpu.is_available():
        usable.append("xpu")
    return usable


def load_model(
    name: str, *, device: str = "auto", dtype: str = "float32", trust_remote_code: bool = False
) -> LoadedModel:
    """Load ``name`` (see :func:`resolve_model`) for inference on ``device`` in ``dtype``."""
    if dtype not in DTYPES:
        raise ConfigError(f"--dtype: expected one of {', '.join(sorted(DTYPES))}, got {dtype!r}")
    source = resolve_model(name)
    target = pick_device(device)
    if source.kind == "checkpoint":
        model, processor = load_model_from_checkpoint(source.path)
        model = merged_model(model)  # a LoRA run's adapters folded in: one plain model to decode with
        if processor is None:
            raise ConfigError(f"MODEL_OR_RUN: {source.path} has no tokenizer/ folder to read prompts with")
    else:
        from transformers import AutoConfig

        try:
            config = AutoConfig.from_pretrained(source.path, trust_remote_code=trust_remote_code)
        except (OSError, ValueError) as error:
            raise hub_load_error("MODEL_OR_RUN", source.path, error) from None
        model = load_pretrained_model(
            source.path,
            dtype=DTYPES[dtype],
            trust_remote_code=trust_remote_code,
            auto_class=auto_model_class(config),
        )
        processor = load_processor(source.path)
    model = model.to(device=target, dtype=DTYPES[dtype]).eval()
    return LoadedModel(model=model, processor=processor, source=source)
