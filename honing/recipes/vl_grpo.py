"""GRPO on vision-language models (``method: vl_grpo``): prompts with images, completions sampled with their pixel
inputs and scored by text rewards, GRPO's update with every scoring forward given the same pixel inputs.

Parts: VL-SFT's model part (the model's own processor, an image-text-to-text model, LoRA on the language model by
default, the vision tower frozen by ``model.freeze_vision``, ``optim.vision_lr``), the image prompt row kind
(``honing.data.prompts.vision_prompts.VisionPromptRows``), GRPO's train module with pixel inputs
(``honing.methods.grpo_vision``). The ``grpo`` section holds its settings, as for ``method: grpo``.
"""

from __future__ import annotations

from typing import Any

from honing.config import RunConfig
from honing.data.prompts.vision_prompts import VisionPromptRows, read_vision_prompt_sources
from honing.data.vision.processing import image_token_ids
from honing.errors import ConfigError, DataError
from honing.methods.base import BaseTrainModule
from honing.recipes.base import Recipe
from honing.recipes.grpo import GRPORecipe
from honing.recipes.vl_sft import VISION, VLSFTRecipe, vision_rows
from honing.run.parts import HeldOutAnswers, ModelAssets
from honing.run.vl_outputs import VLOutputs


def video_token_ids(processor: Any) -> set[int]:
    """The processor's video placeholder ids (Qwen-VL's ``<|video_pad|>``): never sampled either."""
    tokenizer = processor.tokenizer
    token = getattr(processor, "video_token", None) or getattr(tokenizer, "video_token", None)
    token_id = tokenizer.convert_tokens_to_ids(token) if isinstance(token, str) else None
    return {token_id} if isinstance(token_id, int) and token_id != tokenizer.unk_token_id else set()


class VLGRPORecipe(GRPORecipe):
    """The model's processor and an image-text-to-text model (LoRA or full); image prompts; GRPO with pixels."""

    outputs_class = VLOutputs
    step_transforms = (VISION,)
    # VL-SFT's model builder as it is (a shared step, not a second base class: it calls no super())
    build_model = VLSFTRecipe.build_model

    def __init__(self, config: RunConfig):
        Recipe.__init__(self, config)  # GRPO's own looks for a section named after the method; ours is grpo
        if config.grpo is None:
            raise ConfigError("grpo: method 'vl_grpo' needs a grpo section, at least grpo.rewards: [{name: ...}]")
        self.grpo = config.grpo

    # the model's own processor (or a tiny one of its family for ``model.config``), as VL-SFT's
    model_assets = VLSFTRecipe.model_assets

    def row_kind(self, assets: ModelAssets) -> VisionPromptRows:
        """Image prompts through the processor, rendered with its chat template's generation prompt."""
        return vision_rows(
            VisionPromptRows,
            assets,
            self.config,
            self.family,
            self.cache_dir,
            max_completion_length=self.grpo.max_completion_length,
            num_generations=self.grpo.num_generations,
        )

    def estimator_parts(self, assets: ModelAssets) -> tuple[type[BaseTrainModule], dict[str, Any]]:
        """GRPO's train module with pixel inputs, and the model family that says how they join."""
        from honing.methods.grpo_vision import VisionGRPOTrainModule

        super().estimator_parts(assets)  # GRPO's warnings on its ratio level and loss type
        blocked = image_token_ids(assets.processor) | video_token_ids(assets.processor)
        return VisionGRPOTrainModule, {"family": self.family, "image_token_ids": sorted(blocked)}

    def held_out_answers(self, assets: ModelAssets) -> HeldOutAnswers:
        """The ``data.validation`` prompts as (their image conversation, their ``answer`` column), for the
        generation eval."""
        data = self.config.data
        if data.validation is None:
            return []
        found = [
            item
            for items in read_vision_prompt_sources(self.row_kind(assets).source_fields(data.validation.sources))
            for item in items
        ]
        answerable = [
            (prompt, columns["answer"]) for (prompt, columns), _ in found if isinstance(columns.get("answer"), str)
        ]
        if len(answerable) < len(found):
            raise DataError(
                f"data.validation: {len(found) - len(answerable)} of {len(found)} prompts cannot be checked by "
                "callbacks.generation_eval; expected an 'answer' column (or a last assistant turn) on each"
            )
        return answerable
