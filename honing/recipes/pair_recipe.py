"""The steps the pair methods' recipes share (DPO, KTO, ORPO, CPO / SimPO, reward): the chat tokenizer, the method's
section and whether its pairs are packed, pair batches behind the attention check, and, for a section with a
``reference`` key (DPO's, KTO's), the reference: a frozen copy, log-probs precomputed before training or cached as
batches need them."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

import torch

from honing.config import RunConfig
from honing.data.finetune_data import RunData
from honing.methods.pair_losses import PairLoss
from honing.methods.pairs import PairTrainModule
from honing.recipes.base import Recipe, chat_assets, finetune_data, train_module_options
from honing.recipes.pair_parts import PairSection, check_pair_attention, packed_pairs
from honing.recipes.reference_parts import build_reference_model, lazy_reference_cache, precomputed_reference
from honing.run.parts import ModelAssets, TrainInputs

#: a pair method's loss part
Loss = TypeVar("Loss", bound=PairLoss)


class PairRecipe(Recipe):
    """A pair method's recipe over its ``section``; the method's own adds its row kind and loss part."""

    #: the pair step this method trains (KTO's and the reward model's are their own, DPO's builds its loss itself)
    train_module_class: type[PairTrainModule] = PairTrainModule
    #: the method's loss part, built from its section's keys of the same names (``build_pair_loss``)
    loss_class: type[PairLoss] | None = None

    def __init__(self, config: RunConfig, section: PairSection):
        super().__init__(config)
        self.section = section
        self.packed_pairs = packed_pairs(config, section)
        #: the section's ``reference`` (copy, adapters_off, precompute, lazy); None for a method without one
        self.reference: str | None = getattr(section, "reference", None)

    def model_assets(self) -> ModelAssets:
        """A byte-level or pretrained tokenizer with the run's chat template."""
        return chat_assets(self.config)

    def build_reference_model(self, model: torch.nn.Module, assets: ModelAssets) -> torch.nn.Module | None:
        """A frozen copy of the initial model for ``reference: copy`` (and ``lazy`` without LoRA), sharded like the
        policy under FSDP2; none for ``adapters_off``, ``precompute`` and the methods without a reference."""
        if self.reference is None:
            return None
        return build_reference_model(model, self.reference, self.config, self.placement)

    def build_data(self, assets: ModelAssets, model: torch.nn.Module | None = None) -> RunData:
        """Pair batches (a flash kernel, which cannot take the pairs' mask, is refused first); with ``reference:
        precompute``, each dataset scored by the initial ``model`` first (none in ``honing data``)."""
        attention = check_pair_attention(self.models.attention_name())
        kind = self.row_kind(assets)
        reference = None
        if self.reference == "precompute":  # what attaches the initial model's log-probs to a dataset
            reference = precomputed_reference(
                model,
                kind.collator,  # type: ignore[attr-defined]  # the pair row kinds' collator
                self.config,
                self.placement,
                cache_dir=self.cache_dir,
                attention=attention,
                packed=self.packed_pairs,
                ld_alpha=getattr(self.section, "ld_alpha", None),  # DPO's LD-DPO log-probs
            )
        finish = reference.attach if reference else None
        return finetune_data(kind, self.config, self.parallel_dims, self.cache_dir, finish=finish)

    def build_pair_loss(self) -> PairLoss:
        """The method's loss part from its section (a hook: return another ``PairLoss`` to train with it)."""
        assert self.loss_class is not None, f"{type(self).__name__} names no loss_class"
        return loss_from_section(self.loss_class, self.section)

    def loss_options(self) -> dict[str, Any]:
        """What the pair step takes for its loss: the part ``build_pair_loss`` makes."""
        return {"loss": self.build_pair_loss()}

    def build_train_module(self, inputs: TrainInputs) -> PairTrainModule:
        """The method's pair step with its loss, the run's reference (a section with a ``reference`` key: a frozen
        copy, the adapters-off model, precomputed log-probs, or the per-row store of ``reference: lazy``)."""
        optimizer = self.build_optimizer(inputs.model)
        loss = self.loss_options()
        reference: dict[str, Any] = {}
        if self.reference is not None:
            cache = lazy_reference_cache(
                inputs.model,
                self.reference,
                self.config,
                precision=self.precision,
                attention=self.models.attention_name(),
                cache_dir=self.cache_dir,
                packed=self.packed_pairs,
                ld_alpha=getattr(self.section, "ld_alpha", None),
            )
            reference = {
                "reference": self.reference,
                "reference_model": inputs.reference_model,
                "reference_cache": cache,
            }
        return self.train_module_class(
            inputs.model,
            optimizer,
            **loss,
            **reference,
            packed_pairs=self.packed_pairs,
            **train_module_options(self.config, self.placement, inputs.data.collator),
        )


def loss_from_section(loss_class: type[Loss], section: object) -> Loss:
    """The loss part ``loss_class`` (a dataclass) with each of its fields read from the section's key of that name
    (``kto.beta`` -> ``KTOLoss.beta``)."""
    fields = [field.name for field in dataclasses.fields(loss_class) if field.init]  # type: ignore[arg-type]
    return loss_class(**{name: getattr(section, name) for name in fields})
