"""The reference of the methods that train against one (DPO, KTO): a frozen copy of the initial model, the LoRA
model with its adapters off, the initial model's log-probs precomputed once before training, or scored lazily as
batches first need them and cached per row (``<method>.reference``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from honing.distributed import get_rank, get_world_size, print0
from honing.errors import ConfigError
from honing.methods.dpo_reference import PrecomputedReference, lazy_cache_folder
from honing.methods.reference_cache import ReferenceCache
from honing.models import is_lora, unwrap_model
from honing.models.parallel import parallelize_from, resolve_strategy
from honing.models.quantize import frozen_copy
from honing.recipes.base import micro_batch_size
from honing.run.parts import Placement

if TYPE_CHECKING:
    from honing.config import RunConfig
    from honing.data.preference.batches import PairCollator
    from honing.data.preference.kto_rows import KTOCollator


def build_reference_model(
    model: torch.nn.Module, reference: str, config: RunConfig, placement: Placement
) -> torch.nn.Module | None:
    """A frozen copy of the initial model for ``reference: copy``, and for ``lazy`` without LoRA (which scores with
    the adapters off), sharded like the policy under FSDP2 (none for ``adapters_off`` and ``precompute``); a warm
    start and ``adapters_off`` without LoRA are refused in one line."""
    trainer, method = config.trainer, config.method
    if trainer.load_path and not trainer.load_trainer_state:
        # the reference is the model as built here; weights loaded later by the trainer would not be in it
        raise ConfigError(
            f"trainer.load_path with load_trainer_state: false (a warm start) would train {method.upper()} against "
            "a reference other than its starting weights; start from an export instead (model.name_or_path: "
            "SAVE_FOLDER/hf)"
        )
    if reference == "adapters_off" and not is_lora(model):
        raise ConfigError(f"{method}.reference: 'adapters_off' needs model.lora (LoRA); use copy or precompute")
    if reference == "lazy" and is_lora(model):
        return None  # the adapters-off policy is the initial model (its adapters start at zero): no copy needed
    if reference not in ("copy", "lazy"):
        return None
    copy = frozen_copy(unwrap_model(model)).eval().requires_grad_(False)
    return frozen_parallel(copy, config, placement)


def frozen_parallel(model: torch.nn.Module, config: RunConfig, placement: Placement) -> torch.nn.Module:
    """A frozen model sharded like the policy under FSDP2 (as it is under DDP, which needs no wrapper)."""
    if resolve_strategy(config.parallel.strategy, get_world_size()) != "fsdp":
        return model
    return parallelize_from(
        model,
        config.parallel,
        dims=placement.parallel_dims,
        device=placement.device,
        precision=placement.precision,
        frozen=True,
    )


def precomputed_reference(
    model: torch.nn.Module | None,
    collator: PairCollator | KTOCollator,
    config: RunConfig,
    placement: Placement,
    *,
    cache_dir: str,
    attention: str,
    packed: bool,
    ld_alpha: float | None = None,
) -> PrecomputedReference | None:
    """What scores each dataset with the initial ``model`` before training (``reference: precompute``; ``ld_alpha``:
    DPO's LD-DPO log-probs); None when no model is built (``honing data``)."""
    if model is None:
        return None
    return PrecomputedReference(
        model,
        collator,
        device=placement.device,
        precision=placement.precision,
        attention=attention,
        batch_size=micro_batch_size(config, placement.parallel_dims),
        chunked=config.model.chunked_loss,
        packed=packed,
        sharded=resolve_strategy(config.parallel.strategy, get_world_size()) == "fsdp",
        cache_dir=cache_dir,
        ld_alpha=ld_alpha,
    )


def lazy_reference_cache(
    model: torch.nn.Module,
    reference: str,
    config: RunConfig,
    *,
    precision: str,
    attention: str,
    cache_dir: str,
    packed: bool,
    ld_alpha: float | None = None,
) -> ReferenceCache | None:
    """The per-row store of ``reference: lazy`` (None for the other references), on disk under the cache folder,
    keyed by the initial weights and what a row's log-probs depend on besides its tokens (precision, attention,
    packing, the chunked head, DPO's ``ld_alpha``)."""
    if reference != "lazy":
        return None
    sharded = resolve_strategy(config.parallel.strategy, get_world_size()) == "fsdp"
    settings = f"{precision}|{attention}|packed={packed}|chunked={config.model.chunked_loss}"
    if ld_alpha is not None:  # LD-DPO's log-probs are other numbers (unset: the folders as before)
        settings += f"|ld_alpha={ld_alpha!r}"
    folder = lazy_cache_folder(model, cache_dir=cache_dir, settings=settings, sharded=sharded)
    cache = ReferenceCache(folder, rank=get_rank())
    if len(cache):
        print0(
            f"reference log-probs of {len(cache):,} rows read from {folder}; the others are scored as batches need them"
        )
    return cache
