"""What a run's model produces, for every method: sampled text, chat answers for the generation eval, and the
exported ``hf/`` and ``adapter/`` folders with their model card (the callbacks call these)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

from honing.distributed import is_rank0
from honing.export.hf_folder import export_hf, save_adapter
from honing.export.model_card import data_summary, write_model_card
from honing.models import is_lora
from honing.models.generation import end_of_turn_ids, generate, sampling_kwargs
from honing.models.parallel import is_sharded


class RunOutputs:
    """Generation and export from the run's trained ``model``: ``config`` is the run's config as applied,
    ``persist`` uploads a folder written beside the checkpoints when the save folder is remote."""

    def __init__(
        self,
        *,
        config: Any,
        model: torch.nn.Module,
        processor: Any,
        device: torch.device,
        data_reports: dict[str, Any],
        persist: Callable[[str], None],
        collator: Any = None,
    ):
        self.config, self.model, self.processor, self.device = config, model, processor, device
        self.tokenizer = getattr(processor, "tokenizer", processor)
        self.data_reports, self.persist, self.collator = data_reports, persist, collator

    def generate_text(self, prompt: str) -> str:
        """Sample a continuation of ``prompt`` from the model (``callbacks.sample``)."""
        cfg = self.config.callbacks.sample
        ids = self.tokenizer(prompt, return_tensors="pt", add_special_tokens=False)["input_ids"].to(self.device)
        out = generate(
            self.model,
            ids,
            pad_token_id=self.tokenizer.pad_token_id,
            **sampling_kwargs(max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature),
        )
        return self.tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)

    def answer(self, messages: list[dict[str, Any]], *, max_new_tokens: int, temperature: float = 0.0) -> str:
        """The model's reply to a conversation, rendered with the chat template's generation prompt and
        stopped at end of sequence or end of turn."""
        prompt = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = self.tokenizer(prompt, return_tensors="pt", add_special_tokens=False)["input_ids"].to(self.device)
        stop = [i for i in (self.tokenizer.eos_token_id, *end_of_turn_ids(self.tokenizer)) if i is not None]
        out = generate(
            self.model,
            ids,
            pad_token_id=self.tokenizer.pad_token_id,
            **sampling_kwargs(max_new_tokens=max_new_tokens, temperature=temperature, stop_token_ids=stop),
        )
        return self.tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)

    def export(self, out_dir: str) -> None:
        """``SAVE_FOLDER/hf``: the full model and processor (merged when LoRA); ``SAVE_FOLDER/adapter``: the
        peft adapter. Streamed a layer at a time; every rank takes part in gathering sharded weights, rank 0 writes."""
        rank0 = is_rank0()
        if not rank0 and not is_sharded(self.model):
            return
        export_hf(self.model, self.processor, out_dir, write=rank0)
        adapter_dir = os.path.join(os.path.dirname(out_dir.rstrip("/")), "adapter")
        if is_lora(self.model):
            save_adapter(self.model, adapter_dir, write=rank0)
        if not rank0:
            return
        run_folder = os.path.dirname(out_dir.rstrip("/"))
        # model_card's keys are read through their section (dumping the whole config reads no key)
        config = {**self.config.model_dump(mode="json"), "model_card": self.config.model_card.model_dump(mode="json")}
        write_model_card(out_dir, config, data=self.data_summary(), run_folder=run_folder)
        if is_lora(self.model):
            self.persist(adapter_dir)  # uploaded when the save folder is remote

    def data_summary(self) -> dict[str, Any]:
        """Per split: its sources and rows (examples; pretraining: rows of ``seq_len`` tokens), for model cards."""
        rows = {split: report.examples or report.rows for split, report in self.data_reports.items()}
        return data_summary(self.config.model_dump(mode="json"), rows)
