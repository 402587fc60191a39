"""What honing must know about a vision-language family that the auto classes do not say: one declarative entry each.

An entry names the processor outputs the model's forward takes and how they are laid out (so a collator can
concatenate rows), where the vision tower, projector and language model live (so freezing and LoRA can target
them) and how the image-size limits of the config reach the processor. This is VeOmni's ``build_data_collate_info``,
without patching model code. A model type with no entry gets a generic family derived from the model's module
names and the processor's output names (``generic_family``): llava, idefics3 and smolvlm need no entry.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import torch

from honing.errors import ConfigError
from honing.models.wrappers import transformers_model

if TYPE_CHECKING:
    from transformers import ProcessorMixin
    from transformers.image_processing_utils import BaseImageProcessor

# How `pixel_values` is laid out; every layout concatenates on dim 0 across the rows of a batch.
#   "patches": [patch rows of all images, patch_dim]; image i has prod(image_grid_thw[i]) rows (Qwen-VL).
#   "crops":   [crops of all images, patches per crop, patch_dim]; image i has image_num_crops[i] crops (Molmo2).
#   "images":  [images, channels, height, width]; one entry per image (llava).
#   "rows":    [rows, images per row, channels, height, width] (idefics3, smolvlm): rows are padded to the most
#              images and the largest size with zeros (pixel_attention_mask marks real pixels), then concatenated.
PixelLayout = Literal["patches", "crops", "images", "rows"]

# The default LoRA targets: the attention and MLP projections of the language model (olmOCR's choice).
LANGUAGE_MODEL_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# Names a model gives its parts, as seen in transformers' image-text-to-text models.
VISION_NAMES = ("visual", "vision_tower", "vision_model", "vision_encoder", "image_encoder", "vit")
PROJECTOR_NAMES = ("multi_modal_projector", "mm_projector", "connector", "merger", "projector", "vision_projection")
LANGUAGE_NAMES = ("language_model", "text_model", "llm", "lm_head")
PART_NAMES = {"vision": VISION_NAMES, "projector": PROJECTOR_NAMES, "language": LANGUAGE_NAMES}
# Inputs every family takes and the collator builds itself.
TEXT_KEYS = ("input_ids", "attention_mask", "labels", "position_ids")


def _size_limits(image_processor: BaseImageProcessor, min_pixels: int | None, max_pixels: int | None) -> dict[str, Any]:
    """Qwen-VL image processors: ``size.shortest_edge`` / ``longest_edge`` are pixel counts (min / max pixels)."""
    size = {key: value for key, value in dict(getattr(image_processor, "size", None) or {}).items() if value}
    size |= {key: value for key, value in (("shortest_edge", min_pixels), ("longest_edge", max_pixels)) if value}
    return {"size": size} if min_pixels or max_pixels else {}


def _crop_limits(image_processor: BaseImageProcessor, min_pixels: int | None, max_pixels: int | None) -> dict[str, Any]:
    """Molmo2 tiles an image into fixed square crops beside one low-resolution view: ``max_pixels`` caps the crops
    (``max_crops``, at least 1); there is no minimum, the low-resolution view of the whole image is always there."""
    if max_pixels is None:
        return {}
    size = dict(image_processor.size)
    return {"max_crops": max(1, max_pixels // (size["height"] * size["width"]))}


def _no_limits(image_processor: BaseImageProcessor, min_pixels: int | None, max_pixels: int | None) -> dict[str, Any]:
    """A fixed-size image processor (llava's CLIP crops) has no pixel limits to set."""
    return {}


@dataclass(frozen=True)
class VLFamily:
    """Per-family facts a vision-language recipe needs: processor keys, their layout, module prefixes, LoRA targets."""

    model_type: str
    # Processor outputs the model's forward takes, besides input_ids / attention_mask.
    model_input_keys: tuple[str, ...]
    # Of those, the keys laid out like input_ids ([rows, seq]), padded like input_ids with 0.
    per_token_keys: tuple[str, ...]
    pixel_layout: PixelLayout
    # Keys with one entry per image, concatenated on dim 0 (image_grid_thw).
    per_image_keys: tuple[str, ...]
    # Parameter-name prefixes (after unwrapping: transformers names, no peft prefix) of the three parts.
    vision_modules: tuple[str, ...]
    projector_modules: tuple[str, ...]
    language_modules: tuple[str, ...]
    # The text the processor expands once per image.
    image_token: str
    # Per-document 3-D rope positions (``position_ids_for_packing``) make packed rows exact.
    packing: bool
    # ``(image_processor, min_pixels, max_pixels)`` from the config -> attributes to set on the image processor.
    pixel_kwargs: Callable[[BaseImageProcessor, int | None, int | None], dict[str, Any]]
    # Module-name endings LoRA adapts inside the language model (never the tower's own q/k/v).
    lora_target_modules: tuple[str, ...] = LANGUAGE_MODEL_LORA_TARGETS
    # Keys whose values index rows of the flattened pixel_values (Molmo2's image_token_pooling, -1 for none): when
    # rows are concatenated, each row's indices shift by the patch rows of the rows before it.
    pixel_index_keys: tuple[str, ...] = ()
    # The key that says how many pixel_values entries each image has ("patches" and "crops" layouts).
    pixel_count_key: str | None = None
    # True when the processor's only text-derived output is mm_token_type_ids (1 at image tokens): padded batches
    # then run the image processor alone beside the stored ids, which skips the tokenizer and the placeholder
    # expansion, about two thirds of a Qwen-VL processor call.
    image_only_batches: bool = False
    # True when derived from module and processor names rather than registered.
    generic: bool = field(default=False, compare=False)


_QWEN_COMMON = {
    "model_input_keys": ("pixel_values", "image_grid_thw", "mm_token_type_ids"),
    "per_token_keys": ("mm_token_type_ids",),
    "pixel_layout": "patches",
    "per_image_keys": ("image_grid_thw",),
    "language_modules": ("model.language_model", "lm_head"),
    "image_token": "<|image_pad|>",
    "packing": True,
    "pixel_kwargs": _size_limits,
    "pixel_count_key": "image_grid_thw",
    "image_only_batches": True,
}

# The merger sits inside `model.visual` but is the projector: freezing "the vision tower" leaves it trainable.
FAMILIES: dict[str, VLFamily] = {
    "qwen2_vl": VLFamily(
        model_type="qwen2_vl",
        vision_modules=("model.visual.patch_embed", "model.visual.blocks"),
        projector_modules=("model.visual.merger",),
        **_QWEN_COMMON,
    ),
    "qwen2_5_vl": VLFamily(
        model_type="qwen2_5_vl",
        vision_modules=("model.visual.patch_embed", "model.visual.blocks"),
        projector_modules=("model.visual.merger",),
        **_QWEN_COMMON,
    ),
    # Qwen3-VL adds learned position embeddings and DeepStack mergers (projectors of intermediate tower layers).
    "qwen3_vl": VLFamily(
        model_type="qwen3_vl",
        vision_modules=("model.visual.patch_embed", "model.visual.pos_embed", "model.visual.blocks"),
        projector_modules=("model.visual.merger", "model.visual.deepstack_merger_list"),
        **_QWEN_COMMON,
    ),
    # Molmo2 needs mm_token_type_ids when training (its image tokens attend to each other bidirectionally).
    "molmo2": VLFamily(
        model_type="molmo2",
        model_input_keys=("pixel_values", "image_token_pooling", "image_grids", "image_num_crops", "mm_token_type_ids"),
        per_token_keys=("mm_token_type_ids",),
        pixel_layout="crops",
        per_image_keys=("image_grids", "image_num_crops"),
        vision_modules=("model.vision_tower",),
        projector_modules=("model.multi_modal_projector",),
        language_modules=("model.language_model", "lm_head"),
        image_token="<|image|>",
        packing=False,
        pixel_kwargs=_crop_limits,
        pixel_index_keys=("image_token_pooling",),
        pixel_count_key="image_num_crops",
    ),
}


def family_for(
    model_type: str, *, model: torch.nn.Module | None = None, processor: ProcessorMixin | None = None
) -> VLFamily:
    """The registered family of ``model_type``, or a generic one derived from ``model`` and ``processor``."""
    if model_type in FAMILIES:
        return FAMILIES[model_type]
    return generic_family(model_type, model=model, processor=processor)


def generic_family(
    model_type: str, *, model: torch.nn.Module | None = None, processor: ProcessorMixin | None = None
) -> VLFamily:
    """A family for an unregistered image-text-to-text model: module prefixes from the model's module names
    (``vision_tower`` / ``visual`` / ``vision_model`` ...), input keys from the processor's output names and the
    model's forward signature. Without a model, the prefixes are the usual candidates (unmatched ones are harmless)."""
    keys = _input_keys(model, processor)
    if model is not None:
        vision, projector, language = _parts_of(model)
    else:
        vision = tuple(f"{root}{name}" for root in ("model.", "") for name in VISION_NAMES)
        projector = tuple(f"{root}{name}" for root in ("model.", "") for name in PROJECTOR_NAMES)
        language = tuple(f"{root}{name}" for root in ("model.", "") for name in LANGUAGE_NAMES)
    # idefics3 / smolvlm pad their images per row and say which pixels are real with pixel_attention_mask.
    layout: PixelLayout = "rows" if "pixel_attention_mask" in keys else "images"
    return VLFamily(
        model_type=model_type,
        model_input_keys=keys,
        per_token_keys=tuple(key for key in keys if key.endswith("token_type_ids")),
        pixel_layout=layout,
        per_image_keys=tuple(key for key in keys if key in ("image_sizes", "image_grid_thw")),
        vision_modules=vision,
        projector_modules=projector,
        language_modules=language,
        image_token=getattr(processor, "image_token", None) or "<image>",
        packing=False,
        pixel_kwargs=_no_limits,
        generic=True,
    )


def lora_targets(family: VLFamily) -> str:
    """A peft ``target_modules`` regex: the family's LoRA module names, inside its language model only."""
    roots = "|".join(re.escape(prefix) for prefix in family.language_modules)
    names = "|".join(re.escape(name) for name in family.lora_target_modules)
    return rf"(?:{roots})\..*\.(?:{names})"


def module_part(family: VLFamily, name: str) -> Literal["vision", "projector", "language"] | None:
    """Which part of the model a parameter or module named ``name`` (transformers name) belongs to, or None."""
    parts = (
        ("vision", family.vision_modules),
        ("projector", family.projector_modules),
        ("language", family.language_modules),
    )
    for part, prefixes in parts:
        if any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes):
            return part  # type: ignore[return-value]
    return None


def part_patterns(family: VLFamily, part: Literal["vision", "projector", "language"]) -> list[str]:
    """fnmatch patterns (as ``model.freeze_layers`` takes) for every parameter of one part of the model."""
    prefixes = {"vision": family.vision_modules, "projector": family.projector_modules}.get(
        part, family.language_modules
    )
    return [pattern for prefix in prefixes for pattern in (prefix, f"{prefix}.*")]


def set_pixel_limits(
    processor: ProcessorMixin, family: VLFamily, min_pixels: int | None, max_pixels: int | None
) -> None:
    """Apply the config's image-size limits to the processor's image processor, so they are saved with it."""
    image_processor = processor.image_processor
    for key, value in family.pixel_kwargs(image_processor, min_pixels, max_pixels).items():
        setattr(image_processor, key, value)


def pixel_entries_per_image(family: VLFamily, features: dict[str, Any]) -> list[int]:
    """How many ``pixel_values`` entries (dim 0) each image of a processor output has."""
    if family.pixel_layout == "patches":
        return [int(n) for n in torch.as_tensor(features[family.pixel_count_key]).prod(dim=-1).tolist()]
    if family.pixel_layout == "crops":
        return [int(n) for n in torch.as_tensor(features[family.pixel_count_key]).tolist()]
    if family.pixel_layout == "images":
        return [1] * len(features["pixel_values"])
    raise ValueError(f"pixel_layout {family.pixel_layout!r} keeps one entry per row, not per image")


def concat_image_inputs(family: VLFamily, rows: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
    """The image inputs (model inputs that are not per token) of several processed rows, joined as the processor
    would have returned them for the rows together: concatenated on dim 0, pixel indices shifted past earlier rows."""
    keys = [key for key in family.model_input_keys if key not in family.per_token_keys]
    joined: dict[str, torch.Tensor] = {}
    for key in keys:
        parts, offset = [], 0
        for row in rows:  # a row without images (text only) has none of these keys
            if row.get(key) is not None:
                part = torch.as_tensor(row[key])
                if key in family.pixel_index_keys:
                    # A row's indices count its own flattened pixel rows (crops x patches); -1 marks an empty slot.
                    part = torch.where(part >= 0, part + offset, part)
                parts.append(part)
            if row.get("pixel_values") is not None:
                offset += torch.as_tensor(row["pixel_values"]).shape[:2].numel()
        if parts and family.pixel_layout == "rows" and key not in family.per_image_keys:
            # [rows, images, ...] per row: pad the image count and every size to the largest with zeros (empty
            # images, masked pixels) at the end, as the processor pads a batch.
            largest = [max(part.shape[dim] for part in parts) for dim in range(1, parts[0].dim())]
            parts = [_pad_to(part, largest) for part in parts]
        if parts:
            joined[key] = torch.cat(parts, dim=0)
    return joined


def _pad_to(tensor: torch.Tensor, sizes: Sequence[int]) -> torch.Tensor:
    """``tensor`` zero-padded at the end of every dim but the first to ``sizes``."""
    padding: list[int] = []
    for dim in reversed(range(1, tensor.dim())):
        padding += [0, sizes[dim - 1] - tensor.shape[dim]]
    return torch.nn.functional.pad(tensor, padding)


def position_ids_for_packing(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    mm_token_type_ids: torch.Tensor,
    image_grid_thw: torch.Tensor | None = None,
) -> torch.Tensor:
    """The rope positions of ONE document (a 1-D ``input_ids`` of length L) of a Qwen-VL model: ``[4, 1, L]``.

    Row 0 is the text position (0..L-1) and rows 1-3 the temporal / height / width positions that the model's own
    ``get_rope_index`` computes. Concatenate documents on the last dim to build a packed row; pass the result as
    ``position_ids`` with ``attention_mask=None`` and ``use_cache=False``: the model reads row 0 to find where each
    document starts and keeps attention inside documents, and uses rows 1-3 for M-RoPE. With a cache (``use_cache``
    defaults to True, in training too) transformers skips that detection and documents silently attend to each other.
    ``image_grid_thw`` holds this document's images only; pixel_values / image_grid_thw of the packed row are the
    documents' concatenated in order.
    """
    if input_ids.dim() != 1:
        raise ValueError(
            f"position_ids_for_packing takes one document (1-D input_ids), got shape {tuple(input_ids.shape)}"
        )
    inner = _rope_owner(model)
    ids = input_ids[None]
    types = mm_token_type_ids.reshape(1, -1).to(ids.device)
    if image_grid_thw is None or len(image_grid_thw) == 0:
        rope = torch.arange(ids.shape[1], device=ids.device).view(1, 1, -1).expand(3, 1, -1)
    else:
        rope, _ = inner.get_rope_index(ids, mm_token_type_ids=types, image_grid_thw=image_grid_thw)
    text = torch.arange(ids.shape[1], device=ids.device, dtype=rope.dtype).view(1, 1, -1)
    return torch.cat([text, rope.to(text.dtype)], dim=0)


def _rope_owner(model: torch.nn.Module) -> torch.nn.Module:
    """The module with ``get_rope_index`` (the inner ``model`` of a Qwen-VL ``...ForConditionalGeneration``)."""
    base = transformers_model(model)
    for candidate in (base, getattr(base, "model", None)):
        if candidate is not None and callable(getattr(candidate, "get_rope_index", None)):
            return candidate
    raise ConfigError(
        f"data.packing: {type(base).__name__} has no get_rope_index: per-document 3-D rope positions exist only "
        "for the Qwen-VL families; set data.packing: false"
    )


def _input_keys(model: torch.nn.Module | None, processor: ProcessorMixin | None) -> tuple[str, ...]:
    names: Iterable[str] = getattr(processor, "model_input_names", None) or ("pixel_values",)
    keys = [name for name in names if name not in TEXT_KEYS]
    if model is not None:
        forward = inspect.signature(transformers_model(model).forward).parameters
        # A key the forward does not name would land in **kwargs and be ignored or refused deep inside the model.
        keys = [key for key in keys if key in forward]
    return tuple(dict.fromkeys(keys))


def _parts_of(model: torch.nn.Module) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """Vision, projector and language prefixes from the module names of a transformers model (depth <= 2)."""
    base = transformers_model(model)
    names = [name for name, _ in base.named_modules() if name and name.count(".") <= 1]
    found: dict[str, list[str]] = {"vision": [], "projector": [], "language": []}
    for name in names:
        leaf = name.rsplit(".", 1)[-1]
        for part, candidates in PART_NAMES.items():
            # A projector nested in the tower (Qwen-VL's visual.merger) is the registered families' business.
            if leaf in candidates and not any(name.startswith(p + ".") for ps in found.values() for p in ps):
                found[part].append(name)
    missing = [part for part in ("vision", "language") if not found[part]]
    if missing:
        raise ConfigError(
            f"model: cannot find the {' and '.join(missing)} module(s) of {type(base).__name__} "
            f"(looked for {', '.join(VISION_NAMES + LANGUAGE_NAMES)}); its top modules are "
            f"{', '.join(name for name in names if '.' not in name or name.startswith('model.'))}"
        )
    return tuple(found["vision"]), tuple(found["projector"]), tuple(found["language"])


def uncovered_parameters(family: VLFamily, names: Sequence[str]) -> list[str]:
    """Parameter names that no part of ``family`` covers (a family that fits its model has none)."""
    return [name for name in names if module_part(family, name) is None]
