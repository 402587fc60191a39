"""honing's side of the rollout server (``honing.rollout.serve``): GRPO's completions sampled by the server, the
policy's weights sent to it whenever they changed since it last had them.

``RolloutClient.sample`` takes and returns what ``honing.models.generation.sample_completions`` does (left-padded
prompts in; completions right-padded with the pad id, masked in up to and including their stop token out), so
GRPO's train module calls one or the other. Before sampling, the client sends the weights if the step moved on or
a trainable tensor was written since the last send (an evaluation after the step's optimizer update sees the
updated weights): the full state dict under Hugging Face checkpoint names, LoRA merged into its base weights,
a sharded model gathered tensor by tensor (every rank takes part; rank 0 sends). Every rank then sends its own
prompts, naming the weights version it expects.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import torch

from honing.data.collate import padded_rows
from honing.distributed import barrier, is_rank0, ranks_where
from honing.errors import ConfigError
from honing.export.streamed import StreamedExport
from honing.models.wrappers import unwrap_model
from honing.rollout.serve import SERVER_NAME

log = logging.getLogger(__name__)

CHUNK_BYTES = 128 * 2**20  # one /update_weights request: a 0.5B model in bf16 goes in 8
GENERATE_TIMEOUT_S = 3600.0  # a long rollout batch on a slow engine still answers within it


class RolloutServerError(RuntimeError):
    """The rollout server refused a request or could not be reached during the run."""


class RolloutClient:
    """Samples completions from the rollout server at ``base_url`` and keeps its weights those of the policy."""

    def __init__(self, base_url: str, *, chunk_bytes: int = CHUNK_BYTES, request_timeout: float = GENERATE_TIMEOUT_S):
        self.base_url = base_url.rstrip("/")
        self.chunk_bytes = chunk_bytes
        self.request_timeout = request_timeout
        self.synced: tuple[int, int] | None = None  # (step, weights fingerprint) of the last send
        self.weights_version: int | None = None  # the server's version after our last send
        self.dtype: torch.dtype | None = None  # the engine's weights dtype (floating tensors are sent in it)

    @classmethod
    def connect(cls, base_url: str, *, timeout: float, key: str = "grpo.vllm_server_base_url") -> RolloutClient:
        """A client of the server at ``base_url`` once its ``/health`` answers; a ``ConfigError`` naming ``key`` and
        the URL when it does not within ``timeout`` seconds."""
        client = cls.wait_for(base_url, timeout=timeout)
        if client is None:
            raise ConfigError(
                f"{key}: no rollout server answers at {base_url.rstrip('/')} within {timeout:g} s; start one on a "
                "CUDA machine (make vllm-serve MODEL=... PORT=...; docs/rollout-server.md) or set use_vllm: false"
            )
        return client

    @classmethod
    def wait_for(cls, base_url: str, *, timeout: float, attempt_timeout: float = 5.0) -> RolloutClient | None:
        """A client of the server at ``base_url`` once its ``/health`` answers (asked every second for ``timeout``
        seconds; once when ``timeout`` is under a second); None when it never does."""
        client = cls(base_url)
        deadline = time.monotonic() + timeout
        while True:
            health = client.health(timeout=attempt_timeout)
            if health is not None:
                client.dtype = getattr(torch, str(health.get("dtype")), None)
                return client
            if time.monotonic() + 1.0 > deadline:
                return None
            time.sleep(1.0)

    def health(self, timeout: float = 5.0) -> dict[str, Any] | None:
        """The server's ``/health`` answer; None when nothing answers there, or something that is not this server."""
        try:
            with urllib.request.urlopen(f"{self.base_url}/health", timeout=timeout) as response:
                answer = json.loads(response.read())
        except (OSError, ValueError):  # refused, timed out, not HTTP, not JSON
            return None
        return answer if isinstance(answer, dict) and answer.get("server") == SERVER_NAME else None

    def sample(
        self,
        model: torch.nn.Module,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        *,
        step: int,
        max_new_tokens: int,
        stop_token_ids: list[int],
        pad_token_id: int,
        seeds: list[int],
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        **unknown: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(completion_ids, completion_mask)`` for the left-padded prompts, as ``sample_completions`` returns them,
        sampled by the server after it was sent ``model``'s weights (when they changed)."""
        if unknown:
            raise ValueError(
                f"RolloutClient.sample: {sorted(unknown)} cannot go to the rollout server, which samples from token "
                "ids alone (no pixel inputs, no custom decoder); leave use_vllm false for this run"
            )
        self.sync_weights(model, step)
        rows = [ids[mask.bool()].tolist() for ids, mask in zip(prompt_ids.cpu(), prompt_mask.cpu())]
        request = dict(prompts=rows, seeds=[int(seed) for seed in seeds], temperature=float(temperature))
        request.update(top_p=float(top_p), top_k=int(top_k), max_tokens=int(max_new_tokens))
        request.update(stop_token_ids=[int(t) for t in stop_token_ids], weights_version=self.weights_version)
        answer = self.post("/generate", json.dumps(request).encode(), "application/json")
        return padded_completions(answer["completions"], pad_token_id, prompt_ids.device)

    def sync_weights(self, model: torch.nn.Module, step: int) -> None:
        """Send ``model``'s weights unless the server has them: same step, no trainable tensor written since."""
        state = (int(step), weights_fingerprint(model))
        if not ranks_where(state != self.synced):  # every rank takes the same branch: the gathers are collectives
            return
        started, sent = time.perf_counter(), 0
        sending = is_rank0()
        answer: dict[str, Any] = {}
        for first, last, blob in flagged(weight_chunks(model, self.chunk_bytes, sending=sending, dtype=self.dtype)):
            answer = self.post(f"/update_weights?first={int(first)}&last={int(last)}", blob, "application/octet-stream")
            sent += len(blob)
        barrier()  # no rank samples before the server holds the new weights
        if sending:
            self.weights_version = int(answer["weights_version"])
            seconds = time.perf_counter() - started
            level = logging.INFO if self.synced is None else logging.DEBUG  # the cost is said once, at the first
            message = "rollout server: weights version %d sent (%.0f MB in %.2f s)"
            log.log(level, message, self.weights_version, sent / 1e6, seconds)
        else:
            self.weights_version = int(self.get("/weights_version")["weights_version"])
        self.synced = state

    def get(self, path: str) -> dict[str, Any]:
        """GET ``path``'s JSON answer."""
        return self.request(urllib.request.Request(f"{self.base_url}{path}"))

    def post(self, path: str, body: bytes, content_type: str) -> dict[str, Any]:
        """POST ``body`` to ``path``; its JSON answer."""
        headers = {"Content-Type": content_type}
        return self.request(urllib.request.Request(f"{self.base_url}{path}", data=body, headers=headers))

    def request(self, request: urllib.request.Request) -> dict[str, Any]:
        """The JSON answer; a ``RolloutServerError`` with the server's own reason when it refuses."""
        try:
            with urllib.request.urlopen(request, timeout=self.request_timeout) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as error:
            try:
                reason = json.loads(error.read()).get("error", "")
            except ValueError:
                reason = ""
            raise RolloutServerError(f"rollout server {self.base_url}: {error.code} {reason}".rstrip()) from error
        except OSError as error:
            raise RolloutServerError(f"rollout server {self.base_url} did not answer: {error}") from error


def weights_fingerprint(model: torch.nn.Module) -> int:
    """A number that changes whenever a trainable tensor is written in place (an optimizer step, a checkpoint
    load): the sum of their version counters (a sharded tensor's local shard's)."""
    total = 0
    for param in unwrap_model(model).parameters():
        if param.requires_grad:
            total += getattr(param, "_local_tensor", param)._version
    return total


def weight_chunks(
    model: torch.nn.Module, max_bytes: int, *, sending: bool = True, dtype: torch.dtype | None = None
) -> Iterator[bytes]:
    """``model``'s weights as checkpoint-named tensors (LoRA merged, shards gathered), as safetensors files of about
    ``max_bytes`` each; floating tensors in ``dtype`` when given. Every rank of a sharded model must iterate; only
    ``sending`` ranks get chunks."""
    from safetensors.torch import save

    chunk: dict[str, torch.Tensor] = {}
    size = 0
    for name, tensor in StreamedExport(model).tensors(on_gathered=lambda: sending):
        tensor = tensor.detach()
        if dtype is not None and tensor.is_floating_point():
            tensor = tensor.to(dtype)
        tensor = tensor.cpu().contiguous()
        if chunk and size + tensor.nbytes > max_bytes:
            yield save(chunk)
            chunk, size = {}, 0
        chunk[name] = tensor
        size += tensor.nbytes
    if chunk:
        yield save(chunk)


def flagged(chunks: Iterator[bytes]) -> Iterator[tuple[bool, bool, bytes]]:
    """``(first, last, chunk)`` for each chunk: one is held back until the next shows it was not the last."""
    held, first = None, True
    for chunk in chunks:
        if held is not None:
            yield first, False, held
            first = False
        held = chunk
    if held is not None:
        yield first, True, held


def padded_completions(
    completions: list[list[int]], pad_token_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Completions as right-padded ids and their mask (1 on real tokens), as wide as the longest."""
    ids, mask = padded_rows(completions, pad_token_id)
    return ids.to(device), mask.to(device)
