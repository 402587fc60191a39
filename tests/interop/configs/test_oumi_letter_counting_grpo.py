"""Oumi's ``configs/examples/letter_counting/grpo/train.yaml`` (2 completions per device, groups of 4: TRL runs it
on 2+ GPUs, each process sampling half of a prompt's group) converts with nothing refused: its batch becomes
``grpo.completions_per_rank``, which the launch checks on the real world size."""

from __future__ import annotations

import pytest

from honing.config import validate
from honing.errors import ConfigError
from honing.interop.configs import translate
from honing.parallel_dims import ParallelDims
from honing.plan.rollout_batch import shared_groups

# the published file's keys and values (oumi-ai/oumi, configs/examples/letter_counting/grpo/train.yaml)
LETTER_COUNTING = {
    "model": {"model_name": "meta-llama/Llama-3.2-3B-Instruct", "model_max_length": 8192,
              "torch_dtype_str": "bfloat16", "attn_implementation": "sdpa"},
    "data": {"train": {"datasets": [{"dataset_name": "oumi-ai/oumi-letter-count", "split": "train"}]}},
    "training": {
        "trainer_type": "TRL_GRPO", "save_steps": 500, "max_steps": 500,
        "per_device_train_batch_size": 2, "gradient_accumulation_steps": 1,
        "reward_functions": ["count_letters"],
        "enable_gradient_checkpointing": False, "gradient_checkpointing_kwargs": {"use_reentrant": False},
        "ddp_find_unused_parameters": False, "optimizer": "adafactor", "compile": True,
        "grpo": {"num_generations": 4, "use_vllm": False},
        "dataloader_num_workers": "auto", "dataloader_prefetch_factor": 32,
        "logging_steps": 10, "output_dir": "output/letter_counting.grpo",
        "include_performance_metrics": False, "enable_wandb": True,
    },
}  # fmt: skip


def test_letter_counting_converts_and_its_groups_span_two_ranks():
    translation = translate(LETTER_COUNTING)
    assert translation.refused == []
    note = next(line for line in translation.notes if line.startswith("training.per_device_train_batch_size: "))
    assert "grpo.completions_per_rank 2" in note and "the launch checks" in note
    config = validate(translation.config, source="oumi")
    assert (config.grpo.completions_per_rank, config.grpo.num_generations) == (2, 4)
    assert shared_groups(config, config.grpo, ParallelDims(world_size=2)).prompts == 1  # one group over 2 ranks
    assert shared_groups(config, config.grpo, ParallelDims(world_size=8)).prompts == 4
    with pytest.raises(ConfigError) as refused:  # one process holds half a group
        shared_groups(config, config.grpo, ParallelDims(world_size=1))
    assert str(refused.value) == (
        "grpo.completions_per_rank (2) x 1 data-parallel ranks = 2 completions per step is not a multiple of "
        "grpo.num_generations (4); set grpo.completions_per_rank to a multiple of 4 or run on a world size that "
        "makes it one"
    )
