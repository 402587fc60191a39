"""Answers from a loaded model: batched (the lean decoder where the family allows), streamed token by token, and
image prompts for vision-language models. ``honing generate`` and ``honing chat`` are thin loops over this."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import torch
from transformers.generation.streamers import TextStreamer

from honing.errors import ConfigError
from honing.infer.model_source import LoadedModel
from honing.models.generation import end_of_turn_ids, sample_completions

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

#: a prompt: plain text (a user turn when the model has a chat template) or a conversation's messages
Prompt = str | list[dict[str, Any]]


#: the answer length when ``--max-new-tokens`` is not given (shorter where the model's context is)
DEFAULT_MAX_NEW_TOKENS = 256


@dataclass(frozen=True)
class Sampling:
    """Sampling settings: greedy at temperature 0; ``seed`` makes sampled answers repeatable."""

    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int = 0

    def check(self) -> Sampling:
        """Refuse values no sampler takes, naming the option."""
        if self.max_new_tokens < 1:
            raise ConfigError(f"--max-new-tokens: expected >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ConfigError(f"--temperature: expected >= 0 (0: greedy), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"--top-p: expected a value in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ConfigError(f"--top-k: expected >= 0 (0: no top-k), got {self.top_k}")
        return self


def within_context(sampling: Sampling, loaded: LoadedModel, *, explicit: bool) -> Sampling:
    """``sampling`` with an answer length that the model's context holds beside at least one prompt token: the
    default is shortened to fit, an ``explicit`` ``--max-new-tokens`` past it is refused (as lm-eval refuses it)."""
    context = loaded.context_length
    if context is None or sampling.max_new_tokens < context:
        return sampling
    if explicit:
        raise ConfigError(
            f"--max-new-tokens: {sampling.max_new_tokens} new tokens do not fit the context of "
            f"{loaded.source.path} ({context} positions, prompt included); give --max-new-tokens {context - 1} or less"
        )
    return replace(sampling, max_new_tokens=context - 1)


def as_messages(prompt: Prompt) -> list[dict[str, Any]]:
    """A conversation: the messages themselves, or one user turn holding the text."""
    return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)


def stop_token_ids(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """End of sequence and the chat templates' end-of-turn tokens the tokenizer has."""
    return sorted({i for i in (tokenizer.eos_token_id, *end_of_turn_ids(tokenizer)) if i is not None})


@dataclass(frozen=True)
class Reply:
    """One prompt's answer and what it took: the prompt's tokens, the tokens chosen (the stop token that ended the
    answer included: it was sampled like any other), and whether a stop token ended it (False: the length limit)."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    stopped: bool


class TextGenerator:
    """Renders prompts with the chat template (when the tokenizer has one and ``chat_template`` is not False) and
    decodes them with the KV-cached sampler of ``honing.models.generation``: the lean decoder for Llama-shaped
    models, transformers' forward otherwise."""

    def __init__(
        self, loaded: LoadedModel, sampling: Sampling, *, chat_template: bool | None = None, batch_size: int = 32
    ):
        self.loaded = loaded
        self.tokenizer = loaded.tokenizer
        self.sampling = sampling.check()
        has_template = bool(getattr(self.tokenizer, "chat_template", None))
        if chat_template and not has_template:
            raise ConfigError(f"--chat-template: {loaded.source.path} has no chat template in its tokenizer")
        self.use_template = has_template if chat_template is None else chat_template
        if batch_size < 1:
            raise ConfigError(f"--batch-size: expected >= 1, got {batch_size}")
        self.batch_size = batch_size
        self.stops = stop_token_ids(self.tokenizer)
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else (self.stops[0] if self.stops else 0)

    def render(self, prompt: Prompt) -> str:
        """The text the model continues: the chat template's rendering with its generation prompt, or the text."""
        if self.use_template:
            return self.tokenizer.apply_chat_template(as_messages(prompt), tokenize=False, add_generation_prompt=True)
        if not isinstance(prompt, str):
            raise ConfigError("a prompt given as messages needs a chat template, and this tokenizer has none")
        return prompt

    def encode(self, prompt: Prompt) -> list[int]:
        """The prompt's token ids (special tokens come from the chat template, as in training)."""
        return self.tokenizer(self.render(prompt), add_special_tokens=False)["input_ids"]

    def complete(self, prompts: Sequence[Prompt], *, first_index: int = 0) -> list[str]:
        """Answer every prompt, batched by length; prompt ``i`` samples with seed ``seed + first_index + i``, so
        an answer does not depend on the batch it shares."""
        encoded = [self.encode(prompt) for prompt in prompts]
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
        answers: list[str] = [""] * len(encoded)
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            texts = self._decode_rows([encoded[i] for i in rows], [self.sampling.seed + first_index + i for i in rows])
            for row, text in zip(rows, texts):
                answers[row] = text
        return answers

    def stream(self, prompt: Prompt, write: Callable[[str], Any]) -> str:
        """Answer one prompt, handing the text to ``write`` piece by piece as tokens are chosen; the whole answer."""
        return self.reply(prompt, write).text

    def reply(self, prompt: Prompt, write: Callable[[str], Any] | None = None) -> Reply:
        """Answer one prompt (streamed to ``write`` when given) and count its tokens."""
        encoded = self.encode(prompt)
        streamer = _TextStream(self.tokenizer, set(self.stops), write or (lambda text: None))
        tokens, alive = self._sample_rows([encoded], [self.sampling.seed], on_tokens=streamer.add)
        chosen = [t for t, a in zip(tokens[0].tolist(), alive[0].tolist()) if a]
        stopped = bool(chosen) and chosen[-1] in self.stops
        return Reply(streamer.finish(), len(encoded), len(chosen), stopped)

    def _decode_rows(
        self, rows: list[list[int]], seeds: list[int], on_tokens: Callable[[torch.Tensor], Any] | None = None
    ) -> list[str]:
        tokens, alive = self._sample_rows(rows, seeds, on_tokens)
        out = []
        for row_tokens, row_alive in zip(tokens.tolist(), alive.tolist()):
            kept = [t for t, a in zip(row_tokens, row_alive) if a and t not in self.stops]
            out.append(self.tokenizer.decode(kept, skip_special_tokens=True))
        return out

    def _sample_rows(
        self, rows: list[list[int]], seeds: list[int], on_tokens: Callable[[torch.Tensor], Any] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``sample_completions`` over ``rows`` of prompt ids: the chosen tokens and which of them are the answer's."""
        device = self.loaded.device
        # the tokens every prompt starts with (the chat template's opening, a shared instruction) come first, then
        # each prompt's own tokens left-padded: the lean decoder computes the shared part once for the batch
        shared = min(common_prefix_length(rows), min(len(ids) for ids in rows) - 1)
        width = shared + max(len(ids) - shared for ids in rows)
        input_ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        input_ids[:, :shared] = torch.tensor(rows[0][:shared], dtype=torch.long)
        mask[:, :shared] = 1
        for index, ids in enumerate(rows):  # every row's next token is at the same position
            input_ids[index, width - len(ids) + shared :] = torch.tensor(ids[shared:], dtype=torch.long)
            mask[index, width - len(ids) + shared :] = 1
        s = self.sampling
        return sample_completions(
            self.loaded.model,
            input_ids.to(device),
            mask.to(device),
            max_new_tokens=s.max_new_tokens,
            stop_token_ids=self.stops,
            pad_token_id=self.pad_id,
            seeds=seeds,
            temperature=s.temperature,
            top_p=s.top_p,
            top_k=s.top_k,
            on_tokens=on_tokens,
            shared_prefix=shared,
        )


def common_prefix_length(rows: Sequence[Sequence[int]]) -> int:
    """How many leading tokens all ``rows`` share."""
    first = rows[0]
    length = min(len(row) for row in rows)
    for row in rows[1:]:
        length = next((i for i in range(length) if row[i] != first[i]), length)
    return length


class _TextStream:
    """Turns one row's tokens into text as they come: the decoded text grows, and only its new end is written
    (a character split over several byte tokens is written once it is whole)."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, stops: set[int], write: Callable[[str], object]):
        self.tokenizer = tokenizer
        self.stops = stops
        self.write = write
        self.ids: list[int] = []
        self.shown = ""
        self.ended = False

    def add(self, tokens: torch.Tensor) -> None:
        """Take this step's token of the row (``sample_completions``' ``on_tokens``)."""
        token = int(tokens[0])
        if self.ended or token in self.stops:
            self.ended = True
            return
        self.ids.append(token)
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if not text.endswith("\ufffd") and text.startswith(self.shown):
            self.write(text[len(self.shown) :])
            self.shown = text

    def finish(self) -> str:
        """Write what is left; the whole answer."""
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if text.startswith(self.shown) and len(text) > len(self.shown):
            self.write(text[len(self.shown) :])
        return text


def vision_turn(prompt: str, images: int) -> dict[str, Any]:
    """A user turn of a vision-language conversation: ``images`` image placeholders, then the text."""
    return {"role": "user", "content": [{"type": "image"} for _ in range(images)] + [{"type": "text", "text": prompt}]}


def answer_with_images(
    loaded: LoadedModel,
    messages: Sequence[dict[str, Any]],
    images: Sequence[Any],
    sampling: Sampling,
    *,
    write: Callable[[str], Any] | None = None,
) -> str:
    """A vision-language model's reply to ``messages`` (their image placeholders standing for ``images``, PIL
    images in order), with the processor's chat template and transformers' ``generate`` (streamed to ``write``)."""
    sampling = sampling.check()
    processor, tokenizer = loaded.processor, loaded.tokenizer
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    kwargs: dict[str, Any] = {"images": list(images)} if images else {}
    inputs = processor(text=[text], return_tensors="pt", **kwargs).to(loaded.device)
    stops = stop_token_ids(tokenizer)
    streamer = _WriteStreamer(tokenizer, write) if write is not None else None
    torch.manual_seed(sampling.seed)
    sample = sampling.temperature > 0
    with torch.inference_mode():
        out = loaded.model.generate(
            **inputs,
            max_new_tokens=sampling.max_new_tokens,
            do_sample=sample,
            temperature=sampling.temperature if sample else None,
            top_p=sampling.top_p if sample else None,
            top_k=sampling.top_k if sample else None,
            eos_token_id=stops or None,
            pad_token_id=tokenizer.pad_token_id,
            streamer=streamer,
        )
    new = [t for t in out[0, inputs["input_ids"].shape[1] :].tolist() if t not in stops]
    return tokenizer.decode(new, skip_special_tokens=True)


class _WriteStreamer(TextStreamer):
    """transformers' ``TextStreamer`` writing through a function instead of ``print``."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, write: Callable[[str], object]):
        super().__init__(tokenizer, skip_prompt=True, skip_special_tokens=True)
        self.write = write

    def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
        """Hand the finished piece of text on."""
        self.write(text)
