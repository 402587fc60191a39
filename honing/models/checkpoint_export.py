"""Export any honing checkpoint directory to a Hugging Face folder."""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict
from transformers import AutoConfig, AutoTokenizer

from honing.errors import CheckpointError
from honing.models.export import export_hf
from honing.models.loading import build_model_from_config
from honing.train.checkpoint import Checkpointer
from honing.train.train_module import TrainModule


class ModelOnly(TrainModule):
    """A TrainModule shell that loads only the model weights from a checkpoint."""

    def __init__(self, model: torch.nn.Module):
        self.model = model

    def state_dict_to_load(self, load_optimizer_state: bool = False) -> dict[str, Any]:
        return {"model": get_model_state_dict(self.model)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        set_model_state_dict(self.model, state_dict["model"])


def load_model_from_checkpoint(checkpoint_dir: str) -> tuple[torch.nn.Module, Any]:
    """The model (with the checkpoint's weights) and tokenizer saved in ``checkpoint_dir``."""
    if not Checkpointer.dir_is_checkpoint(checkpoint_dir):
        raise CheckpointError(f"{checkpoint_dir}: not a complete honing checkpoint (no .complete marker)")
    model_dir = os.path.join(checkpoint_dir, "model")
    if not os.path.exists(os.path.join(model_dir, "config.json")):
        raise CheckpointError(f"{checkpoint_dir}: has no model/config.json, so the architecture is unknown")
    model = build_model_from_config(AutoConfig.from_pretrained(model_dir))
    Checkpointer().load(checkpoint_dir, ModelOnly(model), load_optimizer_state=False, load_trainer_state=False)
    tokenizer_dir = os.path.join(checkpoint_dir, "tokenizer")
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir) if os.path.isdir(tokenizer_dir) else None
    return model, tokenizer


def export_checkpoint(checkpoint_dir: str, out_dir: str) -> str:
    """Write the checkpoint's model and tokenizer to ``out_dir`` in Hugging Face format."""
    model, tokenizer = load_model_from_checkpoint(checkpoint_dir)
    return export_hf(model, tokenizer, out_dir)
