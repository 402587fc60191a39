"""Generation between training steps: one place for samples, the generation eval and GRPO rollouts."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from honing.distributed import is_distributed
from honing.models.lean_decoder import lean_decoder
from honing.models.sampling_filters import min_p_filter, penalize_repeats, seen_tokens
from honing.models.wrappers import transformers_model, unwrap_model

if TYPE_CHECKING:
    from transformers import Cache, PreTrainedTokenizerBase

# the end-of-turn tokens of the common chat templates (ChatML, Llama-3, Phi-3)
END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|end|>")


def generate(
    model: torch.nn.Module, input_ids: torch.Tensor, *, pad_token_id: int | None, **generate_kwargs: object
) -> torch.Tensor:
    """``model.generate`` in eval mode without gradients, the model's mode restored afterwards.

    Under DDP the wrapped model generates on its own; under FSDP2 every rank must call this (the callbacks
    do), and transformers keeps their forwards in step (synced_gpus) so no rank waits in an all-gather.
    """
    inner = unwrap_model(model)
    was_training = inner.training
    inner.eval()
    try:
        with torch.no_grad():
            return inner.generate(
                input_ids=input_ids,
                attention_mask=torch.ones_like(input_ids),
                pad_token_id=pad_token_id,
                **generate_kwargs,
            )
    finally:
        inner.train(was_training)


def end_of_turn_ids(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """Token ids that end an assistant turn in the common chat templates, where the tokenizer has them."""
    ids = [tokenizer.convert_tokens_to_ids(token) for token in END_OF_TURN_TOKENS]
    return [i for i in ids if i is not None and i != tokenizer.unk_token_id]


def sampling_kwargs(
    *, max_new_tokens: int, temperature: float, top_k: int | None = 50, stop_token_ids: Sequence[int] = ()
) -> dict[str, Any]:
    """``generate`` keyword arguments: greedy at temperature 0, else sampling with ``top_k``."""
    kwargs: dict[str, Any] = {
        "max_new_tokens": max_new_tokens,
        "do_sample": temperature > 0,
        "temperature": temperature or None,
        "top_k": top_k if temperature > 0 else None,
    }
    if stop_token_ids:
        kwargs["eos_token_id"] = sorted(set(stop_token_ids))
    return kwargs


def sample_completions(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    max_new_tokens: int,
    stop_token_ids: Sequence[int],
    pad_token_id: int,
    seeds: Sequence[int],
    temperature: float = 1.0,
    top_p: float = 1.0,
    top_k: int = 0,
    min_p: float | None = None,
    repetition_penalty: float = 1.0,
    sync_ranks: bool = False,
    on_tokens: Callable[[torch.Tensor], Any] | None = None,
    shared_prefix: int = 0,
    decoder: Callable[[torch.nn.Module], Any] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one completion per row of left-padded prompts: ``(completion_ids, completion_mask)``, each row
    ending at its first stop token (kept, and masked in) or after ``max_new_tokens``; pads after it.

    Row ``i`` draws its tokens from its own generator seeded with ``seeds[i]`` (Gumbel-max over the filtered
    distribution), so a row's completion does not depend on which rows share its batch, and a resumed run
    samples the same completions. The KV cache is reused between tokens and sampling stops when every row
    has ended; with ``sync_ranks`` (FSDP2: every rank must take part in every forward) it stops when every row
    of every rank has ended. ``temperature`` 0 is greedy. ``on_tokens`` sees each step's tokens (pads where a row
    has ended) as they are chosen, e.g. to stream them to a terminal. ``min_p`` (None: off) and ``repetition_penalty``
    (1: off; over the prompt's real tokens and the completion's) act as transformers' processors of those names.
    ``shared_prefix``: the first columns hold the same real tokens in every row (padding after them), which the lean
    decoder then computes once. ``decoder`` builds the decoder from the unwrapped model instead
    (``honing.models.vl_decoding``: prompts with pixel inputs).
    """
    inner = unwrap_model(model)
    was_training = inner.training
    inner.eval()
    device = input_ids.device
    noise = GumbelNoise(seeds, device, max_new_tokens) if temperature != 0 else None
    stops = torch.tensor(sorted(set(stop_token_ids)), device=device, dtype=torch.long)
    done = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=device)
    tokens: list[torch.Tensor] = []
    ended: list[torch.Tensor] = []  # per token, the rows that had ended before it (``done`` is never changed in place)
    # FSDP2's all-gathers run in the root module's forward, which only the transformers path calls
    if decoder is not None:
        decode = decoder(inner)
    else:
        decode = (None if sync_ranks else lean_decoder(inner)) or TransformersDecoder(inner)
    # inference mode skips autograd's bookkeeping on each of a decode step's small operators (~10 % of a step at
    # rollout sizes); the transformers path keeps no_grad, whose tensors FSDP2's hooks may keep
    no_autograd = torch.no_grad() if isinstance(decode, TransformersDecoder) else torch.inference_mode()
    try:
        with no_autograd:
            logits = decode.prefill(input_ids, attention_mask, max_new_tokens, shared_prefix=shared_prefix)
            penalty = None
            if repetition_penalty != 1.0:  # the tokens seen so far, grown by each sampled token
                penalty = (seen_tokens(input_ids, attention_mask, logits.shape[-1]), repetition_penalty)
            for _ in range(max_new_tokens):
                next_tokens = _sample(logits, noise, temperature, top_p, top_k, min_p, penalty)
                if penalty is not None:
                    penalty[0].scatter_(1, next_tokens[:, None], True)
                ended.append(done)
                tokens.append(next_tokens.masked_fill(done, pad_token_id))
                if on_tokens is not None:
                    on_tokens(tokens[-1])
                done = done | torch.isin(next_tokens, stops)
                if _all_done(done, sync_ranks) or len(tokens) == max_new_tokens:
                    break
                logits = decode.step(tokens[-1])
    finally:
        inner.train(was_training)
    # clones made outside inference mode are ordinary tensors, which the training forward may save for backward
    return torch.stack(tokens, dim=1).clone(), (~torch.stack(ended, dim=1)).long()


class TransformersDecoder:
    """The model's own forward over transformers' cache: any architecture, and FSDP2 (its root forward gathers)."""

    def __init__(self, model: torch.nn.Module):
        self.model = model
        # transformers 5.x renamed ``past_key_values`` to ``cache``; the old name warns on every call
        parameters = inspect.signature(transformers_model(model).forward).parameters
        self.cache_argument = "cache" if "cache" in parameters else "past_key_values"
        self.cache: Cache | None = None
        self.mask = torch.empty(0, dtype=torch.long)
        self.position = torch.empty(0, dtype=torch.long)

    def prefill(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int, shared_prefix: int = 0
    ) -> torch.Tensor:
        """Run the left-padded prompts (a ``shared_prefix`` is computed for every row here); the next-token logits
        ``[rows, vocab]``."""
        from transformers import DynamicCache

        # positions count real tokens only, as transformers' generate sets them for left-padded rows
        positions = (attention_mask.long().cumsum(-1) - 1).masked_fill(attention_mask == 0, 1)
        self.mask = attention_mask.long()
        self.position = positions[:, -1:]
        self.cache = DynamicCache(config=getattr(self.model, "config", None))
        return self._forward(input_ids, positions, logits_to_keep=1)

    def step(self, token_ids: torch.Tensor) -> torch.Tensor:
        """Append one token per row; the next-token logits ``[rows, vocab]``."""
        self.mask = torch.cat([self.mask, torch.ones_like(self.mask[:, :1])], dim=1)
        self.position = self.position + 1
        return self._forward(token_ids[:, None], self.position)

    def _forward(self, input_ids: torch.Tensor, positions: torch.Tensor, **kwargs: object) -> torch.Tensor:
        out = self.model(
            input_ids=input_ids,
            attention_mask=self.mask,
            position_ids=positions,
            use_cache=True,
            **{self.cache_argument: self.cache},
            **kwargs,
        )
        return out.logits[:, -1, :]


def _all_done(done: torch.Tensor, sync_ranks: bool) -> bool:
    if not (sync_ranks and is_distributed()):
        return bool(done.all())
    flag = done.all().to(torch.int32).reshape(1)
    torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MIN)
    return bool(flag.item())


class GumbelNoise:
    """Each row's Gumbel noise, one ``[vocab]`` draw per token from its own generator seeded with its seed.

    On the CPU a generator's successive ``rand(vocab)`` draws are one ``rand(k, vocab)`` draw, and the noise's
    logs are elementwise, so the noise of the next several tokens is drawn and transformed at once (a few
    operators per block of tokens instead of ``rows + 6`` per token), the same bits as token by token. Blocks grow
    from 8 tokens (rollouts that end early draw little beyond their end) and hold at most ``BLOCK_FLOATS`` floats.
    Elsewhere (CUDA's Philox offsets are not additive that way) the noise is drawn token by token.
    """

    BLOCK_FLOATS = 1 << 22

    def __init__(self, seeds: Sequence[int], device: torch.device, max_tokens: int):
        self.generators = [torch.Generator(device=device).manual_seed(int(seed)) for seed in seeds]
        self.device, self.left = device, max_tokens
        self.block = 8 if device.type == "cpu" else 1  # tokens in the next block
        self.gumbel = torch.empty(0)  # [rows, tokens of the block, vocab]
        self.used = 0  # of the block's tokens

    def next(self, vocab: int) -> torch.Tensor:
        """``[rows, vocab]`` Gumbel noise for the next token."""
        if self.used == (self.gumbel.shape[1] if self.gumbel.dim() == 3 else 0):
            self._draw(vocab)
        self.used += 1
        return self.gumbel[:, self.used - 1]

    def _draw(self, vocab: int) -> None:
        rows = max(len(self.generators), 1)
        tokens = max(1, min(self.block, self.left, self.BLOCK_FLOATS // (rows * vocab)))
        uniform = torch.stack(
            [torch.rand(tokens, vocab, generator=g, device=self.device, dtype=torch.float32) for g in self.generators]
        )
        self.gumbel = -torch.log(-torch.log(uniform.clamp(min=1e-20)))
        self.used, self.left = 0, self.left - tokens
        if self.device.type == "cpu":
            self.block *= 2


def _sample(
    logits: torch.Tensor,
    noise: GumbelNoise | None,
    temperature: float,
    top_p: float,
    top_k: int,
    min_p: float | None = None,
    penalty: tuple[torch.Tensor, float] | None = None,
) -> torch.Tensor:
    """One token per row: greedy at temperature 0, else the Gumbel-max of the temperature-scaled logits with
    everything outside the top-k, the top-p nucleus and the min-p floor removed (transformers' order: the
    repetition ``penalty`` (seen tokens, factor) first, then temperature, top-k, top-p, min-p). A filter at its
    no-op setting is skipped, and so is the division at temperature 1 (x / 1 is x, bit for bit)."""
    if logits.dtype != torch.float32:
        logits = logits.float()
    if penalty is not None:
        logits = penalize_repeats(logits, *penalty)
    if temperature == 0 or noise is None:
        return logits.argmax(-1)
    if temperature != 1.0:
        logits = logits / temperature
    if 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=False, dim=-1)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        remove = cumulative <= 1 - top_p
        remove[:, -1] = False  # keep at least the most likely token
        logits = logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
    if min_p is not None:
        logits = min_p_filter(logits, min_p)
    return (logits + noise.next(logits.shape[-1])).argmax(-1)
