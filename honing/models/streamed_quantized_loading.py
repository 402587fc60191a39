"""QLoRA's base read one safetensors shard at a time: the model built on the meta device, then each shard memory-mapped,
each of its tensors converted to the run's dtype and quantized (the decoder's linears) or copied (norms, embeddings,
head) into the model, and the shard closed before the next is opened. The host never holds more than the quantized
model, plus the tensor being converted: a 70B base loads where its bf16 weights would not fit (bitsandbytes' loaders
quantize shard by shard in the same way).

The weights are those ``quantize_model`` makes of the full-precision model: the same function, on the same values in
the same dtype. transformers' own pieces keep its behaviour: its key renames (``get_model_conversion_mapping``), tied
weights (``tie_weights``) and the buffers it computes rather than reads (``initialize_weights``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from honing.errors import ConfigError
from honing.models.quantize import quantized_linears, weight_quantizer

log = logging.getLogger(__name__)

SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"


def checkpoint_shards(name_or_path: str) -> list[str] | None:
    """The local paths of the safetensors files of ``name_or_path`` (a folder or a hub name, downloaded to the cache
    as transformers does), or None when the model has no safetensors weights."""
    from transformers.utils import cached_file
    from transformers.utils.hub import get_checkpoint_shard_files

    missing_ok = {"_raise_exceptions_for_missing_entries": False, "_raise_exceptions_for_connection_errors": False}
    index = cached_file(name_or_path, SAFETENSORS_INDEX, **missing_ok)
    if index is not None:
        files, _ = get_checkpoint_shard_files(name_or_path, index)
        return list(files)
    single = cached_file(name_or_path, SAFETENSORS, **missing_ok)
    return [single] if single is not None else None


def renamings_for(model: nn.Module, shards: list[str]) -> list[Any] | None:
    """transformers' key renames for ``model`` (as ``from_pretrained`` applies them), or None when a checkpoint key
    needs one of its conversions that join or split tensors (e.g. a mixture of experts' per-expert weights stacked):
    those need several tensors at once, so transformers' own loader reads that model."""
    from safetensors import safe_open
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import WeightConverter, WeightRenaming, apply_converters, apply_renamings

    conversions = get_model_conversion_mapping(model)
    renamings = [conversion for conversion in conversions if isinstance(conversion, WeightRenaming)]
    converters = [conversion for conversion in conversions if isinstance(conversion, WeightConverter)]
    if converters:
        for path in shards:
            with safe_open(path, framework="pt") as shard:
                for key in shard.keys():  # noqa: SIM118 (safe_open is no mapping)
                    if apply_converters(apply_renamings(key, renamings), converters)[1] is not None:
                        return None
    return renamings


def model_key(key: str, model: nn.Module, renamings: list[Any], expected: dict[str, torch.Tensor]) -> str:
    """The model's name for checkpoint ``key``: transformers' renames, and its base-model prefix added or dropped."""
    from transformers.core_model_loading import rename_source_key

    prefix = getattr(model, "base_model_prefix", None)
    name, _ = rename_source_key(key, renamings, [], prefix, expected)
    if name not in expected and key in expected:  # the key should not have been renamed (transformers does the same)
        name, _ = rename_source_key(key, [], [], prefix, expected)
    return name


def load_shards(
    model: nn.Module,
    shards: list[str],
    renamings: list[Any],
    *,
    kind: str,
    device: torch.device,
    fsdp_shards: int,
    skip_modules: Sequence[str] = (),
) -> set[str]:
    """Fill ``model`` (built on the meta device) from ``shards``, one file at a time: the decoder's linear weights
    quantized to ``kind`` on ``device``, every other tensor copied there in the dtype the model was built with.
    Returns the names of the model's tensors read."""
    from safetensors import safe_open

    expected = model.state_dict()  # meta tensors: the names, shapes and dtypes to fill
    to_quantize = {f"{name}.weight" for name, _ in quantized_linears(model, skip_modules)}
    quantize = weight_quantizer(kind, fsdp_shards)
    loaded: set[str] = set()
    unexpected: list[str] = []
    for path in shards:
        with safe_open(path, framework="pt") as shard:  # memory-mapped: its pages are the file's, not the process's
            for key in shard.keys():  # noqa: SIM118 (safe_open is no mapping)
                name = model_key(key, model, renamings, expected)
                if name not in expected:
                    unexpected.append(key)
                    continue
                tensor = shard.get_tensor(key)  # a view of the mapped file: nothing is read until it is used
                if tensor.shape != expected[name].shape:
                    raise ConfigError(
                        f"model.name_or_path: {path} holds {key} of shape {tuple(tensor.shape)}, but the model's "
                        f"config.json makes {name} {tuple(expected[name].shape)}; the folder's weights and config "
                        "do not match"
                    )
                set_tensor(
                    model, name, read_tensor(tensor, expected[name].dtype, device, quantize, name in to_quantize)
                )
                loaded.add(name)
                del tensor  # the last reference to this part of the map: the shard is released when the file closes
    # what save_pretrained reverses (as transformers records it): the renames these keys went through
    model._weight_conversions = [renaming for renaming in renamings if renaming.was_used()]
    if unexpected:
        log.warning(
            "model.name_or_path: %d checkpoint tensor(s) not used by the model, e.g. %s", len(unexpected), unexpected[0]
        )
    return loaded


def read_tensor(
    tensor: torch.Tensor,
    dtype: torch.dtype,
    device: torch.device,
    quantize: Callable[[torch.Tensor], torch.Tensor | None],
    quantized: bool,
) -> torch.Tensor:
    """A checkpoint tensor as the model holds it: quantized (from its values in ``dtype`` on ``device``, as
    ``quantize_model`` does), else copied out of the map (a view would keep the whole file mapped and resident)."""
    if quantized:
        weight = tensor.to(device=device, dtype=dtype)  # no copy when the file's dtype is the run's
        result = quantize(weight)
        if result is not None:
            return result
        # 4-bit blocks do not fit this weight: kept in full precision (quantize_model says which)
    return tensor.to(device=device, dtype=dtype, copy=True)


def set_tensor(model: nn.Module, name: str, value: torch.Tensor) -> None:
    """Put ``value`` in place of the meta parameter or buffer ``name``; marked as loaded, so transformers'
    ``initialize_weights`` leaves it as it is."""
    owner_name, _, attribute = name.rpartition(".")
    owner = model.get_submodule(owner_name)
    if attribute in owner._parameters:
        old = owner._parameters[attribute]
        trainable = bool(old.requires_grad) and value.is_floating_point() and type(value) is torch.Tensor
        value = nn.Parameter(value, requires_grad=trainable)  # a quantized weight is frozen
        owner._parameters[attribute] = value
    else:
        owner._buffers[attribute] = value
    value._is_hf_initialized = True


def finish_loading(model: nn.Module, loaded: set[str], *, device: torch.device, name_or_path: str) -> None:
    """What ``from_pretrained`` does once the weights are in: the tied weights tied, the buffers the checkpoint does
    not hold computed (rotary frequencies), any weight it lacks initialised (with a warning, as transformers does),
    evaluation mode, the model's name and generation config."""
    missing = set(model.state_dict()) - loaded
    model.tie_weights(missing_keys=missing, recompute_mapping=False)
    lacking = []
    for owner_name, owner in model.named_modules():
        for table in (owner._parameters, owner._buffers):
            for attribute, tensor in table.items():
                if tensor is None or tensor.device.type != "meta":
                    continue
                empty = torch.empty_like(tensor, device=device)
                is_parameter = table is owner._parameters
                table[attribute] = nn.Parameter(empty, requires_grad=tensor.requires_grad) if is_parameter else empty
                if attribute not in owner._non_persistent_buffers_set:
                    lacking.append(f"{owner_name}.{attribute}" if owner_name else attribute)
    if lacking:
        log.warning(
            "model.name_or_path: %s lacks %d weight(s) the model has (e.g. %s); they are initialised randomly",
            name_or_path,
            len(lacking),
            lacking[0],
        )
    model.initialize_weights()  # only what was not loaded: each loaded tensor is marked
    model.eval()  # as from_pretrained leaves it
    model.name_or_path = name_or_path
    if model.can_generate():
        from transformers import GenerationConfig

        try:
            model.generation_config = GenerationConfig.from_pretrained(name_or_path)
        except OSError:  # none saved: the one made from the model's config stays
            pass
