"""Model loading, building from configs, LoRA, wrappers, and export to Hugging Face format."""

from honing.models.export import export_hf, merged_model, save_adapter
from honing.models.loading import (
    build_model_config,
    build_model_from_config,
    count_parameters,
    load_pretrained_model,
)
from honing.models.lora import apply_lora, freeze_layers
from honing.models.wrappers import is_lora, transformers_model, unwrap_model

__all__ = [
    "build_model_config",
    "build_model_from_config",
    "load_pretrained_model",
    "count_parameters",
    "export_hf",
    "merged_model",
    "save_adapter",
    "unwrap_model",
    "transformers_model",
    "apply_lora",
    "freeze_layers",
    "is_lora",
]
