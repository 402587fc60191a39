"""PPO's value and reward models read a rollout as TRL's PPOTrainer does: the scores equal the installed TRL's
``get_reward`` at the completion's last token, the values its logits at ``context_length - 1 : -1`` (to 1e-6)."""

from __future__ import annotations

from contextlib import nullcontext

import torch
from transformers import LlamaConfig, LlamaForSequenceClassification
from trl.experimental.utils import get_reward

from honing.methods.ppo_value import sequence_scores, token_values

PAD = 0


def rollout():
    """Three prompts of 4 tokens, completions of 5, 2 and 3 tokens right-padded to 5, as honing's rollout holds
    them (ids, attention mask, completion ids and mask)."""
    generator = torch.Generator().manual_seed(0)
    prompts = torch.randint(1, 50, (3, 4), generator=generator)
    completions = torch.randint(1, 50, (3, 5), generator=generator)
    completion_mask = torch.arange(5)[None] < torch.tensor([5, 2, 3])[:, None]
    completions = completions.masked_fill(~completion_mask, PAD)
    input_ids = torch.cat([prompts, completions], 1)
    attention_mask = torch.cat([torch.ones_like(prompts), completion_mask.long()], 1)
    return dict(
        input_ids=input_ids,
        attention_mask=attention_mask,
        completion_ids=completions,
        completion_mask=completion_mask.long(),
    )


def test_scores_and_values_equal_trls_get_reward():
    torch.manual_seed(0)
    model = LlamaForSequenceClassification(
        LlamaConfig(
            vocab_size=64,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=2,
            intermediate_size=64,
            num_labels=1,
            pad_token_id=PAD,
        )  # fmt: skip
    ).eval()
    micro = rollout()
    context_length = 4
    with torch.no_grad():
        logits, scores, _ = get_reward(model, micro["input_ids"], PAD, context_length)
        ours = sequence_scores(model, micro, nullcontext)
        values = token_values(model, micro, nullcontext)
    torch.testing.assert_close(ours, scores.reshape(-1), atol=1e-6, rtol=0)
    # TRL's value: full_value[:, context_length - 1 : -1], at the completion's positions (padding aside: TRL's
    # forward masks the pad tokens it sees in the completion, honing's the same through the attention mask)
    expected = logits[:, context_length - 1 : -1, 0]
    mask = micro["completion_mask"].bool()
    torch.testing.assert_close(values[mask], expected[mask], atol=1e-6, rtol=0)
