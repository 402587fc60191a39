"""DPO: preference pairs in, the policy trained to prefer the chosen completion against a frozen reference."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from honing.cache import atomic_write, content_hash
from honing.config.schema import DPOSection
from honing.data.eval_batches import EvalBatches
from honing.data.finetune_rows import BadRowReport
from honing.data.generated.preferences import is_generated_preference, materialize
from honing.data.loader import DataLoader
from honing.data.preference.batches import PairCollator, PairDataset, TokenizedPair, fit_pair, tokenize_pair
from honing.data.preference.pairs import load_pairs, read_pair_sources
from honing.data.prepared_rows import REJECTED
from honing.data.report import DataReport
from honing.data.text.corpus import split_documents
from honing.distributed import get_rank, get_world_size, is_rank0
from honing.errors import ConfigError, DataError
from honing.methods.dpo import DPOTrainModule, compute_reference_logps
from honing.models import is_lora, unwrap_model
from honing.models.attention_choice import is_flash
from honing.models.parallel import parallelize, resolve_strategy
from honing.models.quantize import frozen_copy, plain_parts
from honing.recipes.row_data import split_rows
from honing.recipes.sft import SFTRecipe
from honing.recipes.validation_sources import validation_batches

log = logging.getLogger(__name__)


class DPORecipe(SFTRecipe):
    """Pairs → chat template (prompt with the generation prompt, completions the rest) → padded pair batches →
    DPO loss against a frozen copy, the adapters-off model, or precomputed reference log-probs."""

    @property
    def dpo(self) -> DPOSection:
        """The run's ``dpo`` section (its defaults when absent)."""
        return self.config.dpo or DPOSection()

    # --- model assets -----------------------------------------------------------------
    def build_parallel(self, model: torch.nn.Module) -> torch.nn.Module:
        """Keep a frozen copy of the initial model for ``dpo.reference: copy``, then parallelise the policy."""
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
        if reference == "copy":
            self._reference_copy = frozen_copy(unwrap_model(model)).eval().requires_grad_(False)
        return super().build_parallel(model)

    def build_reference_model(self) -> torch.nn.Module | None:
        """The frozen copy, sharded like the policy under FSDP2 (none for ``adapters_off`` and ``precompute``)."""
        reference = getattr(self, "_reference_copy", None)
        if reference is None:
            return None
        del self._reference_copy
        cfg = self.config.parallel
        if resolve_strategy(cfg.strategy, get_world_size()) == "fsdp":  # DDP: a frozen copy needs no wrapper
            reference = parallelize(
                reference,
                strategy="fsdp",
                dims=self.parallel_dims,
                device=self.device,
                reshard_after_forward=cfg.reshard_after_forward,
                mixed_precision=cfg.mixed_precision,
                precision=self.precision,
            )
        return reference

    # --- data -------------------------------------------------------------------------
    def _pair_sources(self, sources: list[Any]) -> list[dict[str, Any]]:
        return self._sources(
            sources, generated=is_generated_preference, write_generated=materialize, generated_format="preference"
        )

    def source_list(self, sources: list[Any]) -> list[dict[str, Any]]:
        """The sources' fields, generated preference tasks written to the cache."""
        return self._pair_sources(sources)

    def examples(self) -> tuple[list[Any], list[Any]]:
        """Training and validation pairs with their origins (validation: its own sources or a held-out split)."""
        if not hasattr(self, "_examples"):
            data, seed = self.config.data, self.config.trainer.seed
            self.bad_row_reports = {}
            loaded = load_pairs(self._pair_sources(data.train.sources), seed=seed, bad_rows=data.bad_rows)
            self.bad_row_reports["train"] = loaded.report
            train = list(zip(loaded.pairs, loaded.origins))
            if data.validation is not None:
                held_out = load_pairs(self._pair_sources(data.validation.sources), seed=seed, bad_rows=data.bad_rows)
                self.bad_row_reports["validation"] = held_out.report
                validation = list(zip(held_out.pairs, held_out.origins))
            elif data.validation_split > 0:
                train, validation = split_documents(train, data.validation_split, seed=seed)
            else:
                validation = []
            self._examples = (train, validation)
        return self._examples

    row_method = "dpo"

    def row_settings(self) -> dict[str, Any]:
        """The tokenizer, the chat template and the bad-row policy (DPO has no label policy)."""
        settings = super().row_settings()
        del settings["train_on"]
        return settings

    def row_cut(self) -> None:
        """Pairs are stored whole: ``data.overlong`` cuts a prompt from its left and the replies from their right,
        from the whole pair's lengths, when the rows are used."""
        return None

    def read_items(self, fields: list[dict[str, Any]]) -> tuple[list[list[tuple[Any, str]]], BadRowReport]:
        """Each source's preference pairs and origins in file order, and the bad rows skipped while reading."""
        return read_pair_sources(fields, bad_rows=self.config.data.bad_rows)

    def build_row(self, pair: Any) -> dict[str, Any]:
        """A pair's prompt, chosen and rejected token ids (DataError: rejected)."""
        item = tokenize_pair(self.tokenizer, pair, chat_template=self.chat_template)
        return {"prompt_ids": item.prompt_ids, "chosen_ids": item.chosen_ids, "rejected_ids": item.rejected_ids}

    def tokenize_rows(self, table: Any, indices: Sequence[int], split: str) -> list[Any]:
        """The pairs ``indices`` of ``table`` fitted to ``data.seq_len`` (``data.overlong``); bad rows, those skipped
        while reading included, counted in the data report."""
        data = self.config.data
        report, tokenized = DataReport(), []
        # rows skipped while reading count for the split read from those sources (not for a held-out part)
        if (split == "train" or data.validation is not None) and table.skipped.count:
            report.rejected, report.reasons = table.skipped.count, list(table.skipped.first_reasons)
        for index in indices:
            row = table.row(index)
            if row["status"] == REJECTED:
                if data.bad_rows == "fail":
                    raise DataError(f"{row['origin']}: {row['reason']}") from None
                report.reject(f"{row['origin']}: {row['reason']}")
                continue
            item = TokenizedPair(row["prompt_ids"], row["chosen_ids"], row["rejected_ids"])
            fitted = fit_pair(item, data.seq_len, data.overlong)
            if fitted is None:
                report.dropped += 1
                continue
            report.truncated += fitted is not item
            completions = len(fitted.chosen_ids) + len(fitted.rejected_ids)
            report.add(2 * len(fitted.prompt_ids) + completions, completions)
            tokenized.append(fitted)
        self.data_reports[split] = report
        self.print(report.summary(split).replace("examples", "pairs", 1))
        if not tokenized:
            raise DataError(f"no {split} pair is left to train on (see the data report above)")
        return tokenized

    def build_data(self) -> tuple[DataLoader, EvalBatches | None]:
        data = self.config.data
        attention = self.attention_name()
        if is_flash(attention):
            raise ConfigError(
                f"model.attn_implementation: {attention!r} cannot take the 4D attention mask through which a pair's "
                "two replies share its prompt; use sdpa (or eager)"
            )
        self.collator = PairCollator(self.tokenizer.pad_token_id, additive_mask=attention == "eager")
        report, splits = self.data_reports, split_rows(self)
        train = PairDataset(self.tokenize_rows(*splits["train"], "train"))
        report["train"].rows, report["train"].row_length = len(train), max(train.lengths)
        if self.dpo.reference == "precompute" and self.model is not None:  # `honing data` builds no model
            train.with_reference(*self.reference_logps(train))
        loader = DataLoader(
            train,
            global_batch_size=data.global_batch_size,
            collate_fn=self.collator,
            seed=self.config.trainer.seed,
            shuffle=data.shuffle,
            rank=self.parallel_dims.dp_rank,
            world_size=self.parallel_dims.dp_size,
            group_by_length=data.group_by_length,
            num_workers=self.config.data.num_workers,
        )
        if not splits.get("validation", (None, []))[1]:
            return loader, None
        batch_size = self.config.callbacks.evaluator.batch_size or self.micro_batch_size()

        def batches(part: tuple[Any, list[int]]) -> EvalBatches:
            validation = PairDataset(self.tokenize_rows(*part, "validation"))
            report["validation"].rows, report["validation"].row_length = len(validation), max(validation.lengths)
            if self.dpo.reference == "precompute" and self.model is not None:
                validation.with_reference(*self.reference_logps(validation))
            return EvalBatches(
                validation,
                batch_size=batch_size,
                collate_fn=self.collator,
                rank=self.parallel_dims.dp_rank,
                world_size=self.parallel_dims.dp_size,
            )

        return loader, validation_batches(self, splits["validation"], batches)

    # --- the precomputed reference ------------------------------------------------------
    def reference_logps(self, dataset: PairDataset) -> tuple[torch.Tensor, torch.Tensor]:
        """The initial model's log-probs of every pair, from the cache when the same model and data were scored
        before (keyed by a hash of the weights, the token ids and the precision), else computed and cached."""
        path = os.path.join(self.cache_dir(), "dpo_reference", f"{self.reference_key(dataset)}.pt")
        if os.path.exists(path):
            cached = torch.load(path, weights_only=True)
            self.print(f"reference log-probs of {len(dataset):,} pairs read from {path}")
            return cached["chosen"], cached["rejected"]
        batch_size = self.micro_batch_size()
        # Every rank scores every pair in the same order: under FSDP2 each forward is collective anyway.
        batches = (
            self.collator([dataset[i] for i in range(start, min(start + batch_size, len(dataset)))])
            for start in range(0, len(dataset), batch_size)
        )
        chosen, rejected = compute_reference_logps(
            self.model,
            batches,
            collator=self.collator,
            device=self.device,
            autocast=self._autocast,
            chunked=self.config.model.chunked_loss,
            packed=self.packed_pairs,
        )
        if is_rank0() or resolve_strategy(self.config.parallel.strategy, get_world_size()) == "fsdp":
            atomic_write(path, lambda handle: torch.save({"chosen": chosen, "rejected": rejected}, handle))
        self.print(f"reference log-probs of {len(dataset):,} pairs computed and cached in {path}")
        return chosen, rejected

    def reference_key(self, dataset: PairDataset) -> str:
        """A content hash of the model's weights (this rank's shard under FSDP2), the pairs' token ids and the
        precision."""

        def parts():
            yield f"dpo-reference-v1|{self.precision}|{self.attention_name()}"
            if resolve_strategy(self.config.parallel.strategy, get_world_size()) == "fsdp":
                yield f"rank {get_rank()} of {get_world_size()}"
            for name, tensor in unwrap_model(self.model).state_dict().items():
                local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
                yield name
                for part in plain_parts(local):  # a quantized (QLoRA) weight: its codes and scales
                    yield part.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes()
            for pair in dataset.pairs:
                for ids in (pair.prompt_ids, pair.chosen_ids, pair.rejected_ids):
                    yield np.asarray(ids, dtype=np.int64).tobytes()

        return content_hash(parts())

    def _autocast(self) -> Any:
        if self.precision == "bf16-mixed":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    # --- the method -------------------------------------------------------------------
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
            **self.train_module_options(),
        )

    @functools.cached_property
    def packed_pairs(self) -> bool:
        """``dpo.packed_pairs``, off under ``parallel.compile`` (its per-pair loop would recompile every step)."""
        if self.dpo.packed_pairs and self.config.parallel.compile:
            self.print("dpo.packed_pairs is off under parallel.compile: padded rows with a dense 4D mask")
            return False
        return self.dpo.packed_pairs

    def held_out_answers(self) -> list[tuple[list[dict[str, Any]], str]]:
        """The validation prompts with their chosen reply's text (the answer the generation eval expects)."""
        return [(pair.prompt, pair.chosen[0]["content"]) for pair, _ in self.examples()[1] if len(pair.chosen) == 1]
