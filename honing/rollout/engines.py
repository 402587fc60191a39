"""The rollout server's engines: vLLM (``vllm.LLM``, on CUDA) and transformers (any device; tests and a fallback).

An engine samples one completion per prompt of token ids with that prompt's own seed, stopping at the given stop
token ids only (the model's own end-of-sequence token stops it only when it is one of them, as in honing's decoder),
and loads named tensors (Hugging Face checkpoint names) into its model. Like the server, this imports nothing of
honing.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import logging
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

log = logging.getLogger("honing-rollout")


@dataclass(frozen=True)
class Sampling:
    """How every completion of a request is drawn: greedy at temperature 0, else after top-k (0: none) and top-p
    filtering; at most ``max_tokens``, ending at the first of ``stop_token_ids`` (kept)."""

    temperature: float
    top_p: float
    top_k: int
    max_tokens: int
    stop_token_ids: tuple[int, ...]


def build_engine(args: argparse.Namespace) -> Engine:
    """The engine ``--engine`` names; ``auto``: vLLM where it imports and CUDA is there, else transformers."""
    choice = args.engine
    if choice == "auto":
        choice = "vllm" if vllm_can_run() else "transformers"
    if choice == "vllm":
        return VLLMEngine(
            args.model,
            tensor_parallel_size=args.tensor_parallel_size,
            gpu_memory_utilization=args.gpu_memory_utilization,
            dtype=args.dtype,
            max_model_len=args.max_model_len,
            enforce_eager=args.enforce_eager,
        )
    return TransformersEngine(args.model, dtype=args.dtype, device=args.device)


def vllm_can_run() -> bool:
    """Whether ``vllm`` imports here and a CUDA device is visible."""
    if importlib.util.find_spec("vllm") is None:
        return False
    import torch

    return torch.cuda.is_available()


def read_tensors(blob: bytes) -> dict[str, torch.Tensor]:
    """The named tensors of a safetensors file held in memory (on the CPU)."""
    from safetensors.torch import load

    return load(blob)


class TransformersEngine:
    """``AutoModelForCausalLM`` from the folder; one prompt at a time, each drawn from its own generator seeded with
    its own seed, so a row's completion depends on nothing else."""

    name = "transformers"

    def __init__(self, model: str, *, dtype: str = "auto", device: str = "auto"):
        import torch
        from transformers import AutoModelForCausalLM

        self.device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device)
        dtype_value = dtype if dtype == "auto" else getattr(torch, dtype)
        # transformers 4.56 renamed torch_dtype to dtype; vLLM's environment may hold either side of it
        dtype_argument = "dtype" if transformers_version() >= (4, 56) else "torch_dtype"
        loaded = AutoModelForCausalLM.from_pretrained(model, **{dtype_argument: dtype_value})
        self.model = loaded.to(self.device).eval()
        self.dtype = str(self.model.dtype).removeprefix("torch.")
        # transformers 5 may name the cache argument ``cache``; 4.x names it ``past_key_values``
        self.cache_argument = (
            "cache" if "cache" in inspect.signature(self.model.forward).parameters else "past_key_values"
        )

    def generate(self, prompts: list[list[int]], seeds: list[int], sampling: Sampling) -> list[list[int]]:
        """One completion per prompt (see the class)."""
        import torch

        with torch.no_grad():
            return [self.complete(prompt, seed, sampling) for prompt, seed in zip(prompts, seeds)]

    def complete(self, prompt: list[int], seed: int, sampling: Sampling) -> list[int]:
        """One prompt's completion over the model's KV cache. transformers' ``generate`` is not used: it would add
        the model's own end-of-sequence token to the stop tokens."""
        import torch

        generator = torch.Generator(device=self.device).manual_seed(seed)
        out = self.model(input_ids=torch.tensor([prompt], device=self.device), use_cache=True)
        tokens: list[int] = []
        stops = set(sampling.stop_token_ids)
        while True:
            token = pick_token(out.logits[0, -1].float(), generator, sampling)
            tokens.append(token)
            if token in stops or len(tokens) == sampling.max_tokens:
                return tokens
            step = torch.tensor([[token]], device=self.device)
            cache = getattr(out, self.cache_argument)  # the output names its cache as the forward's argument does
            out = self.model(input_ids=step, use_cache=True, **{self.cache_argument: cache})

    def begin_weight_update(self) -> None:
        """Nothing to prepare: tensors are copied into the live model."""

    def load_weights(self, blob: bytes) -> int:
        """Copy the blob's tensors into the model's tensors of the same names; a name or shape the model does not
        have is refused (ValueError) before any tensor is copied."""
        import torch

        tensors = read_tensors(blob)
        own = self.model.state_dict()
        unknown = sorted(name for name in tensors if name not in own)
        if unknown:
            raise ValueError(f"the model has no tensors named {unknown[:5]} ({len(unknown)} unknown)")
        wrong = [name for name, value in tensors.items() if tuple(value.shape) != tuple(own[name].shape)]
        if wrong:
            name = wrong[0]
            raise ValueError(f"{name}: shape {tuple(tensors[name].shape)}, the model's is {tuple(own[name].shape)}")
        with torch.no_grad():
            for name, value in tensors.items():
                own[name].copy_(value)
        return len(tensors)

    def finish_weight_update(self) -> None:
        """Nothing to finish."""

    def reset_prefix_cache(self) -> None:
        """No cache outlives a request."""


def pick_token(logits: torch.Tensor, generator: torch.Generator, sampling: Sampling) -> int:
    """The next token from one row's logits: greedy at temperature 0, else drawn after top-k, then top-p filtering."""
    import torch

    temperature, top_p, top_k = sampling.temperature, sampling.top_p, sampling.top_k
    if temperature == 0:
        return int(logits.argmax())
    logits = logits / temperature
    if 0 < top_k < logits.shape[-1]:
        logits = logits.masked_fill(logits < torch.topk(logits, top_k).values[-1], float("-inf"))
    if top_p < 1.0:
        ordered, order = torch.sort(logits, descending=True)
        before = ordered.softmax(-1).cumsum(-1) - ordered.softmax(-1)  # the mass ranked above each token
        logits[order[before >= top_p]] = float("-inf")  # the most likely token always stays (its mass above: 0)
    return int(torch.multinomial(logits.softmax(-1), 1, generator=generator))


def transformers_version() -> tuple[int, int]:
    """transformers' major and minor version."""
    import transformers

    major, minor = transformers.__version__.split(".")[:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


def worker_extension() -> str:
    """The qualified name of the vLLM worker extension that loads weights (``vllm_worker.WeightLoader``): under
    honing's package when this runs as one, else as a top-level module whose folder the workers get on their
    ``PYTHONPATH``."""
    if __package__:
        return f"{__package__}.vllm_worker.WeightLoader"
    here = os.path.dirname(os.path.abspath(__file__))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)
    if here not in sys.path:
        sys.path.append(here)
    return "vllm_worker.WeightLoader"


class VLLMEngine:
    """``vllm.LLM`` over the model folder: prompts as token ids, one ``SamplingParams`` per prompt with its seed,
    weights loaded through the model's own ``load_weights`` on every worker (``collective_rpc`` into
    ``vllm_worker.WeightLoader``, so tensor-parallel workers each take their shard)."""

    name = "vllm"

    def __init__(
        self,
        model: str,
        *,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.9,
        dtype: str = "auto",
        max_model_len: int | None = None,
        enforce_eager: bool = False,
    ):
        # spawned workers: the server may have touched CUDA (the engine choice) before vLLM starts them
        os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
        from vllm import LLM

        self.llm = LLM(
            model=model,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization,
            dtype=dtype,
            max_model_len=max_model_len,
            enforce_eager=enforce_eager,
            # a group's G completions share their prompt: its keys and values are computed once
            enable_prefix_caching=True,
            worker_extension_cls=worker_extension(),
        )
        model_config = getattr(getattr(self.llm, "llm_engine", None), "model_config", None)
        dtype_value = getattr(model_config, "dtype", None)
        self.dtype = str(dtype_value).removeprefix("torch.") if dtype_value is not None else None

    def generate(self, prompts: list[list[int]], seeds: list[int], sampling: Sampling) -> list[list[int]]:
        """One completion per prompt (see the class)."""
        from vllm import SamplingParams

        params = [
            SamplingParams(
                n=1,
                seed=seed,
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                top_k=sampling.top_k,  # 0: no top-k filtering, as honing's
                max_tokens=sampling.max_tokens,
                stop_token_ids=list(sampling.stop_token_ids),
                ignore_eos=True,  # honing's stop tokens alone end a completion (they hold the tokenizer's EOS)
            )
            for seed in seeds
        ]
        outputs = self.llm.generate([{"prompt_token_ids": p} for p in prompts], sampling_params=params, use_tqdm=False)
        return [list(output.outputs[0].token_ids) for output in outputs]

    def begin_weight_update(self) -> None:
        """Tell every worker an update starts."""
        self.llm.collective_rpc("honing_begin_weight_update")

    def load_weights(self, blob: bytes) -> int:
        """Every worker reads the blob and loads its tensors through the model's ``load_weights``."""
        counts = self.llm.collective_rpc("honing_load_weights", args=(blob,))
        return int(counts[0])

    def finish_weight_update(self) -> None:
        """Tell every worker the update is complete."""
        self.llm.collective_rpc("honing_finish_weight_update")

    def reset_prefix_cache(self) -> None:
        """Cached prefixes hold keys and values computed with the old weights."""
        self.llm.reset_prefix_cache()


#: either engine: the server calls only what both have
Engine = TransformersEngine | VLLMEngine
