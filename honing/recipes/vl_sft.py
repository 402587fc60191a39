"""Vision-language SFT: image conversations through the model's own processor, loss on the reply text only.

By default LoRA trains the language model (olmOCR's target modules) and the vision tower stays frozen;
``model.lora: null`` fine-tunes every weight, ``model.freeze_vision`` / ``model.freeze_projector`` and
``optim.vision_lr`` steer the rest. Per-family knowledge (which keys the model takes, where its vision
tower is) lives in ``honing.models.vl_families``.

Parts: the model's processor, the vision row kind (``honing.data.vision.vision_rows.VisionRows``), an
image-text-to-text model from the model builder, the next-token train module, answers to image prompts
(``honing.run.vl_outputs.VLOutputs``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from honing.config.schema import LoraSection
from honing.data.chat.conversation import resolve_chat_template
from honing.data.chat.templates import NAMED_TEMPLATES
from honing.data.finetune_data import RunData
from honing.data.formats import Conversation
from honing.data.special_tokens import apply_token_settings
from honing.data.vision.batches import VLCollator
from honing.data.vision.vision_rows import VisionRows
from honing.distributed import is_rank0, print0
from honing.errors import ConfigError
from honing.hub import hub_load_error
from honing.models.parallel import fsdp_shards
from honing.models.param_names import matches, named_parameters
from honing.models.quantize import check_has_lora
from honing.models.vl_families import (
    VLFamily,
    family_for,
    lora_targets,
    part_patterns,
    position_ids_for_packing,
    set_pixel_limits,
)
from honing.recipes.base import Recipe, Rows, finetune_data
from honing.recipes.sft import validation_examples
from honing.run.parts import HeldOutAnswers, ModelAssets
from honing.run.vl_outputs import VLOutputs

if TYPE_CHECKING:
    from honing.config import RunConfig
    from honing.config.model_schema import ModelSection

log = logging.getLogger(__name__)

VISION_EXTRA = "pip install 'honing[vision]'"


class VisionSteps:
    """Vision as a transform of any method's steps (``Recipe.step_transforms``): the tower, projector or language
    model frozen as ``model.freeze_*`` say, and the tower's own learning rate (``optim.vision_lr``)."""

    def freeze(self, recipe: Recipe, model: torch.nn.Module) -> None:
        """The vision tower (``model.freeze_vision``, on by default), the projector (``model.freeze_projector``) and
        the language model (``model.freeze_language``) of the recipe's model family."""
        freeze_vision_parts(recipe.config.model, recipe.family, model)  # type: ignore[attr-defined]

    def param_groups(self, recipe: Recipe) -> list[dict[str, Any]]:
        """``optim.vision_lr``: the vision tower in a group of its own (refused while the tower is frozen)."""
        return vision_lr_groups(recipe.config, recipe.family)  # type: ignore[attr-defined]


#: the vision-language recipes' step transform
VISION = VisionSteps()


class VLSFTRecipe(Recipe):
    """Image conversations → the processor's ids and pixels, assistant-only labels → padded rows → LoRA or full."""

    outputs_class = VLOutputs
    step_transforms = (VISION,)
    family: VLFamily

    def model_assets(self) -> ModelAssets:
        """The model's own ``AutoProcessor`` (image processor, tokenizer, chat template); for a model built from
        ``model.config``, a tiny processor of its family assembled here (``honing.models.tiny_vl``). The image
        size bounds of ``data.min_pixels`` / ``data.max_pixels`` are set on it, so they are saved with it. The
        family is kept on the recipe: the vision steps (freezing, parameter groups) read it."""
        processor, self.family, chat_template = vl_processor(self.config, self.cache_dir)
        return ModelAssets(processor, processor.tokenizer, chat_template)

    def complete_model_assets(self) -> None:
        """After a ``build_model_assets`` of a subclass that only loaded ``self.processor`` (VeOmni's): the
        tokenizer, family and chat template this recipe reads, as its own step sets them."""
        self.tokenizer = self.processor.tokenizer
        self.family, self.chat_template = processor_settings(self.config, self.processor)

    def build_model(self, assets: ModelAssets) -> torch.nn.Module:
        """``AutoModelForImageTextToText`` from ``model.name_or_path`` or ``model.config``; LoRA on the language
        model by default (``model.lora: null`` trains every weight)."""
        from transformers import AutoModelForImageTextToText

        cfg = self.config.model
        lora = lora_section(cfg)
        shards = fsdp_shards(self.config.parallel.strategy, self.parallel_dims)
        check_has_lora(cfg.quantize, lora)  # before a long load that would be refused
        if cfg.name_or_path:
            model = self.models.load_pretrained(shards=shards, auto_class=AutoModelForImageTextToText)
        else:
            from honing.models.tiny_vl import tiny_vl_config

            options = dict(cfg.config or {})
            model_type = options.pop("model_type")
            model_config = tiny_vl_config(model_type, vocab_size=len(assets.tokenizer), **options)
            model = AutoModelForImageTextToText.from_config(
                model_config, dtype=self.models.dtype(), attn_implementation=self.models.attention_to_build()
            )
        self.family = family_for(model.config.model_type, model=model, processor=assets.processor)
        if lora is not None and "target_modules" not in lora.model_fields_set:
            # the language model's linears, never the vision tower's; the config saved with the run (read back by
            # best-model export and `honing merge`) says what was applied
            lora = lora.model_copy(update={"target_modules": lora_targets(self.family)})
            model_section = self.config.model.model_copy(update={"lora": lora})
            self.saved_config = self.config.model_copy(update={"model": model_section})
        return self.models.finish(model, assets.tokenizer, lora=lora, shards=shards)

    def build_data(self, assets: ModelAssets, model: torch.nn.Module | None = None) -> RunData:
        """The image conversations' rows, packed ones with ``model``'s per-document rope positions; padded Qwen-VL
        batches for a model that attends with sdpa carry its 4-D causal mask (``VLCollator.sdpa_masks``)."""
        data = finetune_data(self.row_kind(assets, model), self.config, self.parallel_dims, self.cache_dir)
        if isinstance(data.collator, VLCollator) and model is not None and not self.parallel_dims.cp_enabled:
            data.collator.sdpa_masks = attention_of(model) == "sdpa"  # parallel.cp builds its masks per slice
        return data

    def row_kind(self, assets: ModelAssets, model: torch.nn.Module | None = None) -> VisionRows:
        """Image conversations through the processor; packed rows take ``model``'s per-document rope positions
        (none where only the data is built: ``honing data``, ``honing prepare``)."""
        return vision_rows(
            VisionRows,
            assets,
            self.config,
            self.family,
            self.cache_dir,
            rope_positions=lambda ids, types, grid: position_ids_for_packing(model, ids, types, grid),  # type: ignore[arg-type]
        )

    def held_out_answers(self, assets: ModelAssets) -> HeldOutAnswers:
        """Validation conversations as ((messages before the last assistant turn, their image items), answer)."""
        out = []
        for example in validation_examples(self.row_kind(assets), self.config):
            if not isinstance(example, Conversation) or example.messages[-1].role != "assistant":
                continue
            prompt = Conversation(messages=example.messages[:-1], metadata=example.metadata)
            out.append((prompt, example.messages[-1].text()))
        return out


def vision_rows(
    kind: Callable[..., Rows], assets: ModelAssets, config: RunConfig, family: VLFamily, cache_dir: str, **options: Any
) -> Rows:
    """A vision-language method's row kind ``kind`` over the run's processor and chat template, its ``data`` section,
    the model family and the cache folder (``options``: what the kind takes besides)."""
    return kind(
        assets.processor,
        assets.chat_template,
        config.data,
        family=family,
        cache_dir=cache_dir,
        printer=print0,
        **options,
    )


def freeze_vision_parts(cfg: ModelSection, family: VLFamily, model: torch.nn.Module) -> None:
    """Freeze the vision tower (``model.freeze_vision``), the projector (``model.freeze_projector``) and the language
    model with its head (``model.freeze_language``) of ``model`` (``cfg``: the ``model`` section); shared by the
    vision-language recipes."""
    patterns = []
    if cfg.freeze_vision:
        patterns += part_patterns(family, "vision")
    elif cfg.config is not None and is_rank0():
        log.warning(
            "model.freeze_vision: false on a model built from model.config: its vision tower is random, and a "
            "random tower trained from scratch tends to collapse into one constant vector for every image "
            "(measured here: image embeddings' spread 0.03 after 60 steps at lr 1e-3, loss stuck at chance); "
            "a frozen random tower or a pretrained one (model.name_or_path) learns"
        )
    if cfg.freeze_projector:
        patterns += part_patterns(family, "projector")
    if cfg.freeze_language:
        if lora_section(cfg) is not None:  # its adapters sit on the language model: nothing of it would train
            raise ConfigError(
                "model.freeze_language: true freezes the language model that LoRA adapts; set model.lora: null "
                "(full fine-tuning of the unfrozen parts) or model.freeze_language: false"
            )
        patterns += part_patterns(family, "language")
    for name, param in named_parameters(model):
        if matches(name, patterns):
            param.requires_grad_(False)


def vision_lr_groups(config: RunConfig, family: VLFamily) -> list[dict[str, Any]]:
    """The vision tower's own parameter group at ``optim.vision_lr`` (none when unset; refused while the tower is
    frozen); shared by the vision-language recipes."""
    vision_lr = config.optim.vision_lr
    if vision_lr is None:
        return []
    if config.model.freeze_vision:
        raise ConfigError(
            "optim.vision_lr: the vision tower is frozen (model.freeze_vision: true); set "
            "model.freeze_vision: false to train it at its own learning rate"
        )
    return [{"params": part_patterns(family, "vision"), "lr": vision_lr}]


def lora_section(model: ModelSection) -> LoraSection | None:
    """``model.lora`` as set; LoRA with its defaults when the key is absent (``model.lora: null``: none)."""
    if "lora" in model.model_fields_set:
        return model.lora
    return LoraSection()


def vl_processor(config: RunConfig, cache_dir: str) -> tuple[Any, VLFamily, str]:
    """The model's processor with the run's pixel bounds and chat template set on it, its family, and the
    template's text (see ``VLSFTRecipe.build_model_assets``)."""
    require_vision_extra()
    from transformers import AutoProcessor

    name = config.tokenizer.path or config.model.name_or_path
    if config.tokenizer.kind == "pretrained" and name is None:
        raise ConfigError("tokenizer.kind: 'pretrained' needs tokenizer.path or model.name_or_path (a processor)")
    if config.data.chat_template in NAMED_TEMPLATES:
        raise ConfigError(
            f"data.chat_template: {config.data.chat_template!r} is a text-only template and cannot place images; "
            "leave it unset (the processor's own template) or give an inline Jinja template"
        )
    model_type = vl_model_type(config.model)
    if name is None:
        from honing.models.tiny_vl import build_tiny_processor

        # the cache's own folder, published by a rename: every rank may read it while one builds it
        name = build_tiny_processor(model_type, None, cache_dir=cache_dir)
    try:
        processor = AutoProcessor.from_pretrained(name, trust_remote_code=config.tokenizer.trust_remote_code)
    except (OSError, ValueError) as error:
        reason = " ".join(str(error).split())
        raise ConfigError(f"cannot load the processor of {name!r}: {reason}") from None
    if getattr(processor, "tokenizer", None) is None or getattr(processor, "image_processor", None) is None:
        raise ConfigError(f"{name!r} has no image processor and tokenizer: vl_sft needs a multimodal processor")
    apply_token_settings(processor.tokenizer, config.tokenizer)  # tokenizer.special_tokens / added_tokens
    family, chat_template = processor_settings(config, processor, model_type)
    return processor, family, chat_template


def processor_settings(config: RunConfig, processor: Any, model_type: str | None = None) -> tuple[VLFamily, str]:
    """The processor's family, with the run's pixel bounds and chat template set on it (also for a processor a
    recipe step loaded itself, VeOmni's ``build_processor``)."""
    family = family_for(model_type or vl_model_type(config.model), processor=processor)
    set_pixel_limits(processor, family, config.data.min_pixels, config.data.max_pixels)
    chat_template = resolve_chat_template(processor, config.data.chat_template)
    processor.chat_template = chat_template  # saved with the processor in checkpoints and exports
    return family, chat_template


def attention_of(model: torch.nn.Module) -> str | None:
    """The attention kernel ``model``'s language model runs (``sdpa``, ``eager``, ``flash_attention_2`` ...)."""
    config = getattr(model, "config", None)
    config = getattr(config, "text_config", None) or config
    return getattr(config, "_attn_implementation", None)


def vl_model_type(model: ModelSection) -> str:
    """``model.config.model_type``, or the pretrained model's."""
    if model.name_or_path is None:
        model_type = (model.config or {}).get("model_type")
        if not model_type:
            raise ConfigError(
                "model.config.model_type: vl_sft builds a random model from its family's tiny config; set it "
                "(e.g. qwen2_vl) or set model.name_or_path"
            )
        return model_type
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(model.name_or_path, trust_remote_code=model.trust_remote_code).model_type
    except (OSError, ValueError) as error:  # not reachable, no such repository, not a model folder: say which
        raise hub_load_error("model.name_or_path", model.name_or_path, error) from None


def require_vision_extra() -> None:
    """One line naming the extra to install when torchvision (the image processors' backend) is missing."""
    try:
        import torchvision  # noqa: F401
    except (ImportError, RuntimeError) as error:
        raise ConfigError(
            f"method vl_sft needs torchvision for the model's image processor ({error}); {VISION_EXTRA}"
        ) from None
