"""The model saved in a honing checkpoint: load it (LoRA runs as peft models), export it to a Hugging Face
folder, or merge its LoRA adapters.

``merge_checkpoint(CHECKPOINT_DIR, OUT_DIR)`` writes::

    OUT_DIR/                    the merged model: AutoModelForCausalLM.from_pretrained(OUT_DIR) loads it
        config.json, generation_config.json, model.safetensors, tokenizer files
        adapter/                the LoRA adapter alone: peft.PeftModel.from_pretrained(base, OUT_DIR/adapter)
            adapter_config.json, adapter_model.safetensors
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

import torch
import yaml
from pydantic import ValidationError
from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict
from transformers import AutoConfig, AutoTokenizer

from honing.config.schema import LoraSection
from honing.distributed import is_rank0
from honing.errors import CheckpointError
from honing.export.hf_folder import export_hf, save_adapter, swap_into_place
from honing.export.model_card import write_checkpoint_card
from honing.models.loading import build_model_from_config
from honing.models.lora import apply_lora
from honing.models.quantize import quantize_model
from honing.models.wrappers import is_lora
from honing.train.checkpoint import Checkpointer
from honing.train.train_module import ModelState

log = logging.getLogger(__name__)

ADAPTER_DIR = "adapter"
# what a multimodal processor's save_pretrained writes beside the tokenizer's files
PROCESSOR_FILES = ("processor_config.json", "preprocessor_config.json")


class ModelOnly(ModelState):
    """Model state alone, for the Checkpointer: loads a checkpoint's weights without optimizer or trainer state."""

    def __init__(self, model: torch.nn.Module):
        self.model = model

    def state_dict_to_load(self, load_optimizer_state: bool = False) -> dict[str, Any]:
        """The model's state to fill in (never the optimizer's)."""
        return {"model": get_model_state_dict(self.model)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Copy the loaded weights into the model."""
        set_model_state_dict(self.model, state_dict["model"])


def load_model_from_checkpoint(checkpoint_dir: str) -> tuple[torch.nn.Module, Any]:
    """The model (with the checkpoint's weights) and tokenizer saved in ``checkpoint_dir``; a peft model
    when the run's ``config.yaml`` sets ``model.lora``."""
    if not Checkpointer.dir_is_checkpoint(checkpoint_dir):
        raise CheckpointError(f"{checkpoint_dir}: not a complete honing checkpoint (no .complete marker)")
    model_dir = os.path.join(checkpoint_dir, "model")
    if not os.path.exists(os.path.join(model_dir, "config.json")):
        raise CheckpointError(f"{checkpoint_dir}: has no model/config.json, so the architecture is unknown")
    model = build_model_from_config(AutoConfig.from_pretrained(model_dir))
    model_section = run_model_section(checkpoint_dir)
    lora = lora_settings(model_section, checkpoint_dir)
    if model_section.get("quantize"):  # QLoRA: the saved base is quantized; the export de-quantizes it
        skip_modules = model_section.get("quantize_skip_modules") or ()  # left in full precision, as in the run
        quantize_model(model, str(model_section["quantize"]), device=torch.device("cpu"), skip_modules=skip_modules)
    if lora is not None:  # the saved state is the peft-wrapped model's, so wrap the same way before loading
        # peft records this as the adapter's base model: the run's, not this weightless config folder
        model.name_or_path = model_section.get("name_or_path") or ""
        model = apply_lora(model, **lora.model_dump())
    # a whole model in this one process: under torchrun only rank 0 exports, so no collectives
    Checkpointer().load(
        checkpoint_dir, ModelOnly(model), load_optimizer_state=False, load_trainer_state=False, this_process_only=True
    )
    tokenizer_dir = os.path.join(checkpoint_dir, "tokenizer")
    return model, load_processor(tokenizer_dir) if os.path.isdir(tokenizer_dir) else None


def load_processor(folder: str) -> Any:
    """The saved processor of a vision-language run (image processor + tokenizer), else the tokenizer."""
    if any(os.path.exists(os.path.join(folder, name)) for name in PROCESSOR_FILES):
        from transformers import AutoProcessor

        return AutoProcessor.from_pretrained(folder)
    return AutoTokenizer.from_pretrained(folder)


def run_model_section(checkpoint_dir: str) -> dict[str, Any]:
    """The ``model`` section of the checkpoint's run config ``config.yaml`` (empty without one)."""
    path = os.path.join(checkpoint_dir, "config.yaml")
    if not os.path.exists(path):
        return {}
    try:
        with open(path, encoding="utf-8") as handle:
            config = yaml.safe_load(handle)
    except (OSError, yaml.YAMLError) as error:
        raise CheckpointError(f"{path}: cannot read the run config: {type(error).__name__}: {error}") from None
    model = config.get("model") if isinstance(config, dict) else None
    return model if isinstance(model, dict) else {}


def lora_settings(model_section: dict[str, Any], checkpoint_dir: str) -> LoraSection | None:
    """The validated ``model.lora`` settings of a run's model section (None: the run trained all weights)."""
    lora = model_section.get("lora")
    if lora is None:
        return None
    try:
        return LoraSection.model_validate(lora)
    except ValidationError as error:
        problem = error.errors()[0]
        key = ".".join(["model", "lora", *map(str, problem["loc"])])
        path = os.path.join(checkpoint_dir, "config.yaml")
        raise CheckpointError(f"{path}: {key}: {problem['msg']} (got {lora!r})") from None


def export_checkpoint(checkpoint_dir: str, out_dir: str) -> str:
    """Write the checkpoint's model and tokenizer to ``out_dir`` in Hugging Face format (LoRA merged in)."""
    model, tokenizer = load_model_from_checkpoint(checkpoint_dir)
    export_hf(model, tokenizer, out_dir)
    write_checkpoint_card(checkpoint_dir, out_dir)
    return out_dir


def merge_checkpoint(checkpoint_dir: str, out_dir: str) -> str:
    """Write a checkpoint's merged model and tokenizer to ``out_dir`` and its adapter to ``out_dir/adapter``.

    Everything is written to a sibling folder and swapped in at the end, so ``out_dir`` never holds a
    merged model without its adapter.
    """
    model, tokenizer = load_model_from_checkpoint(checkpoint_dir)
    staging = f"{out_dir.rstrip('/')}.merging"
    export_hf(model, tokenizer, staging)
    write_checkpoint_card(checkpoint_dir, staging)
    if is_lora(model):
        save_adapter(model, os.path.join(staging, ADAPTER_DIR))
    else:
        log.warning(
            "%s has no LoRA adapter (model.lora is not set in its config.yaml): wrote the full model to "
            "%s without an adapter folder; `honing export` does the same",
            checkpoint_dir,
            out_dir,
        )
    return swap_into_place(staging, out_dir)


def load_model_weights(model: torch.nn.Module, checkpoint_dir: str) -> None:
    """Copy a checkpoint's weights into ``model`` in place (every rank of a sharded model takes part)."""
    Checkpointer().load(checkpoint_dir, ModelOnly(model), load_optimizer_state=False, load_trainer_state=False)


class LiveModelExport:
    """Exports a checkpoint of the running run (its best) through the run's own model: the checkpoint's weights are
    loaded into the live model in place and streamed out a layer at a time, so no second model is built. Unless
    ``keep_loaded`` (``load_best_model_at_end``: the run ends on the best model, as in Hugging Face's Trainer), the
    final weights are loaded back from ``final_checkpoint()`` afterwards. Without a final checkpoint to come back to,
    rank 0 builds a separate model from the checkpoint instead (``export_checkpoint``)."""

    def __init__(
        self,
        model: Callable[[], torch.nn.Module],
        processor: Callable[[], Any],
        final_checkpoint: Callable[[], str],
        *,
        keep_loaded: bool,
    ):
        self.model = model
        self.processor = processor
        self.final_checkpoint = final_checkpoint
        self.keep_loaded = keep_loaded
        self.loaded: str | None = None  # the checkpoint the live model holds now, when not its final weights

    def __call__(self, checkpoint_dir: str, out_dir: str) -> str:
        """Write ``checkpoint_dir``'s model to ``out_dir`` as a Hugging Face folder (every rank calls this)."""
        final = self.final_checkpoint()
        same = os.path.realpath(checkpoint_dir) == os.path.realpath(final)
        if not same and not self.keep_loaded and not Checkpointer.dir_is_checkpoint(final):
            if is_rank0():
                export_checkpoint(checkpoint_dir, out_dir)
            return out_dir
        model = self.model()
        if not same and self.loaded != checkpoint_dir:
            load_model_weights(model, checkpoint_dir)
            self.loaded = checkpoint_dir
        export_hf(model, self.processor(), out_dir, write=is_rank0())
        if is_rank0():
            write_checkpoint_card(checkpoint_dir, out_dir)
        if self.loaded is not None and not self.keep_loaded:
            load_model_weights(model, final)
            self.loaded = None
        return out_dir
