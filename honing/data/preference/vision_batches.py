"""Preference pairs whose prompt holds images, as tokens and batches (``method: vl_dpo``).

A pair is tokenized as TRL's DPOTrainer does for text (``honing.data.preference.batches.tokenize_pair``): the
prompt rendered with the generation prompt, each reply what follows it in prompt + reply rendered whole. The prompt's
ids are the processor's, its image placeholders expanded; the replies' are the tokenizer's (no image follows them).

Batches take TRL's vision layout, not the text pairs' one row per pair: the chosen sequence (prompt + chosen) and the
rejected one (prompt + rejected) are separate rows of the forward, each given the prompt's pixel inputs (TRL
concatenates ``pixel_values`` for the chosen and the rejected rows). A text pair's rejected reply continues the
prompt's positions in the same row under a 4D mask; an image family's own positions (Qwen-VL's M-RoPE, from
``get_rope_index``) are computed by the model from a row's ids and image grids, and restart with each row only.

So that the pair step (``honing.methods.pairs``) scores them unchanged, a batch row holds a pair's two sequences side
by side (``[pairs, 2 × width]``, ``targets`` column 0 in the first half, column 1 in the second); ``model_inputs``
stacks the halves into ``[2 × pairs, width]`` rows and ``pair_layout`` lays the forward's output back side by side.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

import torch

from honing.data.collate import Collator
from honing.data.formats import ContentItem
from honing.data.preference.batches import REFERENCE_KEYS, PairDataset, TokenizedPair, _common_prefix
from honing.data.vision.processing import ImageInputKeys, process
from honing.errors import DataError
from honing.losses import IGNORE_INDEX

if TYPE_CHECKING:
    from PIL.Image import Image
    from transformers import ProcessorMixin

#: joins several rows' image inputs as the processor joins a batch's (the model family's
#: ``honing.models.vl_families.concat_image_inputs``, handed in: data imports no models)
JoinImages = Callable[[Sequence[Mapping[str, torch.Tensor]]], dict[str, torch.Tensor]]
#: the batch key holding each pair's prompt image inputs (a dict of the processor's tensors, one per pair)
PAIR_IMAGE_INPUTS = "pair_image_inputs"


@dataclass
class VisionTokenizedPair(TokenizedPair):
    """A pair's token ids (the prompt's with its image tokens expanded), its rendered prompt and image items."""

    text: str = ""  # the prompt rendered with the generation prompt, image placeholders unexpanded
    images: list[dict[str, Any]] = field(default_factory=list)  # the prompt's image items (references), in order


def tokenize_vision_pair(
    processor: Any,
    messages: list[dict[str, Any]],
    images: Sequence[Any],
    chosen: list[dict[str, str]],
    rejected: list[dict[str, str]],
    *,
    chat_template: str,
) -> tuple[list[int], list[int], list[int], str]:
    """The prompt's expanded ids, each reply's ids and the rendered prompt of one pair (``messages``: the prompt in
    the processor's message form; ``images``: its loaded images; replies as text messages)."""
    tokenizer = processor.tokenizer

    def render(turns: list[dict[str, Any]], generation_prompt: bool) -> str:
        return processor.apply_chat_template(
            turns, chat_template=chat_template, tokenize=False, add_generation_prompt=generation_prompt
        )

    def ids(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    def as_parts(reply: list[dict[str, str]]) -> list[dict[str, Any]]:
        return [{"role": turn["role"], "content": [{"type": "text", "text": turn["content"]}]} for turn in reply]

    text = render(messages, True)
    prompt = ids(text)
    chosen_ids, rejected_ids = (
        ids(render(messages + as_parts(chosen), False)),
        ids(render(messages + as_parts(rejected), False)),
    )
    cut = min(_common_prefix(prompt, chosen_ids), _common_prefix(prompt, rejected_ids))
    if cut == 0:
        raise DataError("the prompt renders to no tokens shared with its completions; check the chat template")
    if cut == len(chosen_ids) or cut == len(rejected_ids):
        raise DataError("a completion renders to no tokens after its prompt; check the chat template")
    expanded = process(processor, text, images, {})["input_ids"][0].tolist()
    # prompt tokens a reply renders otherwise (the template's end of the generation prompt) leave the prompt's end
    tail = prompt[cut:]
    if tail:
        if expanded[-len(tail) :] != tail:
            raise DataError("the prompt's last tokens differ between the processor and the tokenizer")
        expanded = expanded[: -len(tail)]
    return expanded, chosen_ids[cut:], rejected_ids[cut:], text


def fit_vision_pair(
    pair: VisionTokenizedPair, max_length: int, policy: Literal["truncate", "drop"]
) -> VisionTokenizedPair | None:
    """``pair`` if both sequences fit ``max_length``; else None (``drop``, or a prompt that alone leaves no room:
    its image tokens cannot be cut) or, to ``truncate``, the replies cut from the right; the prompt is never cut."""
    if pair.length <= max_length:
        return pair
    keep = max_length - len(pair.prompt_ids)
    if policy == "drop" or keep < 1:
        return None
    return replace(pair, chosen_ids=pair.chosen_ids[:keep], rejected_ids=pair.rejected_ids[:keep])


class VisionPairDataset(PairDataset):
    """Tokenized image pairs: each item also its rendered prompt and its images, opened when it is read."""

    def __init__(self, pairs: Sequence[VisionTokenizedPair], load_image: Callable[[ContentItem], Image]):
        super().__init__(pairs)
        self.load_image = load_image

    def __getitem__(self, index: int) -> dict[str, Any]:
        item = super().__getitem__(index)
        pair = self.pairs[index]
        item["text"] = pair.text  # type: ignore[attr-defined]
        item["images"] = [self.load_image(ContentItem(**image)) for image in pair.images]  # type: ignore[attr-defined]
        return item


class VisionPairCollator(Collator):
    """Image pairs → one row per pair holding ``prompt | chosen`` and ``prompt | rejected`` side by side (each
    right-padded to the batch's longest sequence), with each pair's prompt image inputs from the processor (its ids
    checked against the stored ones); micro-batches of whole pairs, their pixel inputs given to both rows."""

    def __init__(
        self, processor: ProcessorMixin, family: ImageInputKeys, pad_token_id: int | None, *, join_images: JoinImages
    ):
        if pad_token_id is None or int(pad_token_id) < 0:
            raise DataError(f"pad_token_id is {pad_token_id!r}; preference batches need a pad token id >= 0")
        self.processor, self.family, self.pad_token_id = processor, family, int(pad_token_id)
        self.join_images = join_images
        self.model_input_keys = tuple(dict.fromkeys(("input_ids", "attention_mask", *family.model_input_keys)))

    def __call__(self, items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        segments = torch.tensor(
            [[len(item["prompt_ids"]), len(item["chosen_ids"]), len(item["rejected_ids"])] for item in items]
        )
        width = int((segments[:, 0] + segments[:, 1:].max(1).values).max())
        input_ids = torch.full((len(items), 2 * width), self.pad_token_id, dtype=torch.long)
        targets = torch.full((len(items), 2 * width, 2), IGNORE_INDEX, dtype=torch.long)
        for row, item in enumerate(items):
            prompt, chosen, rejected = (list(item[key]) for key in ("prompt_ids", "chosen_ids", "rejected_ids"))
            p = len(prompt)
            input_ids[row, : p + len(chosen)] = torch.tensor(prompt + chosen)
            input_ids[row, width : width + p + len(rejected)] = torch.tensor(prompt + rejected)
            # the prompt's last position predicts each reply's first token
            targets[row, p - 1 : p - 1 + len(chosen), 0] = torch.tensor(chosen)
            targets[row, width + p - 1 : width + p - 1 + len(rejected), 1] = torch.tensor(rejected)
        batch: dict[str, Any] = {
            "input_ids": input_ids,
            "targets": targets,
            "segments": segments,
            "num_real_tokens": 2 * segments[:, 0] + segments[:, 1] + segments[:, 2],
        }
        if REFERENCE_KEYS[0] in items[0]:
            for key in REFERENCE_KEYS:
                batch[key] = torch.stack([torch.as_tensor(item[key], dtype=torch.float64) for item in items])
        batch[PAIR_IMAGE_INPUTS] = [self.image_inputs(item) for item in items]
        return batch

    def image_inputs(self, item: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """One pair's prompt image inputs (per-token ones over the prompt's ids), its ids checked."""
        if not item["images"]:
            return {}
        prompt = list(item["prompt_ids"])
        encoding = process(self.processor, item["text"], item["images"], {})
        if encoding["input_ids"][0][: len(prompt)].tolist() != prompt:
            raise DataError(
                "an image pair's prompt: the processor gave other token ids than when the data set was built "
                "(the images or the processor changed)"
            )
        out = {}
        for key in self.family.model_input_keys:
            value = encoding.get(key)
            if isinstance(value, torch.Tensor):
                out[key] = value[0, : len(prompt)] if key in self.family.per_token_keys else value
        return out

    def split(self, batch: Mapping[str, Any], rows_per_micro_batch: int) -> list[dict[str, torch.Tensor]]:
        """Micro-batches of at most ``rows_per_micro_batch`` pairs, each cut to its own longest sequence, with its
        pairs' image inputs joined for its chosen rows, then again for its rejected rows."""
        pairs = self.num_rows(batch)
        size = max(1, min(rows_per_micro_batch, pairs))
        half = batch["input_ids"].shape[1] // 2
        micro_batches = []
        for start in range(0, pairs, size):
            stop = min(start + size, pairs)
            segments = batch["segments"][start:stop]
            width = int((segments[:, 0] + segments[:, 1:].max(1).values).max())

            micro = {
                "input_ids": _sides(batch["input_ids"][start:stop], half, width),
                "targets": _sides(batch["targets"][start:stop], half, width),
                "segments": segments,
            }
            micro["num_real_tokens"] = batch["num_real_tokens"][start:stop]
            for key in REFERENCE_KEYS:
                if key in batch:
                    micro[key] = batch[key][start:stop]
            micro.update(self.joined_image_inputs(batch[PAIR_IMAGE_INPUTS][start:stop], width))
            micro_batches.append(micro)
        return micro_batches

    def joined_image_inputs(self, rows: Sequence[Mapping[str, torch.Tensor]], width: int) -> dict[str, torch.Tensor]:
        """The image inputs of the forward's ``2 × len(rows)`` rows (chosen rows, then rejected rows): image tensors
        joined as the processor joins a batch's, per-token ones at each prompt's tokens and 0 elsewhere."""
        both = [*rows, *rows]
        joined = self.join_images(both)
        for key in self.family.per_token_keys:
            if any(key in row for row in rows):
                placed = torch.zeros((len(both), width), dtype=torch.long)
                for index, row in enumerate(both):
                    if key in row:
                        placed[index, : len(row[key])] = torch.as_tensor(row[key])
                joined[key] = placed
        return joined

    def model_inputs(self, micro_batch: Mapping[str, Any]) -> dict[str, Any]:
        """The chosen rows, then the rejected rows, with their attention mask and the image inputs for both."""
        input_ids = micro_batch["input_ids"]
        width = input_ids.shape[1] // 2
        segments = micro_batch["segments"].to(input_ids.device)
        lengths = torch.cat([segments[:, 0] + segments[:, 1], segments[:, 0] + segments[:, 2]])
        index = torch.arange(width, device=input_ids.device)
        inputs = {
            "input_ids": torch.cat([input_ids[:, :width], input_ids[:, width:]]),
            "attention_mask": (index < lengths[:, None]).long(),
        }
        inputs.update({key: micro_batch[key] for key in self.family.model_input_keys if key in micro_batch})
        return inputs

    @staticmethod
    def pair_layout(micro_batch: Mapping[str, Any], output: torch.Tensor) -> torch.Tensor:
        """A forward's ``[2 × pairs, width, ...]`` output as ``[pairs, 2 × width, ...]``: each pair's chosen row,
        then its rejected row, side by side as ``targets`` holds them."""
        pairs = micro_batch["input_ids"].shape[0]
        return torch.cat([output[:pairs], output[pairs:]], dim=1)

    def filler(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        """The batch with nothing to score and no real tokens: a forward that counts for nothing."""
        filler = dict(batch)
        filler["targets"] = torch.full_like(batch["targets"], IGNORE_INDEX)
        filler["num_real_tokens"] = torch.zeros_like(batch["num_real_tokens"])
        return filler


def _sides(rows: torch.Tensor, half: int, width: int) -> torch.Tensor:
    """Each row's two sequences (at 0 and at ``half``) cut to ``width`` and side by side again: right padding only
    is trimmed, which changes nothing."""
    return torch.cat([rows[:, :width], rows[:, half : half + width]], dim=1)
