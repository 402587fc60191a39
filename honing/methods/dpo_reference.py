"""DPO's precomputed reference (``dpo.reference: precompute``): the initial model's log-probs of every pair, computed
once before training (with a progress line) and cached on disk, keyed by the weights, the pairs' token ids and the
precision; and the folder of the lazy reference's per-row cache (``reference: lazy``), keyed by the same weights."""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import torch

from honing.cache import atomic_write, content_hash
from honing.distributed import get_rank, get_world_size, is_rank0, print0
from honing.methods.dpo import compute_reference_logps
from honing.models import unwrap_model
from honing.models.quantize import plain_parts
from honing.train.precision import autocast as precision_autocast


class PrecomputedReference:
    """Scores a ``PairDataset`` with ``model`` as it is before training (every rank scores every pair in the same
    order: under FSDP2 each forward is collective anyway); ``sharded``: the model is FSDP2-sharded."""

    def __init__(
        self,
        model: torch.nn.Module,
        collator: Any,
        *,
        device: torch.device,
        precision: str,
        attention: str,
        batch_size: int,
        chunked: bool,
        packed: bool,
        sharded: bool,
        cache_dir: str,
        ld_alpha: float | None = None,
    ):
        self.model, self.collator, self.device, self.precision = model, collator, device, precision
        self.attention, self.batch_size, self.chunked, self.packed = attention, batch_size, chunked, packed
        self.sharded, self.cache_dir, self.ld_alpha = sharded, cache_dir, ld_alpha

    def attach(self, dataset: Any) -> None:
        """Give ``dataset`` its reference log-probs (``PairDataset.with_reference``)."""
        dataset.with_reference(*self.logps(dataset))

    def logps(self, dataset: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """The chosen and rejected log-probs of every pair, from the cache when the same model and data were scored
        before, else computed and cached."""
        path = os.path.join(self.cache_dir, "dpo_reference", f"{self.key(dataset)}.pt")
        if os.path.exists(path):
            cached = torch.load(path, weights_only=True)
            print0(f"reference log-probs of {len(dataset):,} pairs read from {path}")
            return cached["chosen"], cached["rejected"]
        size = self.batch_size
        print0(
            f"scoring the reference log-probs of {len(dataset):,} pairs before the first step (reference: precompute; "
            "lazy scores each pair as a batch first needs it)"
        )
        batches = with_progress(
            (
                self.collator([dataset[i] for i in range(start, min(start + size, len(dataset)))])
                for start in range(0, len(dataset), size)
            ),
            total=len(dataset),
        )
        chosen, rejected = compute_reference_logps(
            self.model,
            batches,
            collator=self.collator,
            device=self.device,
            autocast=self.autocast,
            chunked=self.chunked,
            packed=self.packed,
            ld_alpha=self.ld_alpha,
        )
        if is_rank0() or self.sharded:
            atomic_write(path, lambda handle: torch.save({"chosen": chosen, "rejected": rejected}, handle))
        print0(f"reference log-probs of {len(dataset):,} pairs computed and cached in {path}")
        return chosen, rejected

    def key(self, dataset: Any) -> str:
        """A content hash of the model's weights (this rank's shard under FSDP2), the pairs' token ids, the
        precision and LD-DPO's ``ld_alpha``."""

        def parts() -> Iterator[str | bytes]:
            yield f"dpo-reference-v1|{self.precision}|{self.attention}"
            if self.ld_alpha is not None:  # LD-DPO's log-probs are other numbers (unset: the keys as before)
                yield f"ld_alpha={self.ld_alpha!r}"
            yield from weight_parts(self.model, sharded=self.sharded)
            for pair in dataset.pairs:
                for ids in (pair.prompt_ids, pair.chosen_ids, pair.rejected_ids):
                    yield np.asarray(ids, dtype=np.int64).tobytes()

        return content_hash(parts())

    def autocast(self) -> Any:
        """The mixed precision's autocast (bf16 or float16), as the training step runs."""
        return precision_autocast(self.precision, self.device.type)


def weight_parts(model: torch.nn.Module, *, sharded: bool) -> Iterator[str | bytes]:
    """What identifies the model's weights in a cache key: each tensor's name and bytes (this rank's shard under
    FSDP2, with the rank; a quantized weight's codes and scales)."""
    if sharded:
        yield f"rank {get_rank()} of {get_world_size()}"
    for name, tensor in unwrap_model(model).state_dict().items():
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        yield name
        for part in plain_parts(local):  # a quantized (QLoRA) weight: its codes and scales
            yield part.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes()


def lazy_cache_folder(model: torch.nn.Module, *, cache_dir: str, settings: str, sharded: bool) -> str:
    """The lazy reference's per-row cache of ``model`` as built (the initial weights) under ``settings`` (precision,
    attention, packing: what a row's log-probs depend on besides its tokens)."""
    key = content_hash(itertools.chain([f"lazy-reference-v1|{settings}"], weight_parts(model, sharded=sharded)))
    return os.path.join(cache_dir, "dpo_reference", f"lazy-{key}")


def with_progress(batches: Iterable[dict[str, Any]], *, total: int, every: float = 10.0) -> Iterator[dict[str, Any]]:
    """``batches`` as they are scored, with a line every ``every`` seconds: pairs done of ``total``, time left."""
    started = last = time.monotonic()
    done = 0
    for batch in batches:
        yield batch
        done += len(batch["input_ids"])
        now = time.monotonic()
        if now - last >= every and done < total:
            last = now
            elapsed = now - started
            left = elapsed / done * (total - done)
            print0(f"  reference log-probs: {done:,} of {total:,} pairs, {elapsed:.0f} s, about {left:.0f} s left")
