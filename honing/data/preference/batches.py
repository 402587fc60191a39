"""Preference pairs as tokens and batches: the prompt rendered with the generation prompt, each completion the rest;
a pair's prompt and both replies in one row of a padded batch that splits only between pairs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

import torch

from honing.data.chat.conversation import render_chat
from honing.data.collate import Collator
from honing.data.preference.pairs import PreferencePair
from honing.errors import DataError
from honing.losses import IGNORE_INDEX

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

REFERENCE_KEYS = ("ref_chosen_logps", "ref_rejected_logps")


@dataclass
class TokenizedPair:
    """A pair's token ids: the prompt's, and each completion's (what follows the prompt)."""

    prompt_ids: list[int]
    chosen_ids: list[int]
    rejected_ids: list[int]

    @property
    def length(self) -> int:
        """Tokens of the longer of the two sequences (prompt + completion): what ``data.seq_len`` bounds."""
        return len(self.prompt_ids) + max(len(self.chosen_ids), len(self.rejected_ids))

    @property
    def row_length(self) -> int:
        """Tokens of the pair's batch row: the prompt once, then both replies."""
        return len(self.prompt_ids) + len(self.chosen_ids) + len(self.rejected_ids)


def tokenize_pair(tokenizer: PreTrainedTokenizerBase, pair: PreferencePair, *, chat_template: str) -> TokenizedPair:
    """Token ids as TRL's DPOTrainer makes them: the prompt with the generation prompt, and prompt + completion
    rendered whole; the completion starts where the two token sequences part (a template may render the prompt's
    end differently once a reply follows, or tokens may merge across the boundary)."""

    def ids(messages: list[dict[str, str]], generation_prompt: bool) -> list[int]:
        text = render_chat(tokenizer, messages, chat_template=chat_template, add_generation_prompt=generation_prompt)
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    prompt = ids(pair.prompt, True)
    chosen, rejected = ids(pair.prompt + pair.chosen, False), ids(pair.prompt + pair.rejected, False)
    cut = min(_common_prefix(prompt, chosen), _common_prefix(prompt, rejected))
    if cut == 0:
        raise DataError("the prompt renders to no tokens shared with its completions; check the chat template")
    if cut == len(chosen) or cut == len(rejected):
        raise DataError("a completion renders to no tokens after its prompt; check the chat template")
    return TokenizedPair(prompt[:cut], chosen[cut:], rejected[cut:])


def fit_pair(
    pair: TokenizedPair,
    max_length: int,
    policy: Literal["truncate", "drop"],
    *,
    max_prompt: int | None = None,
    max_completion: int | None = None,
) -> TokenizedPair | None:
    """``pair`` with its prompt cut to its last ``max_prompt`` tokens and each reply to its first ``max_completion``
    (earlier TRL's DPO / KTO caps, applied whatever ``policy``); then, if both sequences fit ``max_length``, as it is;
    else None (``drop``) or, to ``truncate``, the prompt cut from the left first; only when a completion alone leaves
    less than half the length to the prompt are the completions cut from the right too, and never to nothing."""
    if max_prompt is not None and len(pair.prompt_ids) > max_prompt:
        pair = replace(pair, prompt_ids=pair.prompt_ids[len(pair.prompt_ids) - max_prompt :])
    if max_completion is not None and max(len(pair.chosen_ids), len(pair.rejected_ids)) > max_completion:
        pair = replace(
            pair, chosen_ids=pair.chosen_ids[:max_completion], rejected_ids=pair.rejected_ids[:max_completion]
        )
    if pair.length <= max_length:
        return pair
    if policy == "drop":
        return None
    longest = max(len(pair.chosen_ids), len(pair.rejected_ids))
    keep_prompt = max_length - longest
    if keep_prompt < max_length // 2:
        keep_prompt = min(len(pair.prompt_ids), max(max_length // 2, 1))
    keep_completion = max_length - keep_prompt
    return replace(  # a subclass keeps its other fields (a reward pair's margin)
        pair,
        prompt_ids=pair.prompt_ids[len(pair.prompt_ids) - keep_prompt :],
        chosen_ids=pair.chosen_ids[:keep_completion],
        rejected_ids=pair.rejected_ids[:keep_completion],
    )


class PairDataset(torch.utils.data.Dataset):
    """One tokenized pair per item (a pair is one row for the loader: ranks and batches hold whole pairs),
    with the reference's log-probs per pair once they are precomputed."""

    def __init__(self, pairs: Sequence[TokenizedPair]):
        self.pairs = list(pairs)
        self.reference: tuple[torch.Tensor, torch.Tensor] | None = None

    @property
    def lengths(self) -> list[int]:
        """Tokens of each pair's row (what ``group_by_length`` sorts by)."""
        return [pair.row_length for pair in self.pairs]

    def with_reference(self, chosen_logps: torch.Tensor, rejected_logps: torch.Tensor) -> PairDataset:
        """This dataset with the reference's log-probs of every pair's chosen and rejected completion."""
        if len(chosen_logps) != len(self) or len(rejected_logps) != len(self):
            raise DataError(f"expected {len(self)} reference log-probs per side, got {len(chosen_logps)}")
        self.reference = (chosen_logps.detach().cpu().double(), rejected_logps.detach().cpu().double())
        return self

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, index: int) -> dict[str, Any]:
        pair = self.pairs[index]
        item: dict[str, Any] = {"prompt_ids": pair.prompt_ids, "chosen_ids": pair.chosen_ids}
        item["rejected_ids"] = pair.rejected_ids
        if self.reference is not None:
            item["ref_chosen_logps"] = self.reference[0][index]
            item["ref_rejected_logps"] = self.reference[1][index]
        return item


class PairCollator(Collator):
    """Pairs → one right-padded row per pair holding ``prompt | chosen | rejected``: the prompt is computed once
    for both replies. The rejected reply's positions continue the prompt's and its tokens never see the chosen
    ones (a 4D attention mask built on the device from each row's three lengths), so each reply is scored exactly
    as in its own sequence. ``targets`` (rows, length, 2) holds the token each position's logits predict for the
    chosen and for the rejected reply. A micro-batch is a run of whole rows, so a pair never splits."""

    model_input_keys = ("input_ids",)

    def __init__(self, pad_token_id: int | None, *, additive_mask: bool = False):
        if pad_token_id is None or int(pad_token_id) < 0:
            raise DataError(f"pad_token_id is {pad_token_id!r}; preference batches need a pad token id >= 0")
        self.pad_token_id = int(pad_token_id)
        # eager attention adds its mask to the scores; sdpa (and the others that take a 4D mask) take booleans
        self.additive_mask = additive_mask

    def __call__(self, items: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        segments = torch.tensor(
            [[len(item["prompt_ids"]), len(item["chosen_ids"]), len(item["rejected_ids"])] for item in items]
        )
        lengths = segments.sum(1)
        width = int(lengths.max())
        input_ids = torch.full((len(items), width), self.pad_token_id, dtype=torch.long)
        targets = torch.full((len(items), width, 2), IGNORE_INDEX, dtype=torch.long)
        for row, item in enumerate(items):
            prompt, chosen, rejected = (list(item[key]) for key in ("prompt_ids", "chosen_ids", "rejected_ids"))
            p, c = len(prompt), len(chosen)
            input_ids[row, : lengths[row]] = torch.tensor(prompt + chosen + rejected, dtype=torch.long)
            # the prompt's last position predicts the first token of both replies
            targets[row, p - 1 : p - 1 + c, 0] = torch.tensor(chosen, dtype=torch.long)
            targets[row, p - 1, 1] = rejected[0]
            targets[row, p + c : p + c + len(rejected) - 1, 1] = torch.tensor(rejected[1:], dtype=torch.long)
        batch = {"input_ids": input_ids, "targets": targets, "segments": segments, "num_real_tokens": lengths}
        if REFERENCE_KEYS[0] in items[0]:
            for key in REFERENCE_KEYS:
                batch[key] = torch.stack([torch.as_tensor(item[key], dtype=torch.float64) for item in items])
        return batch

    def split(self, batch: Mapping[str, Any], rows_per_micro_batch: int) -> list[dict[str, torch.Tensor]]:
        """Micro-batches of at most ``rows_per_micro_batch`` pairs, each cut to its own longest row."""
        micro_batches = super().split(batch, rows_per_micro_batch)
        for micro in micro_batches:
            # from the pairs' lengths, which a filler batch keeps (it counts no tokens, yet every rank runs its forward)
            width = int(micro["segments"].sum(1).max())
            for key in ("input_ids", "targets"):
                micro[key] = micro[key][:, :width]  # right padding: trimming it changes nothing
        return micro_batches

    def model_inputs(self, micro_batch: Mapping[str, Any], *, dense_mask: bool = True) -> dict[str, Any]:
        """``input_ids``, the position ids (the rejected reply's continue the prompt's) and the 4D attention mask:
        causal, without the chosen reply's keys for the rejected reply's queries (pad positions see only the
        past, and no real token sees them)."""
        input_ids, segments = micro_batch["input_ids"], micro_batch["segments"]
        width = input_ids.shape[1]
        index = torch.arange(width, device=input_ids.device)
        prompt, chosen = segments[:, :1], segments[:, 1:2]
        chosen_end = prompt + chosen
        in_rejected = index >= chosen_end  # (rows, width): the rejected reply and the padding after it
        position_ids = torch.where(in_rejected, index - chosen, index)
        if not dense_mask:
            return {"input_ids": input_ids, "position_ids": position_ids}
        in_chosen = (index >= prompt) & ~in_rejected
        allowed = (index[:, None] >= index[None, :]) & ~(in_rejected[:, :, None] & in_chosen[:, None, :])
        mask = allowed[:, None]  # (rows, 1, query, key)
        if self.additive_mask:
            mask = torch.zeros(mask.shape, device=input_ids.device).masked_fill(~mask, torch.finfo(torch.float32).min)
        return {"input_ids": input_ids, "position_ids": position_ids, "attention_mask": mask}

    def packed_model_inputs(self, micro_batch: Mapping[str, Any]) -> dict[str, Any]:
        """The micro-batch as ONE row of its real tokens, pair after pair, with their positions and, as
        ``pair_segments``, each pair's (prompt, chosen, rejected) lengths: the inputs of a forward under
        ``honing.models.pair_attention``, which attends pair by pair (no padding, no dense mask)."""
        inputs = self.model_inputs(micro_batch, dense_mask=False)
        real = self.real_positions(micro_batch)
        return {
            "input_ids": inputs["input_ids"][real][None],
            "position_ids": inputs["position_ids"][real][None],
            # a 4D tensor: transformers takes it as built and builds no mask of its own
            "attention_mask": torch.zeros((1, 1, 0, 0), dtype=torch.bool, device=real.device),
            "pair_segments": tuple(tuple(int(n) for n in row) for row in micro_batch["segments"].tolist()),
        }

    @staticmethod
    def real_positions(micro_batch: Mapping[str, Any]) -> torch.Tensor:
        """(rows, width): True where a row holds a token of its pair, False at its padding."""
        input_ids = micro_batch["input_ids"]
        index = torch.arange(input_ids.shape[1], device=input_ids.device)
        return index < micro_batch["segments"].to(input_ids.device).sum(1, keepdim=True)

    def unpack(self, micro_batch: Mapping[str, Any], packed: torch.Tensor) -> torch.Tensor:
        """A packed forward's ``[1, tokens, ...]`` output laid out as the micro-batch's ``[rows, width, ...]``,
        zero at the padding (which no target reads)."""
        real = self.real_positions(micro_batch)
        out = packed.new_zeros((*real.shape, *packed.shape[2:]))
        return out.index_put((real,), packed[0])

    def filler(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        """The batch with nothing to score and no real tokens: a forward that counts for nothing."""
        filler = dict(batch)
        filler["targets"] = torch.full_like(batch["targets"], IGNORE_INDEX)
        filler["num_real_tokens"] = torch.zeros_like(batch["num_real_tokens"])
        return filler


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    length = 0
    for x, y in zip(a, b):
        if x != y:
            break
        length += 1
    return length
