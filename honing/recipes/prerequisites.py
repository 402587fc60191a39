"""The local model folders a run starts from (its model, tokenizer, teacher, reward models), checked before any hub
call: a missing one is one line naming the example that writes it and the command (``honing.example_outputs``),
never huggingface_hub's "Repo id must be in the form" about a path."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from honing.hub import check_name_or_path
from honing.rl.reward_model import PREFIX as REWARD_MODEL_PREFIX

if TYPE_CHECKING:
    from honing.config import RunConfig


def model_inputs(config: RunConfig) -> Iterator[tuple[str, str]]:
    """``(key, path)`` of every model folder or hub name the run loads."""
    if config.model.name_or_path:
        yield "model.name_or_path", config.model.name_or_path
    if config.tokenizer.path:
        yield "tokenizer.path", config.tokenizer.path
    if config.distill is not None and config.distill.teacher_model_name_or_path:
        yield "distill.teacher_model_name_or_path", config.distill.teacher_model_name_or_path
    for section in ("grpo", "rloo", "online_dpo"):
        rewards = getattr(getattr(config, section), "rewards", None) or []
        for index, reward in enumerate(rewards):
            if reward.name.startswith(REWARD_MODEL_PREFIX) and reward.name != REWARD_MODEL_PREFIX:
                yield f"{section}.rewards[{index}].name", reward.name.removeprefix(REWARD_MODEL_PREFIX)


def check_model_inputs(config: RunConfig) -> None:
    """Raise a one-line ConfigError for the first model input that is neither an existing folder nor a hub name."""
    for key, path in model_inputs(config):
        check_name_or_path(path, key)
