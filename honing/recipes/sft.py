"""Supervised fine-tuning: conversations in, loss on the assistant's tokens, full or LoRA."""

from __future__ import annotations

import logging
import os
from typing import Any

import torch

from honing.data.chat import (
    ensure_special_tokens,
    fit_to_length,
    has_trainable_tokens,
    resolve_chat_template,
    tokenize_conversation,
    tokenize_plain_text,
)
from honing.data.eval_batches import EvalBatches
from honing.data.formats import Conversation
from honing.data.generated import is_generated, materialize
from honing.data.loader import DataLoader
from honing.data.packing import PackedDataset
from honing.data.padding import PaddedDataset, pad_collate
from honing.data.pretrain_corpus import default_cache_dir, split_documents
from honing.data.finetune_rows import load_examples
from honing.data.report import DataReport
from honing.data.tokenizer import build_tokenizer
from honing.distributed import get_rank, get_world_size, is_rank0
from honing.errors import DataError
from honing.models.checkpoint_export import export_checkpoint
from honing.models.export import export_hf
from honing.models.lora import apply_lora, freeze_layers, is_lora
from honing.models.merge import save_adapter
from honing.models.parallel import full_state_dict, is_fsdp
from honing.optim.param_groups import build_adamw
from honing.recipes.base import Recipe
from honing.train import Callback
from honing.train.callbacks.best_model import BestModelCallback, BestModelExportCallback
from honing.train.callbacks.generation_eval import GenerationEvalCallback

log = logging.getLogger(__name__)


class SFTRecipe(Recipe):
    """Chat data → chat template with assistant-only labels → packed (or padded) rows → next-token loss."""

    # --- model assets -----------------------------------------------------------------
    def build_tokenizer(self) -> Any:
        cfg = self.config.tokenizer
        kind, path = self.tokenizer_kind()
        if kind in ("char", "bpe"):
            raise DataError(f"tokenizer.kind {kind!r} trains on plain text; fine-tuning needs a byte-level "
                            "or pretrained tokenizer")
        tokenizer = build_tokenizer(kind, path=path, trust_remote_code=cfg.trust_remote_code)
        self.chat_template = resolve_chat_template(tokenizer, self.config.data.chat_template)
        ensure_special_tokens(tokenizer, self.config.data.chat_template or self.chat_template)
        tokenizer.chat_template = self.chat_template  # saved with the tokenizer in checkpoints and exports
        return tokenizer

    def build_model(self) -> torch.nn.Module:
        model = super().build_model()
        lora = self.config.model.lora
        if lora is not None:
            model = apply_lora(model, rank=lora.rank, alpha=lora.alpha, dropout=lora.dropout, bias=lora.bias,
                               target_modules=lora.target_modules, task_type=lora.task_type,
                               modules_to_save=lora.modules_to_save)
        return model

    def freeze_module(self, model: torch.nn.Module) -> None:
        if self.config.model.freeze_layers:
            freeze_layers(model, self.config.model.freeze_layers)

    def build_optimizer(self, model: torch.nn.Module) -> torch.optim.Optimizer:
        cfg = self.config.optim
        groups = [group.model_dump() for group in cfg.param_groups]
        return build_adamw(model, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=tuple(cfg.betas), eps=cfg.eps,
                           fused=cfg.fused, groups=groups)

    # --- data -------------------------------------------------------------------------
    def cache_dir(self) -> str:
        """Where generated data sets are written."""
        return self.config.data.cache_dir or default_cache_dir()

    def _sources(self, sources: list[Any]) -> list[dict[str, Any]]:
        resolved = []
        for source in sources:
            fields = source.model_dump()
            if is_generated(fields["path"]):
                fields["path"] = materialize(fields["path"], self.cache_dir())
                fields["format"] = "conversation"
            resolved.append(fields)
        return resolved

    def examples(self) -> tuple[list[Any], list[Any]]:
        """Training and validation examples (validation: its own sources or a held-out split)."""
        if not hasattr(self, "_examples"):
            data, seed = self.config.data, self.config.trainer.seed
            train_set = load_examples(self._sources(data.train.sources), seed=seed, bad_rows=data.bad_rows)
            train = list(zip(train_set.examples, train_set.origins))
            if data.validation is not None:
                validation_set = load_examples(self._sources(data.validation.sources), seed=seed,
                                               bad_rows=data.bad_rows)
                validation = list(zip(validation_set.examples, validation_set.origins))
            elif data.validation_split > 0:
                train, validation = split_documents(train, data.validation_split, seed=seed)
            else:
                validation = []
            self._examples = (train, validation)
        return self._examples

    def tokenize(self, examples: list[Any], split: str) -> list[Any]:
        """Tokenized examples that fit ``data.seq_len`` and carry loss; the rest are counted."""
        data = self.config.data
        report, tokenized = DataReport(), []
        for example, origin in examples:
            try:
                if isinstance(example, Conversation):
                    item = tokenize_conversation(self.tokenizer, example.to_hf_messages(),
                                                 chat_template=self.chat_template, train_on=data.train_on)
                else:
                    item = tokenize_plain_text(self.tokenizer, example.text)
            except DataError as error:
                if data.bad_rows == "fail":
                    raise DataError(f"{origin}: {error}") from None
                report.reject(f"{origin}: {error}")
                continue
            if len(item.input_ids) > data.seq_len:
                item = fit_to_length(item, data.seq_len, data.overlong)
                if item is None:
                    report.dropped += 1
                    continue
                report.truncated += 1
            if not has_trainable_tokens(item):
                if data.bad_rows == "fail":
                    raise DataError(f"{origin}: no tokens to train on (no assistant turn left after the chat "
                                    "template and truncation); set data.bad_rows: skip to skip such rows")
                report.reject(f"{origin}: no tokens to train on")
                continue
            # the first token is never predicted (labels shift by one inside the loss)
            report.add(len(item.input_ids), sum(label != -100 for label in item.labels[1:]))
            tokenized.append(item)
        self.data_reports[split] = report
        self.print(report.summary(split))
        if not tokenized:
            raise DataError(f"no {split} example is left to train on (see the data report above)")
        return tokenized

    def rows(self, tokenized: list[Any], split: str) -> tuple[Any, Any]:
        """The dataset of ``split``'s rows and its collate function (packed or padded)."""
        pad_id = self.tokenizer.pad_token_id
        report = self.data_reports[split]
        if self.config.data.packing:
            packed = PackedDataset(tokenized, self.config.data.seq_len, pad_token_id=pad_id)
            report.rows, report.row_length = len(packed), self.config.data.seq_len
            report.packing_efficiency = packed.packing_efficiency
            self.print(f"packed into {len(packed):,} rows of {self.config.data.seq_len} tokens "
                       f"({packed.packing_efficiency:.1%} real tokens)")
            return packed, None
        report.rows, report.row_length = len(tokenized), max(report.lengths)
        return PaddedDataset(tokenized), pad_collate(pad_id)

    def build_data(self) -> tuple[DataLoader, EvalBatches | None]:
        data = self.config.data
        train_examples, validation_examples = self.examples()
        train_rows, collate = self.rows(self.tokenize(train_examples, "train"), "train")
        loader = DataLoader(train_rows, global_batch_size=data.global_batch_size, collate_fn=collate,
                            seed=self.config.trainer.seed, shuffle=data.shuffle, rank=get_rank(),
                            world_size=get_world_size(),
                            group_by_length=data.group_by_length and not data.packing)
        if not validation_examples:
            return loader, None
        validation_rows, collate = self.rows(self.tokenize(validation_examples, "validation"), "validation")
        batch_size = self.config.callbacks.evaluator.batch_size or self.micro_batch_size()
        return loader, EvalBatches(validation_rows, batch_size=batch_size, collate_fn=collate, rank=get_rank(),
                                   world_size=get_world_size())

    # --- generation and export ----------------------------------------------------------
    def answer(self, messages: list[dict[str, str]], *, max_new_tokens: int, temperature: float = 0.0) -> str:
        """The model's reply to a conversation (rendered with the chat template's generation prompt)."""
        prompt = self.tokenizer.apply_chat_template(messages, chat_template=self.chat_template, tokenize=False,
                                                    add_generation_prompt=True)
        ids = self.tokenizer(prompt, return_tensors="pt", add_special_tokens=False)["input_ids"].to(self.device)
        stop = {self.tokenizer.eos_token_id, *self.end_of_turn_ids()} - {None}
        out = self.generate(ids, max_new_tokens=max_new_tokens, do_sample=temperature > 0,
                            temperature=temperature or None, top_k=50 if temperature > 0 else None,
                            eos_token_id=sorted(stop))
        return self.tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)

    def end_of_turn_ids(self) -> list[int]:
        """Token ids that end an assistant turn in the common chat templates, where the tokenizer has them."""
        ids = [self.tokenizer.convert_tokens_to_ids(token) for token in ("<|im_end|>", "<|eot_id|>", "<|end|>")]
        return [i for i in ids if i is not None and i != self.tokenizer.unk_token_id]

    def generate_text(self, prompt: str) -> str:
        cfg = self.config.callbacks.sample
        return self.answer([{"role": "user", "content": prompt}], max_new_tokens=cfg.max_new_tokens,
                           temperature=cfg.temperature)

    def export(self, out_dir: str) -> None:
        """``SAVE_FOLDER/hf``: the full model (merged when LoRA); ``SAVE_FOLDER/adapter``: the peft adapter."""
        # every rank takes part in gathering FSDP2-sharded weights; rank 0 writes
        state_dict = full_state_dict(self.model) if is_fsdp(self.model) else None
        if not is_rank0():
            return
        export_hf(self.model, self.tokenizer, out_dir, state_dict=state_dict)
        if is_lora(self.model):
            adapter_dir = os.path.join(os.path.dirname(out_dir.rstrip("/")), "adapter")
            save_adapter(self.model, adapter_dir, state_dict=state_dict)
            self.trainer.persist_working_file(adapter_dir)  # uploaded when the save folder is remote

    def build_callbacks(self) -> dict[str, Callback]:
        callbacks = super().build_callbacks()
        cfg = self.config.callbacks
        if cfg.evaluator.metric_for_best_model and "evaluator" in callbacks:
            best = BestModelCallback(callbacks["checkpointer"], metric=cfg.evaluator.metric_for_best_model,
                                     greater_is_better=cfg.evaluator.greater_is_better,
                                     export_fn=lambda checkpoint, out: is_rank0() and export_checkpoint(checkpoint, out))
            callbacks["best_model"] = best
            callbacks["best_model_export"] = BestModelExportCallback(best)
        generation = cfg.generation_eval
        if generation.enabled:
            held_out = [example for example, _ in self.examples()[1] if isinstance(example, Conversation)]
            prompts = [_prompt_and_answer(example) for example in held_out]
            prompts = [item for item in prompts if item is not None][: generation.num_prompts]
            if prompts:
                callbacks["generation_eval"] = GenerationEvalCallback(
                    lambda messages: self.answer(messages, max_new_tokens=generation.max_new_tokens), prompts,
                    interval=generation.interval, printer=self.print)
            else:
                log.warning("callbacks.generation_eval is enabled but there are no validation conversations "
                            "ending in an assistant turn; it is skipped")
        return callbacks


def _prompt_and_answer(conversation: Conversation) -> tuple[list[dict[str, str]], str] | None:
    """The messages before the last assistant turn, and that turn's text."""
    messages = conversation.to_hf_messages()
    if not messages or messages[-1]["role"] != "assistant":
        return None
    return messages[:-1], messages[-1]["content"]
