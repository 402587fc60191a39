"""The rows of an on-policy distillation step: the prompts of a batch of chat rows (every token before the last
assistant turn), and rows rebuilt from those prompts and sampled completions, laid out as the dataset's rows are
(right-padded, labels on the completion only)."""

from __future__ import annotations

import torch

from honing.losses import IGNORE_INDEX


def completion_starts(labels: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Each row's first position of its last run of trained labels (the last assistant turn, TRL's ``messages[:-1]``
    prompt); a row without one keeps every real token as its prompt."""
    trained = labels != IGNORE_INDEX
    before = torch.zeros_like(trained)
    before[:, 1:] = trained[:, :-1]
    run_starts = trained & ~before
    positions = torch.arange(labels.shape[1], device=labels.device).expand_as(labels)
    last = torch.where(run_starts, positions, torch.full_like(positions, -1)).amax(dim=1)
    return torch.where(last >= 0, last, attention_mask.sum(1))


def left_padded_prompts(batch: dict[str, torch.Tensor], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(prompt_ids, prompt_mask)``: each right-padded row's prompt, left-padded to the longest (what the sampler
    takes)."""
    starts = completion_starts(batch["labels"], batch["attention_mask"])
    width = max(int(starts.max()), 1)
    rows = batch["input_ids"].shape[0]
    prompt_ids = torch.full((rows, width), pad_token_id, dtype=torch.long, device=batch["input_ids"].device)
    prompt_mask = torch.zeros_like(prompt_ids)
    for row, start in enumerate(starts.tolist()):
        if start:
            prompt_ids[row, width - start :] = batch["input_ids"][row, :start]
            prompt_mask[row, width - start :] = 1
    return prompt_ids, prompt_mask


def rows_with_completions(
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    pad_token_id: int,
) -> dict[str, torch.Tensor]:
    """Right-padded rows of each prompt's real tokens then its completion, labels on the completion's tokens only;
    the keys of the padded collator (``input_ids``, ``labels``, ``attention_mask``, ``num_real_tokens``)."""
    rows = []
    for ids, mask, completion, alive in zip(prompt_ids, prompt_mask, completion_ids, completion_mask):
        prompt, generated = ids[mask.bool()], completion[alive.bool()]
        labels = torch.cat([torch.full_like(prompt, IGNORE_INDEX), generated])
        rows.append((torch.cat([prompt, generated]), labels))
    lengths = torch.tensor([len(ids) for ids, _ in rows], device=prompt_ids.device)
    width = int(lengths.max())
    input_ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long, device=prompt_ids.device)
    labels = torch.full_like(input_ids, IGNORE_INDEX)
    for row, (ids, row_labels) in enumerate(rows):
        input_ids[row, : len(ids)] = ids
        labels[row, : len(ids)] = row_labels
    attention_mask = (torch.arange(width, device=prompt_ids.device) < lengths[:, None]).long()
    return {"input_ids": input_ids, "labels": labels, "attention_mask": attention_mask, "num_real_tokens": lengths}
