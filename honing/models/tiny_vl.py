"""Tiny random vision-language models and their processors, built in-process with no hub access (tests, examples).

A tiny processor is a byte-level tokenizer whose first ids are the family's special tokens, the family's chat template
(with `{% generation %}` markers) and the family's stock image processor set to small images; it is saved to a folder
and reloaded with ``AutoProcessor.from_pretrained`` like a released checkpoint. ``tiny_vl_config`` gives a config whose
special-token ids are those of the tiny tokenizer, so the two fit together for any ``vocab_size >= len(tokenizer)``.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from honing.cache import content_hash, default_cache_dir
from honing.errors import ConfigError
from honing.models.chat_templates_vl import (
    IDEFICS3_TEMPLATE,
    LLAVA_TEMPLATE,
    MOLMO2_TEMPLATE,
    QWEN2_VL_TEMPLATE,
    QWEN3_VL_TEMPLATE,
)

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedTokenizerBase, PreTrainedTokenizerFast, ProcessorMixin

# Bump when the folder a tiny processor writes changes, so stale cache entries are not reused.
FORMAT_VERSION = "1"
# Qwen-VL images: 14-pixel patches merged 2x2, so one image token per 28x28 pixels; at most 16 tokens by default.
QWEN_PATCH = 14
QWEN_MERGE = 2
QWEN_MIN_PIXELS = (QWEN_PATCH * QWEN_MERGE) ** 2 * 4
QWEN_MAX_PIXELS = (QWEN_PATCH * QWEN_MERGE) ** 2 * 16
# Molmo2 crops: 6x6 patches of 14 pixels with a 1-patch overlap margin, pooled 2x2 into image tokens.
MOLMO2_CROP = 84
# llava (CLIP tower): one fixed 56x56 input, 4x4 patches, one image token per patch.
LLAVA_IMAGE = 56
# idefics3: the longest side resized to 56 (no splitting into tiles), 4x4 patches shuffled 2x2 into 4 image tokens.
IDEFICS3_IMAGE = 56

_QWEN_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
_MOLMO2_TOKENS = (
    "<|endoftext|>",
    "<|pad|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|image|>",
    "<|video|>",
    "<im_start>",
    "<im_end>",
    "<im_patch>",
    "<im_col>",
    "<low_res_im_start>",
    "<im_low>",
    "<frame_start>",
    "<frame_end>",
)
_LLAVA_TOKENS = ("<s>", "</s>", "<pad>", "<image>")
_IDEFICS3_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<end_of_utterance>",
    "<fake_token_around_image>",
    "<global-img>",
    "<image>",
)


@dataclass(frozen=True)
class TinyFamily:
    """What a tiny model of one family needs: its special tokens (ids 0..n-1), tokenizer roles and template."""

    special_tokens: tuple[str, ...]
    eos_token: str
    pad_token: str
    bos_token: str | None
    chat_template: str
    config: Callable[[int, Callable[[str], int]], dict[str, Any]]
    processor: Callable[[PreTrainedTokenizerBase, str], ProcessorMixin]


def _qwen_text(vocab_size: int, token_id: Callable[[str], int], **extra: object) -> dict[str, Any]:
    # mrope_section splits head_dim / 2 = 8 rotary frequencies between the temporal, height and width axes.
    return {
        "vocab_size": vocab_size,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 4096,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3], **extra},
        "eos_token_id": token_id("<|im_end|>"),
        "pad_token_id": token_id("<|endoftext|>"),
        "bos_token_id": None,
    }


def _qwen_ids(token_id: Callable[[str], int]) -> dict[str, int]:
    return {
        "image_token_id": token_id("<|image_pad|>"),
        "video_token_id": token_id("<|video_pad|>"),
        "vision_start_token_id": token_id("<|vision_start|>"),
        "vision_end_token_id": token_id("<|vision_end|>"),
    }


def _qwen2_vl_config(vocab_size: int, token_id: Callable[[str], int]) -> dict[str, Any]:
    vision = {"depth": 2, "embed_dim": 32, "hidden_size": 64, "num_heads": 2, "mlp_ratio": 2, "patch_size": QWEN_PATCH}
    vision |= {"spatial_merge_size": QWEN_MERGE, "temporal_patch_size": 2}
    return {"text_config": _qwen_text(vocab_size, token_id), "vision_config": vision, **_qwen_ids(token_id)}


def _qwen2_5_vl_config(vocab_size: int, token_id: Callable[[str], int]) -> dict[str, Any]:
    # window_size 56 = 2x2 merged tokens per attention window; block 1 attends globally, as 7/15/23/31 do at 7B.
    vision = {"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "out_hidden_size": 64}
    vision |= {"patch_size": QWEN_PATCH, "spatial_merge_size": QWEN_MERGE, "temporal_patch_size": 2}
    vision |= {"window_size": 56, "fullatt_block_indexes": [1]}
    return {"text_config": _qwen_text(vocab_size, token_id), "vision_config": vision, **_qwen_ids(token_id)}


def _qwen3_vl_config(vocab_size: int, token_id: Callable[[str], int]) -> dict[str, Any]:
    # num_position_embeddings is a square (8x8 learned positions, interpolated to the image's grid).
    vision = {"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "out_hidden_size": 64}
    vision |= {"patch_size": QWEN_PATCH, "spatial_merge_size": QWEN_MERGE, "temporal_patch_size": 2}
    vision |= {"num_position_embeddings": 64, "deepstack_visual_indexes": [0]}
    text = _qwen_text(vocab_size, token_id, mrope_interleaved=True) | {"head_dim": 16}
    return {"text_config": text, "vision_config": vision, **_qwen_ids(token_id)}


def _molmo2_config(vocab_size: int, token_id: Callable[[str], int]) -> dict[str, Any]:
    # The tower and adapter initialise with initializer_range 0.2, not 0.02: at 0.02 a 2-layer tower and adapter
    # shrink image features to ~1e-7 and the language model cannot see the image. The language model keeps 0.02 (the
    # top-level value initialises it); at 0.2 its first loss is far above log(vocab). The special ids sit inside the
    # vocabulary (their defaults are past 151935).
    init = 0.2
    patches = (MOLMO2_CROP // 14) ** 2
    vision = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2}
    vision |= {"num_key_value_heads": 2, "head_dim": 16, "image_size": [MOLMO2_CROP, MOLMO2_CROP], "patch_size": 14}
    vision |= {"num_position_embeddings": patches, "initializer_range": init}
    adapter = {"vision_feature_layer": [-1], "hidden_size": 32, "num_attention_heads": 2, "num_key_value_heads": 2}
    adapter |= {"head_dim": 16, "intermediate_size": 64, "text_hidden_size": 64, "initializer_range": init}
    text = {"vocab_size": vocab_size, "additional_vocab_size": 0, "hidden_size": 64, "intermediate_size": 128}
    text |= {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16}
    text |= {"max_position_embeddings": 4096}
    text |= {"eos_token_id": token_id("<|im_end|>"), "pad_token_id": token_id("<|pad|>")}
    text |= {"bos_token_id": token_id("<|endoftext|>")}
    return {
        "vision_config": vision,
        "adapter_config": adapter,
        "text_config": text,
        "image_start_token_id": token_id("<im_start>"),
        "low_res_image_start_token_id": token_id("<low_res_im_start>"),
        "image_end_token_id": token_id("<im_end>"),
        "image_patch_id": token_id("<im_patch>"),
        "frame_start_token_id": token_id("<frame_start>"),
        "frame_end_token_id": token_id("<frame_end>"),
    }


def _llava_config(vocab_size: int, token_id: Callable[[str], int]) -> dict[str, Any]:
    vision = {"model_type": "clip_vision_model", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2}
    vision |= {"num_attention_heads": 2, "image_size": LLAVA_IMAGE, "patch_size": 14, "projection_dim": 32}
    text = {"model_type": "llama", "vocab_size": vocab_size, "hidden_size": 64, "intermediate_size": 128}
    text |= {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}
    text |= {"max_position_embeddings": 4096, "bos_token_id": token_id("<s>"), "eos_token_id": token_id("</s>")}
    text |= {"pad_token_id": token_id("<pad>")}
    return {
        "vision_config": vision,
        "text_config": text,
        "image_token_index": token_id("<image>"),
        "vision_feature_select_strategy": "default",
        "vision_feature_layer": -1,
    }


def _idefics3_config(vocab_size: int, token_id: Callable[[str], int]) -> dict[str, Any]:
    vision = {"model_type": "idefics3_vision", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2}
    vision |= {"num_attention_heads": 2, "image_size": IDEFICS3_IMAGE, "patch_size": 14}
    text = {"model_type": "llama", "vocab_size": vocab_size, "hidden_size": 64, "intermediate_size": 128}
    text |= {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}
    text |= {"max_position_embeddings": 4096, "bos_token_id": None, "eos_token_id": token_id("<end_of_utterance>")}
    text |= {"pad_token_id": token_id("<|endoftext|>")}
    return {"vision_config": vision, "text_config": text, "image_token_id": token_id("<image>"), "scale_factor": 2}


def _qwen_family(
    template: str,
    config: Callable[[int, Callable[[str], int]], dict[str, Any]],
    processor_class: str,
    video_class: str,
) -> TinyFamily:
    """A Qwen-VL family: Qwen's special tokens and roles (no bos token), its processor named by transformers class."""

    def build(tokenizer: PreTrainedTokenizerBase, chat_template: str) -> ProcessorMixin:
        import transformers
        from transformers import Qwen2VLImageProcessor

        size = {"shortest_edge": QWEN_MIN_PIXELS, "longest_edge": QWEN_MAX_PIXELS}
        shape = {"patch_size": QWEN_PATCH, "merge_size": QWEN_MERGE, "temporal_patch_size": 2}
        return getattr(transformers, processor_class)(
            image_processor=Qwen2VLImageProcessor(size=size, **shape),
            video_processor=getattr(transformers, video_class)(**shape),
            tokenizer=tokenizer,
            chat_template=chat_template,
        )

    # roles: eos, pad, and no bos token (Qwen tokenizers have none)
    return TinyFamily(_QWEN_TOKENS, "<|im_end|>", "<|endoftext|>", None, template, config, build)


def _molmo2_processor(tokenizer: PreTrainedTokenizerBase, chat_template: str) -> ProcessorMixin:
    from transformers import Molmo2ImageProcessor, Molmo2Processor, Molmo2VideoProcessor

    # Released Molmo2: 378-pixel crops, 4-patch margins, up to 8 crops; scaled down to a few image tokens.
    image_processor = Molmo2ImageProcessor(
        size={"height": MOLMO2_CROP, "width": MOLMO2_CROP}, max_crops=2, overlap_margins=[1, 1], patch_size=14
    )
    video_processor = Molmo2VideoProcessor(size={"height": MOLMO2_CROP, "width": MOLMO2_CROP}, patch_size=14)
    return Molmo2Processor(image_processor, video_processor, tokenizer, chat_template=chat_template)


def _llava_processor(tokenizer: PreTrainedTokenizerBase, chat_template: str) -> ProcessorMixin:
    from transformers import LlavaImageProcessor, LlavaProcessor

    image_processor = LlavaImageProcessor(
        size={"shortest_edge": LLAVA_IMAGE}, crop_size={"height": LLAVA_IMAGE, "width": LLAVA_IMAGE}
    )
    # CLIP adds a CLS position that the "default" feature strategy drops again: one image token per patch.
    return LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=14,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=chat_template,
    )


def _idefics3_processor(tokenizer: PreTrainedTokenizerBase, chat_template: str) -> ProcessorMixin:
    from transformers import Idefics3ImageProcessor, Idefics3Processor

    size = {"longest_edge": IDEFICS3_IMAGE}
    image_processor = Idefics3ImageProcessor(do_image_splitting=False, size=size, max_image_size=size)
    # image_seq_len: (56 / 14)^2 patches / scale_factor^2 = 4 tokens per image.
    return Idefics3Processor(image_processor, tokenizer, image_seq_len=4, chat_template=chat_template)


TINY_FAMILIES: dict[str, TinyFamily] = {
    "qwen2_vl": _qwen_family(QWEN2_VL_TEMPLATE, _qwen2_vl_config, "Qwen2VLProcessor", "Qwen2VLVideoProcessor"),
    "qwen2_5_vl": _qwen_family(QWEN2_VL_TEMPLATE, _qwen2_5_vl_config, "Qwen2_5_VLProcessor", "Qwen2VLVideoProcessor"),
    "qwen3_vl": _qwen_family(QWEN3_VL_TEMPLATE, _qwen3_vl_config, "Qwen3VLProcessor", "Qwen3VLVideoProcessor"),
    # the other families, one a row: TinyFamily's fields in order (special tokens, eos, pad, bos, template, config,
    # processor)
    "molmo2": TinyFamily(
        _MOLMO2_TOKENS, "<|im_end|>", "<|pad|>", "<|endoftext|>", MOLMO2_TEMPLATE, _molmo2_config, _molmo2_processor
    ),
    # llava is not a registered VLFamily: it proves the generic path (see honing.models.vl_families).
    "llava": TinyFamily(_LLAVA_TOKENS, "</s>", "<pad>", "<s>", LLAVA_TEMPLATE, _llava_config, _llava_processor),
    # Nor is idefics3: its images are padded per row ("rows" layout) with a pixel_attention_mask.
    "idefics3": TinyFamily(
        _IDEFICS3_TOKENS,
        "<end_of_utterance>",
        "<|endoftext|>",
        None,
        IDEFICS3_TEMPLATE,
        _idefics3_config,
        _idefics3_processor,
    ),
}


def tiny_family(model_type: str) -> TinyFamily:
    """The tiny-model recipe of ``model_type``, or a ConfigError naming the ones there are."""
    try:
        return TINY_FAMILIES[model_type]
    except KeyError:
        raise ConfigError(
            f"model.config.model_type: no tiny vision-language model for {model_type!r}; "
            f"expected one of {', '.join(TINY_FAMILIES)}"
        ) from None


def tiny_token_id(model_type: str, token: str) -> int:
    """The id of a special token in the tiny tokenizer of ``model_type`` (special tokens come first)."""
    return tiny_family(model_type).special_tokens.index(token)


def tiny_vocab_size(model_type: str) -> int:
    """The size of the tiny tokenizer of ``model_type``: its special tokens plus the 256 bytes."""
    return len(tiny_family(model_type).special_tokens) + 256


def tiny_vl_config(model_type: str, vocab_size: int | None = None, **overrides: object) -> PretrainedConfig:
    """A tiny random-init transformers config of ``model_type`` (hidden 64, 2 layers, a 2-block vision tower with
    14-pixel patches) whose special-token ids are the tiny tokenizer's. ``overrides`` update the top level; a dict
    given for a sub-config (``text_config={"num_hidden_layers": 4}``) updates that sub-config's keys."""
    from transformers import AutoConfig

    family = tiny_family(model_type)
    vocab_size = tiny_vocab_size(model_type) if vocab_size is None else vocab_size
    if vocab_size < len(family.special_tokens):
        raise ConfigError(
            f"model.config.vocab_size: {vocab_size} cannot hold the {len(family.special_tokens)} special tokens of "
            f"{model_type}; use the tokenizer's length ({tiny_vocab_size(model_type)} for the tiny byte tokenizer)"
        )
    values = family.config(vocab_size, lambda token: family.special_tokens.index(token))
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(values.get(key), Mapping):
            values[key] = {**values[key], **value}
        else:
            values[key] = value
    return AutoConfig.for_model(model_type, **values)


def tiny_tokenizer(model_type: str) -> PreTrainedTokenizerFast:
    """A byte-level fast tokenizer: ids 0..n-1 are the family's special tokens, then one id per byte."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    # The byte map of the tokenizers honing trains, so byte ids read the same everywhere.
    from honing.data.tokenizer import _bytes_to_unicode

    family = tiny_family(model_type)
    specials = family.special_tokens
    vocab = {token: index for index, token in enumerate(specials)}
    vocab |= {char: len(specials) + byte for byte, char in _bytes_to_unicode().items()}
    # BPE with no merges is a plain byte lookup; ByteLevel maps raw bytes to GPT-2's printable stand-ins.
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(list(specials))
    # clean_up_tokenization_spaces would rewrite " ." to "." on decode and break the round trip.
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=family.eos_token,
        pad_token=family.pad_token,
        bos_token=family.bos_token,
        clean_up_tokenization_spaces=False,
    )


def build_tiny_processor(model_type: str, out_dir: str | None, *, cache_dir: str | None = None) -> str:
    """Save a tiny processor of ``model_type`` (byte tokenizer + chat template + stock image processor) to
    ``out_dir`` and return ``out_dir``; reload it with ``AutoProcessor.from_pretrained(out_dir)``.

    The folder is built once per content (family, template, library versions) under the honing cache and copied;
    with ``out_dir=None`` the cache's own folder is returned, not copied: it is published whole by a rename, so
    several processes (the ranks of one run) may read it while another is building it.
    """
    import tokenizers
    import transformers

    family = tiny_family(model_type)
    try:
        import torchvision  # noqa: F401 - transformers 5's image processors need it
    except ImportError:
        raise ConfigError(
            f"model.config.model_type: {model_type} needs torchvision for its image processor; "
            "install the vision extra: pip install 'honing[vision]'"
        ) from None
    key = content_hash(
        [
            "tiny_vl_processor",
            FORMAT_VERSION,
            model_type,
            transformers.__version__,
            tokenizers.__version__,
            json.dumps(family.special_tokens),
            family.chat_template,
            repr((QWEN_MIN_PIXELS, QWEN_MAX_PIXELS, MOLMO2_CROP, LLAVA_IMAGE, IDEFICS3_IMAGE)),
        ]
    )
    entry = os.path.join(cache_dir or default_cache_dir(), "tiny_vl", f"{model_type}-{key[:16]}")
    if not os.path.isdir(entry):
        os.makedirs(os.path.dirname(entry), exist_ok=True)
        # Build beside the entry and rename: concurrent builders (test workers, ranks) never see a partial folder.
        staging = tempfile.mkdtemp(dir=os.path.dirname(entry), prefix=".tmp-")
        try:
            family.processor(tiny_tokenizer(model_type), family.chat_template).save_pretrained(staging)
            try:
                os.rename(staging, entry)
            except OSError:  # another builder won the race; its folder is the same
                shutil.rmtree(staging, ignore_errors=True)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    if out_dir is None:
        return entry
    shutil.copytree(entry, out_dir, dirs_exist_ok=True)
    return out_dir
