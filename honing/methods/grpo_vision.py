"""GRPO on vision-language models: the rollouts of image prompts carry each prompt's pixel inputs.

The prompts' pixel inputs (``honing.data.prompts.vision_prompts``: per prompt, the processor's tensors) go into the
sampling forward (``honing.models.vl_decoding``) and into every forward that scores the completions: the policy's,
the old policy's (``num_iterations`` > 1) and the reference's. A rollout row keeps only its index (``image_row``)
into the step's per-completion image inputs, so micro-batches, dynamic sampling's refills and the GRPO maths stay
the text method's; the inputs of a micro-batch's rows are joined as the processor joins them for a batch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import torch

from honing.data.prompts.vision_prompts import IMAGE_INPUTS
from honing.methods.grpo import ROLLOUT_KEYS, GRPOTrainModule
from honing.methods.grpo_rollouts import Batch, GroupSampler
from honing.methods.grpo_sampling import GeneratedGroups
from honing.models.vl_decoding import VisionDecoder
from honing.models.vl_families import VLFamily, concat_image_inputs

#: the generated groups' column holding each completion's image inputs (added after scoring: no reward reads it)
IMAGES_COLUMN = "__image_inputs__"


def joined_image_inputs(
    family: VLFamily, rows: Sequence[Mapping[str, torch.Tensor]], prompt_width: int, width: int
) -> dict[str, torch.Tensor]:
    """The image inputs of ``rows`` (one prompt each) for one forward over their left-padded prompts of
    ``prompt_width`` tokens followed by ``width - prompt_width`` completion tokens: image tensors joined as the
    processor joins a batch's, per-token ones (``mm_token_type_ids``) placed at each prompt's tokens, 0 elsewhere."""
    joined = concat_image_inputs(family, rows)
    for key in family.per_token_keys:
        if not any(key in row for row in rows):
            continue
        placed = torch.zeros((len(rows), width), dtype=torch.long)
        for index, row in enumerate(rows):
            if key in row:
                values = torch.as_tensor(row[key])
                placed[index, prompt_width - len(values) : prompt_width] = values
        joined[key] = placed
    return joined


class VisionGroupSampler(GroupSampler):
    """GRPO's sampler for prompts that hold images: sampling and every completion-scoring forward get the pixels."""

    def __init__(self, *args: Any, family: VLFamily, image_token_ids: Sequence[int] = (), **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.family = family
        self.image_token_ids = sorted(set(image_token_ids))  # never sampled (``honing.models.vl_decoding``)
        self.rollout_images: list[Mapping[str, torch.Tensor]] = []  # the step's, one per completion

    def sample(
        self, batch: Batch, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, seeds: list[int], **sampling: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The text method's sampling, its first forward given the prompts' pixel inputs."""
        repeats = len(prompt_ids) // len(batch[IMAGE_INPUTS])
        rows = [inputs for inputs in batch[IMAGE_INPUTS] for _ in range(repeats)]
        width = prompt_ids.shape[1]
        inputs = on_device(joined_image_inputs(self.family, rows, width, width), self.device)
        # every prompt, with images or not, samples with the image placeholders left out
        decoder = partial(VisionDecoder, image_inputs=inputs, blocked_token_ids=self.image_token_ids)
        return super().sample(batch, prompt_ids, prompt_mask, seeds, decoder=decoder, **sampling)

    def generate(self, batch: Batch, seeds: list[int]) -> GeneratedGroups:
        """The text method's groups, each completion's image inputs kept beside it (refills and drops keep them)."""
        groups = super().generate(batch, seeds)
        groups.columns[IMAGES_COLUMN] = [inputs for inputs in batch[IMAGE_INPUTS] for _ in range(self.num_generations)]
        return groups

    def rollout_tensors(self, groups: GeneratedGroups) -> dict[str, torch.Tensor]:
        """The text method's rollout tensors and each row's index into the step's image inputs."""
        self.rollout_images = groups.columns.pop(IMAGES_COLUMN)
        rollouts = super().rollout_tensors(groups)
        rollouts["image_row"] = torch.arange(len(self.rollout_images), device=rollouts["input_ids"].device)
        return rollouts

    def model_inputs(self, micro: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The pixel inputs of the micro-batch's completions, for the policy, old-policy and reference forwards."""
        rows = [self.rollout_images[int(i)] for i in micro["image_row"].tolist()]
        width = micro["input_ids"].shape[1]
        prompt_width = width - micro["completion_ids"].shape[1]
        return on_device(joined_image_inputs(self.family, rows, prompt_width, width), self.device)


class VisionGRPOTrainModule(GRPOTrainModule):
    """GRPO whose prompts hold images: its sampler is a ``VisionGroupSampler``."""

    rollout_keys = (*ROLLOUT_KEYS, "image_row")
    sampler_class = VisionGroupSampler

    def __init__(self, *args: Any, family: VLFamily, image_token_ids: Sequence[int] = (), **kwargs: Any):
        options = {"family": family, "image_token_ids": image_token_ids}
        super().__init__(*args, sampler_options=options, **kwargs)


def on_device(inputs: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """Every tensor of ``inputs`` on ``device``."""
    return {key: value.to(device) for key, value in inputs.items()}
