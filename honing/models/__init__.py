"""Model loading, building from configs, LoRA, and export to Hugging Face format."""

from honing.models.export import export_hf, unwrap_model
from honing.models.loading import (
    build_model_config,
    build_model_from_config,
    count_parameters,
    load_pretrained_model,
)
from honing.models.lora import apply_lora, freeze_layers, is_lora

__all__ = ["build_model_config", "build_model_from_config", "load_pretrained_model", "count_parameters",
           "export_hf", "unwrap_model", "apply_lora", "freeze_layers", "is_lora"]
