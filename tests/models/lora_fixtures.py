"""LoRA models and checkpoints for the export, checkpoint-model and ``honing merge`` tests."""

from __future__ import annotations

import os
import tempfile

import torch
import yaml

from honing.data.tokenizer import build_tokenizer
from honing.models.lora import apply_lora
from honing.train.checkpoint import Checkpointer
from honing.train.train_module import ModelState
from tests.helpers import tiny_llama

VOCAB = 258  # the byte tokenizer's size
LORA = {
    "rank": 4,
    "alpha": 8,
    "dropout": 0.0,
    "bias": "none",
    "target_modules": ["q_proj", "v_proj", "down_proj"],
    "task_type": "CAUSAL_LM",
    "modules_to_save": ["lm_head"],
}


def trained_lora_model(seed: int = 0, lora: dict | None = None) -> torch.nn.Module:
    """A tiny Llama with LoRA whose adapters (and saved modules) hold random non-zero values.

    peft starts B at zero, which would make the adapter a no-op and every comparison trivially true.
    """
    model = apply_lora(tiny_llama(vocab=VOCAB, seed=seed), **(lora or LORA))
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name or "modules_to_save" in name:
                param.add_(0.2 * torch.randn(param.shape, generator=generator))
    return model.eval()


def logits(model: torch.nn.Module) -> torch.Tensor:
    """The model's logits for a fixed batch of random tokens."""
    ids = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        return model(input_ids=ids).logits


class LoraModule(ModelState):
    """Just enough model state for the Checkpointer: the model and an AdamW over its trainable parameters."""

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)


def save_lora_checkpoint(checkpoint_dir: str, model: torch.nn.Module, lora: dict | None, **model_section) -> None:
    """A checkpoint laid out as a LoRA run saves it: DCP state of the peft model, the base model's
    config, the tokenizer and the run config with ``model.lora``."""
    run_config = {"method": "sft", "model": {"lora": lora, **model_section}}
    files: dict[str, str | bytes] = {
        "config.yaml": yaml.safe_dump(run_config),
        "model/config.json": model.config.to_json_string(),
    }
    with tempfile.TemporaryDirectory() as tmp:
        build_tokenizer("byte").save_pretrained(tmp)
        for name in os.listdir(tmp):
            with open(os.path.join(tmp, name), "rb") as handle:
                files[f"tokenizer/{name}"] = handle.read()
    Checkpointer().save(checkpoint_dir, LoraModule(model), {"global_step": 3}, extra_files=files)
