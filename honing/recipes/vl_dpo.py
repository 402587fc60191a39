"""DPO on vision-language models (``method: vl_dpo``): preference pairs whose prompts hold images, the policy and the
reference each scoring both replies with the prompt's pixel inputs.

A method of its own, as ``vl_sft`` and ``vl_grpo`` are, rather than ``method: dpo`` picking image rows: the model
is another kind (an image-text-to-text model with its processor, LoRA on the language model by default, the vision
tower frozen by ``model.freeze_vision``), and the image keys (``data.min_pixels`` / ``max_pixels``,
``model.freeze_vision`` / ``freeze_projector``, ``optim.vision_lr``) are refused for text DPO by the method table.
The ``dpo`` section holds its settings, as for ``method: dpo``.

Parts: VL-SFT's model part, the image pair row kind (``honing.data.preference.vision_pairs.VisionPreferenceRows``),
DPO's train module and reference as they are. Pairs are padded, never packed: a packed row's positions would have to be
the family's own (Qwen-VL's M-RoPE) per sequence; each sequence is a row of its own, as in TRL's vision DPO.
"""

from __future__ import annotations

from functools import partial

import torch

from honing.config import RunConfig
from honing.config.schema import DPOSection
from honing.data.finetune_data import RunData
from honing.data.preference.vision_pairs import VisionPreferenceRows
from honing.distributed import print0
from honing.errors import ConfigError
from honing.models.vl_families import concat_image_inputs
from honing.recipes.base import finetune_data
from honing.recipes.dpo import DPORecipe
from honing.recipes.vl_sft import VISION, VLSFTRecipe, vision_rows
from honing.run.parts import HeldOutAnswers, ModelAssets
from honing.run.vl_outputs import VLOutputs


class VLDPORecipe(DPORecipe):
    """The model's processor and an image-text-to-text model (LoRA or full); image pairs; DPO with pixel inputs."""

    outputs_class = VLOutputs
    step_transforms = (VISION,)
    # VL-SFT's processor and model builders as they are (shared steps, not a second base class: they call no super())
    model_assets = VLSFTRecipe.model_assets
    build_model = VLSFTRecipe.build_model

    def __init__(self, config: RunConfig):
        super().__init__(config)
        self.packed_pairs = padded_pairs(self.dpo)

    def row_kind(self, assets: ModelAssets) -> VisionPreferenceRows:
        """Image pairs through the processor, batched with each prompt's pixel inputs."""
        join_images = partial(concat_image_inputs, self.family)
        return vision_rows(
            VisionPreferenceRows, assets, self.config, self.family, self.cache_dir, join_images=join_images
        )

    def build_data(self, assets: ModelAssets, model: torch.nn.Module | None = None) -> RunData:
        """Image pair batches (the reference scores them every step: ``copy`` or ``adapters_off``)."""
        if self.dpo.reference in ("precompute", "lazy"):
            raise ConfigError(
                f"dpo.reference: {self.dpo.reference!r} is not available for image pairs (its cache is keyed by token "
                "ids, not pixels); use copy or adapters_off"
            )
        return finetune_data(self.row_kind(assets), self.config, self.parallel_dims, self.cache_dir)

    def held_out_answers(self, assets: ModelAssets) -> HeldOutAnswers:
        """The validation pairs' prompts (image conversations) with their chosen reply's text."""
        from honing.data.text.corpus import split_documents

        data, kind = self.config.data, self.row_kind(assets)
        if data.validation is not None:
            found = [item for items in kind.read(kind.source_fields(data.validation.sources))[0] for item in items]
        elif data.validation_split > 0:
            found = [item for items in kind.read(kind.source_fields(data.train.sources))[0] for item in items]
            found = split_documents(found, data.validation_split, seed=self.config.trainer.seed)[1]
        else:
            found = []
        return [(pair.prompt, pair.chosen[0]["content"]) for pair, _ in found if len(pair.chosen) == 1]


def padded_pairs(section: DPOSection) -> bool:
    """False: image pairs are padded rows; ``dpo.packed_pairs: true`` set in the config is refused in one line,
    its default is turned off with one info line."""
    if not section.packed_pairs:
        return False
    if "packed_pairs" in section.model_fields_set:
        raise ConfigError(
            "dpo.packed_pairs: true is not available for image pairs: each sequence is a padded row of its own, "
            "whose positions the model computes from its image grids (Qwen-VL's M-RoPE); remove the key or set false"
        )
    print0("vl_dpo: image pairs are padded rows, chosen and rejected sequences each a row (dpo.packed_pairs is off)")
    return False
