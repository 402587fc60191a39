"""A trained reward model as a GRPO reward: ``grpo.rewards: [{name: "reward_model:PATH"}]``.

PATH is a sequence-classification model with one label (``method: reward``'s ``SAVE_FOLDER/hf``, or any Hugging Face
reward model folder or hub name) and its tokenizer. It is loaded once per path and process, on this rank's device,
and scores each completion as the reward model was trained: the prompt and the completion rendered whole by its
tokenizer's chat template (a plain-text prompt: the two strings joined), the score head read at the last non-pad
token, ``batch_size`` sequences per forward.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from honing.errors import ConfigError

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from honing.rl.builtin_rewards import ChatOrText

PREFIX = "reward_model:"
#: sequences scored per forward
BATCH_SIZE = 32


class RewardModelScorer:
    """A reward function ``f(prompts, completions, **columns) -> list[float]`` over a loaded reward model."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, *, batch_size: int = BATCH_SIZE):
        self.model, self.tokenizer = model.eval(), tokenizer
        self.pad_token_id = model.config.pad_token_id
        # without a pad token id transformers' classifier scores the last position: one sequence per forward
        self.batch_size = batch_size if self.pad_token_id is not None else 1
        self.__name__ = "reward_model"

    def text(self, prompt: ChatOrText, completion: ChatOrText) -> str:
        """The sequence the reward model scores: a conversation rendered by its chat template, or the joined text."""
        if isinstance(prompt, str) and isinstance(completion, str):
            return prompt + completion
        if isinstance(prompt, str):
            prompt = [{"role": "user", "content": prompt}]
        if isinstance(completion, str):
            completion = [{"role": "assistant", "content": completion}]
        messages = list(prompt) + list(completion)
        return self.tokenizer.apply_chat_template(messages, tokenize=False)

    @torch.no_grad()
    def __call__(
        self, prompts: Sequence[ChatOrText], completions: Sequence[ChatOrText], **columns: object
    ) -> list[float]:
        """Each completion's reward, ``batch_size`` right-padded sequences per forward."""
        ids = [
            self.tokenizer(self.text(p, c), add_special_tokens=False)["input_ids"] for p, c in zip(prompts, completions)
        ]
        device = next(self.model.parameters()).device
        scores: list[float] = []
        for start in range(0, len(ids), self.batch_size):
            chunk = ids[start : start + self.batch_size]
            width = max(len(row) for row in chunk)
            input_ids = torch.full((len(chunk), width), self.pad_token_id or 0, dtype=torch.long)
            attention_mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for row, tokens in enumerate(chunk):
                input_ids[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
                attention_mask[row, : len(tokens)] = 1
            logits = self.model(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device)).logits
            scores.extend(logits[:, 0].float().cpu().tolist())
        return scores


@functools.cache
def load_reward_model(path: str) -> RewardModelScorer:
    """The reward model at ``path`` with its tokenizer, on this rank's device, loaded once per process (an OSError
    when transformers cannot load it)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from honing.distributed import default_device

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path, dtype="auto")
    return RewardModelScorer(model.to(default_device()).requires_grad_(False), tokenizer)


def reward_model_reward(name: str, key: str) -> RewardModelScorer:
    """The reward a ``reward_model:PATH`` name stands for; a one-line ConfigError naming ``key`` when PATH holds no
    one-label sequence classifier."""
    from honing.hub import check_name_or_path, hub_load_error

    path = name.removeprefix(PREFIX)
    if not path:
        raise ConfigError(f"{key}: {name!r} names no reward model; write reward_model:PATH (e.g. runs/reward/hf)")
    check_name_or_path(path, key)
    try:
        scorer = load_reward_model(path)
    except OSError as error:
        raise hub_load_error(key, path, error) from None
    labels = scorer.model.config.num_labels
    if labels != 1:
        raise ConfigError(f"{key}: {path} is a classifier with {labels} labels; a reward model has 1 (method: reward)")
    return scorer
