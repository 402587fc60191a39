"""Load a Hugging Face causal LM by name or folder, or build one from a transformers config."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

import torch
from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig

if TYPE_CHECKING:
    from transformers.utils.quantization_config import QuantizationConfigMixin

from honing.errors import ConfigError
from honing.hub import check_name_or_path, hub_load_error
from honing.models.model_shape import pretrained_config

log = logging.getLogger(__name__)


class ModelClass(Protocol):
    """A class that makes models as transformers' Auto classes do (``AutoModelForCausalLM``, ``OneLabelClassifier``)."""

    def from_pretrained(self, *args: object, **kwargs: object) -> torch.nn.Module:
        """A model with the weights of a folder or hub name."""
        ...

    def from_config(self, config: PretrainedConfig, **kwargs: object) -> torch.nn.Module:
        """A randomly initialised model of ``config``'s architecture."""
        ...


DTYPES = {
    "fp32": torch.float32,
    "float32": torch.float32,
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp16": torch.float16,
    "float16": torch.float16,
}


def build_model_config(
    config: Mapping[str, Any],
    *,
    vocab_size: int | None = None,
    max_position_embeddings: int | None = None,
    special_token_ids: Mapping[str, int | None] | None = None,
) -> PretrainedConfig:
    """A transformers config from a mapping with ``model_type``; vocabulary size, maximum length
    and special-token ids follow from the tokenizer and data unless the mapping gives them."""
    values = dict(config)
    model_type = values.pop("model_type", None)
    if not model_type:
        raise ConfigError("model.config.model_type: required key is missing (e.g. llama, qwen2, gpt2)")
    if vocab_size is not None:
        values.setdefault("vocab_size", vocab_size)
    if max_position_embeddings is not None:
        values.setdefault("max_position_embeddings", max_position_embeddings)
    for key, value in (special_token_ids or {}).items():
        if value is not None:
            values.setdefault(key, value)
    try:
        return AutoConfig.for_model(model_type, **values)
    except ValueError as error:
        raise ConfigError(f"model.config: {error}") from None


def build_model_from_config(
    config: PretrainedConfig, *, attn_implementation: str | None = "sdpa", dtype: torch.dtype = torch.float32
) -> torch.nn.Module:
    """A randomly initialised model (deterministic under the current torch seed): a causal LM, or an
    image-text-to-text model for a vision-language config."""
    return auto_model_class(config).from_config(config, attn_implementation=attn_implementation, dtype=dtype)


def auto_model_class(config: PretrainedConfig) -> ModelClass:
    """``AutoModelForImageTextToText`` for a vision-language model type, else ``AutoModelForCausalLM``."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    if config.model_type in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES:
        from transformers import AutoModelForImageTextToText

        return AutoModelForImageTextToText
    return AutoModelForCausalLM


def load_pretrained_model(
    name_or_path: str,
    *,
    attn_implementation: str | None = "sdpa",
    dtype: torch.dtype = torch.float32,
    trust_remote_code: bool = False,
    auto_class: ModelClass | None = None,
    quantization_config: QuantizationConfigMixin | None = None,
    device_map: str | Mapping[str, str] | None = None,
    state_dict: Mapping[str, torch.Tensor] | None = None,
    shape: Mapping[str, Any] | None = None,
    config: PretrainedConfig | None = None,
    load_kwargs: Mapping[str, Any] | None = None,
) -> torch.nn.Module:
    """A causal LM (or ``auto_class``'s model, e.g. ``AutoModelForImageTextToText``) from a local folder or a hub
    name; remote code only when the config allows it. ``quantization_config``, ``device_map`` and ``state_dict``
    go to transformers as they are (``quantized_loading``'s fallback: a base quantized as it is read). ``shape``
    (the config's ``model.shape``) must match the model's config, checked before any weight is read. ``config``: the
    model's config with ``model.config_overrides`` applied; ``load_kwargs``: ``model.load_kwargs``, further arguments
    of ``from_pretrained`` (the schema refuses those honing sets itself)."""
    from transformers.utils import logging as hf_logging

    check_name_or_path(name_or_path, "model.name_or_path")
    if shape is not None:
        pretrained_config(name_or_path, shape=shape, trust_remote_code=trust_remote_code, use_shape_offline=False)
    hf_logging.disable_progress_bar()  # a bar per shard of a small model is noise in the run's log
    placement = {
        "quantization_config": quantization_config,
        "device_map": device_map,
        "state_dict": state_dict,
        "config": config,
    }
    try:
        return (auto_class or AutoModelForCausalLM).from_pretrained(
            name_or_path,
            attn_implementation=attn_implementation,
            dtype=dtype,
            trust_remote_code=trust_remote_code,
            **{key: value for key, value in placement.items() if value is not None},
            **(load_kwargs or {}),
        )
    except OSError as error:  # one line: a hub name out of reach, missing or gated says which, and the fix
        raise hub_load_error("model.name_or_path", name_or_path, error) from None
    except (TypeError, ValueError) as error:
        if not load_kwargs:
            raise
        # e.g. an argument no model takes, or a subfolder without a config: transformers' message, on one line
        raise ConfigError(f"model.load_kwargs: {error}".splitlines()[0]) from None


def count_parameters(model: torch.nn.Module, *, trainable_only: bool = False, non_embedding: bool = False) -> int:
    """The number of (trainable) parameters, counting tied weights once.

    ``non_embedding`` leaves out the input token embeddings, as OLMo-core's ``num_non_embedding_params``
    does (the count ``1chinchilla`` durations use): an untied output head is counted, a head tied to the
    embeddings is not (it is the same tensor). Every parameter of a dense model is active.
    """
    skip: set[int] = set()
    if non_embedding:
        get_embeddings = getattr(model, "get_input_embeddings", None)
        embeddings = get_embeddings() if callable(get_embeddings) else None
        modules = (
            [embeddings]
            if isinstance(embeddings, torch.nn.Module)
            else [module for module in model.modules() if isinstance(module, torch.nn.Embedding)]
        )
        skip = {id(p) for module in modules for p in module.parameters()}
    return sum(p.numel() for p in model.parameters() if (p.requires_grad or not trainable_only) and id(p) not in skip)
