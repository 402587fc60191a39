"""DPO: preference pairs in, the policy trained to prefer the chosen completion against a frozen reference.

Parts: a chat tokenizer, the preference row kind (``honing.data.preference.preference_rows.PreferenceRows``), the
reference (a frozen copy, the adapters-off policy, or log-probs precomputed by
``honing.methods.dpo_reference.PrecomputedReference``), the DPO train module.
"""

from __future__ import annotations

from typing import Any

import torch

from honing.config.schema import DPOSection
from honing.data.finetune_data import RunData, build_finetune_data
from honing.data.preference.batches import PairCollator
from honing.data.preference.preference_rows import PreferenceRows
from honing.distributed import get_world_size, print0
from honing.errors import ConfigError
from honing.methods.dpo import DPOTrainModule
from honing.methods.dpo_reference import PrecomputedReference
from honing.models import is_lora, unwrap_model
from honing.models.attention_choice import is_flash
from honing.models.parallel import parallelize_from, resolve_strategy
from honing.models.quantize import frozen_copy
from honing.recipes.base import Recipe, micro_batch_size, train_module_options, use_chat_tokenizer


class DPORecipe(Recipe):
    """Pairs → chat template (prompt with the generation prompt, completions the rest) → padded pair batches →
    DPO loss against a frozen copy, the adapters-off model, or precomputed reference log-probs."""

    def __init__(self, config: Any):
        super().__init__(config)
        self.dpo = config.dpo or DPOSection()  # its defaults when absent
        self.packed_pairs = self.dpo.packed_pairs
        if self.packed_pairs and config.parallel.compile:  # its per-pair loop would recompile every step
            print0("dpo.packed_pairs is off under parallel.compile: padded rows with a dense 4D mask")
            self.packed_pairs = False

    def build_model_assets(self) -> list[Any]:
        """A byte-level or pretrained tokenizer with the run's chat template."""
        return use_chat_tokenizer(self)

    def build_reference_model(self, model: torch.nn.Module) -> torch.nn.Module | None:
        """A frozen copy of the initial model for ``dpo.reference: copy``, sharded like the policy under FSDP2 (none
        for ``adapters_off`` and ``precompute``)."""
        trainer = self.config.trainer
        if trainer.load_path and not trainer.load_trainer_state:
            # the reference is the model as built here; weights loaded later by the trainer would not be in it
            raise ConfigError(
                "trainer.load_path with load_trainer_state: false (a warm start) would train DPO against a "
                "reference other than its starting weights; start from an export instead (model.name_or_path: "
                "SAVE_FOLDER/hf)"
            )
        reference = self.dpo.reference
        if reference == "adapters_off" and not is_lora(model):
            raise ConfigError("dpo.reference: 'adapters_off' needs model.lora (LoRA); use copy or precompute")
        if reference != "copy":
            return None
        copy = frozen_copy(unwrap_model(model)).eval().requires_grad_(False)
        if resolve_strategy(self.config.parallel.strategy, get_world_size()) != "fsdp":  # DDP: no wrapper needed
            return copy
        return parallelize_from(
            copy,
            self.config.parallel,
            dims=self.parallel_dims,
            device=self.device,
            precision=self.precision,
            frozen=True,
        )

    def row_kind(self) -> PreferenceRows:
        """Preference pairs through the chat template, batched by the pair collator."""
        collator = PairCollator(self.tokenizer.pad_token_id, additive_mask=self.models.attention_name() == "eager")
        return PreferenceRows(
            self.tokenizer,
            self.chat_template,
            self.config.data,
            cache_dir=self.cache_dir,
            collator=collator,
            printer=print0,
        )

    def build_data(self) -> RunData:
        """Pair batches; with ``dpo.reference: precompute``, each dataset scored by the initial model first."""
        attention = self.models.attention_name()
        if is_flash(attention):
            raise ConfigError(
                f"model.attn_implementation: {attention!r} cannot take the 4D attention mask through which a pair's "
                "two replies share its prompt; use sdpa (or eager)"
            )
        kind = self.row_kind()
        reference = None
        if self.dpo.reference == "precompute" and self.model is not None:  # `honing data` builds no model
            reference = PrecomputedReference(
                self.model,
                kind.collator,
                device=self.device,
                precision=self.precision,
                attention=attention,
                batch_size=micro_batch_size(self.config, self.parallel_dims),
                chunked=self.config.model.chunked_loss,
                packed=self.packed_pairs,
                sharded=resolve_strategy(self.config.parallel.strategy, get_world_size()) == "fsdp",
                cache_dir=self.cache_dir,
            )
        return build_finetune_data(
            kind, self.config.data, self.data_placement(), finish=reference.attach if reference else None
        )

    def build_train_module(self) -> DPOTrainModule:
        """The DPO TrainModule with the run's ``dpo`` settings and reference."""
        cfg = self.dpo
        return DPOTrainModule(
            self.model,
            self.build_optimizer(self.model),
            beta=cfg.beta,
            loss_type=cfg.loss_type,
            label_smoothing=cfg.label_smoothing,
            rpo_alpha=cfg.rpo_alpha,
            reference=cfg.reference,
            reference_model=self.reference_model,
            packed_pairs=self.packed_pairs,
            **train_module_options(self),
        )

    def held_out_answers(self) -> list[tuple[list[dict[str, Any]], str]]:
        """The validation prompts with their chosen reply's text (the answer the generation eval expects)."""
        from honing.data.preference.pairs import load_pairs
        from honing.data.text.corpus import split_documents

        data, seed, kind = self.config.data, self.config.trainer.seed, self.row_kind()
        if data.validation is not None:
            pairs = load_pairs(kind.source_fields(data.validation.sources), seed=seed, bad_rows=data.bad_rows).pairs
        elif data.validation_split > 0:
            loaded = load_pairs(kind.source_fields(data.train.sources), seed=seed, bad_rows=data.bad_rows)
            held_out = split_documents(list(zip(loaded.pairs, loaded.origins)), data.validation_split, seed=seed)[1]
            pairs = [pair for pair, _ in held_out]
        else:
            pairs = []
        return [(pair.prompt, pair.chosen[0]["content"]) for pair in pairs if len(pair.chosen) == 1]
