"""Model loading, building from configs, LoRA and wrappers (export to Hugging Face format: ``honing.export``)."""

from honing.models.freeze import freeze_layers
from honing.models.loading import (
    build_model_config,
    build_model_from_config,
    count_parameters,
    load_pretrained_model,
)
from honing.models.lora import apply_lora
from honing.models.wrappers import is_lora, transformers_model, unwrap_model

__all__ = [
    "build_model_config",
    "build_model_from_config",
    "load_pretrained_model",
    "count_parameters",
    "unwrap_model",
    "transformers_model",
    "apply_lora",
    "freeze_layers",
    "is_lora",
]
