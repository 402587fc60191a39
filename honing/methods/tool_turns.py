"""Multi-turn rollouts with tools: a completion is a conversation. Each assistant turn is sampled by the policy; its
tool calls (in the chat template's tool-call format, ``honing.rl.tool_calls``) are run by the run's tool box
(``honing.rl.tools``), their answers are appended as tool turns rendered by the chat template, and the policy goes on
from there, up to ``max_turns`` assistant turns or ``max_completion_length`` tokens in all, as TRL's GRPO tool loop.

The completion's tokens are every turn's, model and tool alike, concatenated as sampled (never re-tokenized); the
loss mask holds the model's tokens only (tool answers are the world's, not the policy's: TRL's ``tool_mask``), the
attention mask every token. The rewards see the whole transcript as messages: assistant turns, tool turns, the final
answer last. A turn's sampling seed is derived from the completion's seed and the turn, so a resumed run replays
the same conversations (given tools that answer the same).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from honing.data.collate import padded_rows
from honing.distributed import is_distributed
from honing.errors import DataError
from honing.models.parallel import is_fsdp
from honing.rl.tool_calls import parse_tool_calls
from honing.rl.tools import ToolBox

if TYPE_CHECKING:
    from honing.methods.grpo_rollouts import GroupSampler

log = logging.getLogger(__name__)


@dataclass
class Transcripts:
    """One completion per row, as the loss and the rewards read them."""

    completion_ids: torch.Tensor  # every turn's tokens, right-padded
    completion_mask: torch.Tensor  # 1 on the policy's tokens (the loss's), 0 on tool answers and pads
    attention: torch.Tensor | None  # 1 on every real token; None: the same as completion_mask (one turn)
    completions: list[Any]  # what the rewards read: a text, or the turns as messages
    texts: list[str]  # what the samples show
    tool_counts: torch.Tensor | None = None  # [rows, 2]: tool calls made, and those that failed


@dataclass
class _Row:
    """One conversation being sampled."""

    context: list[int]  # prompt + completion so far: what the next turn is sampled from
    completion: list[int]
    loss_mask: list[int]
    messages: list[dict[str, Any]]
    calls: int = 0
    failures: int = 0
    open: bool = True


class ToolTurns:
    """Samples conversations: assistant turns, tool calls run, tool turns appended."""

    def __init__(
        self,
        toolbox: ToolBox,
        *,
        tokenizer: Any,
        tool_call_format: str,
        max_turns: int,
        max_completion_length: int,
        stop_token_ids: Sequence[int],
        pad_token_id: int,
        template_kwargs: Mapping[str, Any] | None = None,
    ):
        self.toolbox, self.tokenizer, self.format = toolbox, tokenizer, tool_call_format
        self.template_kwargs = dict(template_kwargs or {})  # data.chat_template_kwargs: at every rendering
        self.max_turns, self.max_completion_length = max_turns, max_completion_length
        self.stop_token_ids, self.pad_token_id = sorted({int(i) for i in stop_token_ids}), int(pad_token_id)
        self._warned_no_room = False  # said once per run

    def sample(
        self,
        sampler: GroupSampler,
        batch: dict[str, Any],
        prompts: list[Any],
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        seeds: list[int],
        **sampling: Any,
    ) -> Transcripts:
        """One conversation per row of the left-padded prompts, each assistant turn sampled by ``sampler.sample``."""
        if any(not isinstance(prompt, list) for prompt in prompts):
            raise DataError("tools: tool calls need chat prompts (lists of messages); a prompt is a plain text")
        rows = [
            _Row(context=ids[keep.bool()].tolist(), completion=[], loss_mask=[], messages=[])
            for ids, keep in zip(prompt_ids.cpu(), prompt_mask.cpu())
        ]
        for turn in range(self.max_turns):
            active = [index for index, row in enumerate(rows) if row.open]
            budget = max((self.max_completion_length - len(rows[i].completion) for i in active), default=0)
            anyone, budget = self._agree(sampler, bool(active), budget)
            if not anyone:
                break
            turn_seeds = [turn_seed(seeds[i], turn) for i in active]
            sampled = self._sample_turn(sampler, batch, [rows[i].context for i in active], turn_seeds, budget, sampling)
            for index, tokens in zip(active, sampled):
                self._take_turn(rows[index], tokens, last_turn=turn == self.max_turns - 1)
        return self._transcripts(rows, prompt_ids.device)

    # --- one turn -------------------------------------------------------------------------
    def _sample_turn(
        self,
        sampler: GroupSampler,
        batch: dict[str, Any],
        contexts: list[list[int]],
        seeds: list[int],
        budget: int,
        sampling: dict[str, Any],
    ) -> list[list[int]]:
        """Each context's next assistant turn (its tokens up to and including its stop token)."""
        rows = contexts or [[self.pad_token_id]]  # a rank with nothing left still takes part (FSDP2's gathers)
        ids, mask = padded_rows(rows, self.pad_token_id, left=True)
        device = sampler.device
        out_ids, out_mask = sampler.sample(
            batch, ids.to(device), mask.to(device), seeds or [0], **{**sampling, "max_new_tokens": budget}
        )
        turns = [row[keep.bool()].tolist() for row, keep in zip(out_ids.cpu(), out_mask.cpu())]
        return turns[: len(contexts)]

    def _take_turn(self, row: _Row, tokens: list[int], *, last_turn: bool) -> None:
        """Append a sampled turn to ``row``; run its tool calls and append their answers, or close the row."""
        tokens = tokens[: self.max_completion_length - len(row.completion)]
        row.completion += tokens
        row.loss_mask += [1] * len(tokens)
        row.context += tokens
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        row.messages.append({"role": "assistant", "content": text})
        ended = bool(tokens) and tokens[-1] in self.stop_token_ids
        calls = parse_tool_calls(text, self.format) if ended and not last_turn else []
        if not calls:
            row.open = False
            return
        answers = self.toolbox.call_all(calls)
        row.calls += len(answers)
        row.failures += sum(answer.failed for answer in answers)
        replies = [{"role": "tool", "name": answer.name or "unknown", "content": answer.content} for answer in answers]
        suffix = self.tool_turn_ids(replies)
        if len(row.completion) + len(suffix) >= self.max_completion_length:  # no room to answer after the tools
            if not self._warned_no_room:
                self._warned_no_room = True
                log.warning(
                    "grpo.max_completion_length (%d tokens) left no room for a tool's answer after a call of %d "
                    "tokens (the tool turn is %d); the conversation ends there: raise it",
                    self.max_completion_length,
                    len(tokens),
                    len(suffix),
                )
            row.open = False
            return
        row.completion += suffix
        row.loss_mask += [0] * len(suffix)
        row.context += suffix
        row.messages += replies

    def tool_turn_ids(self, replies: list[dict[str, Any]]) -> list[int]:
        """The tokens the chat template puts after an assistant turn's end for these tool answers, up to the next
        assistant turn's header: the rendering of a conversation with them, less the rendering without (cut at its
        last stop token, where the sampled turn ends too)."""
        tokenizer = self.tokenizer
        call = {"type": "function", "function": {"name": replies[0]["name"], "arguments": {}}}
        before = [{"role": "user", "content": "?"}, {"role": "assistant", "content": "", "tool_calls": [call]}]
        options = self.template_kwargs
        prefix = _ids(tokenizer, tokenizer.apply_chat_template(before, tokenize=False, **options))
        full = _ids(
            tokenizer,
            tokenizer.apply_chat_template(before + replies, tokenize=False, add_generation_prompt=True, **options),
        )
        stops = [i for i, token in enumerate(prefix) if token in self.stop_token_ids]
        if stops:
            prefix = prefix[: stops[-1] + 1]
        if full[: len(prefix)] != prefix:
            raise DataError(
                "the chat template renders a conversation with tool answers differently from the same conversation "
                "without them (not prefix-stable), so tool turns cannot be appended to sampled tokens; set "
                "data.chat_template to one that keeps earlier turns as rendered (chatml, or the model's training "
                "variant)"
            )
        return full[len(prefix) :]

    # --- ranks and results ------------------------------------------------------------------
    def _agree(self, sampler: GroupSampler, active: bool, budget: int) -> tuple[bool, int]:
        """Whether any rank has a conversation open, and the largest token budget of any (under FSDP2 every rank
        samples every turn, the same number of tokens at most)."""
        if not (is_distributed() and is_fsdp(sampler.model)):
            return active, budget
        values = torch.tensor([int(active), budget], device=sampler.device)
        torch.distributed.all_reduce(values, op=torch.distributed.ReduceOp.MAX)
        return bool(values[0].item()), int(values[1].item())

    def _transcripts(self, rows: list[_Row], device: torch.device) -> Transcripts:
        ids, attention = padded_rows([row.completion for row in rows], self.pad_token_id)
        loss, _ = padded_rows([row.loss_mask for row in rows], 0)
        counts = torch.tensor([[row.calls, row.failures] for row in rows], dtype=torch.long)
        return Transcripts(
            completion_ids=ids.to(device),
            completion_mask=loss.to(device),
            attention=attention.to(device),
            completions=[row.messages for row in rows],
            texts=[transcript_text(row.messages) for row in rows],
            tool_counts=counts,
        )


def turn_seed(seed: int, turn: int) -> int:
    """The sampling seed of a conversation's turn: the completion's own seed for the first."""
    if turn == 0:
        return int(seed)
    return int(np.random.SeedSequence([int(seed), turn]).generate_state(1, np.uint64)[0] >> 1)


def transcript_text(messages: list[dict[str, Any]]) -> str:
    """A conversation as the samples show it: the assistant's turns as written, each tool answer on a line."""
    parts = []
    for message in messages:
        if message["role"] == "tool":
            parts.append(f"[tool {message['name']}] {message['content']}")
        else:
            parts.append(message["content"])
    return "\n".join(parts)


def _ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])
