"""GRPO: prompts in (conversations without their answer, or plain prompts), completions sampled by the policy,
scored by the rewards of ``grpo.rewards``, and TRL's group-relative policy-gradient update; full or LoRA."""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any

import torch

from honing.cache import content_hash
from honing.config.schema import GRPOSection
from honing.data.finetune_rows import BadRowReport
from honing.data.loader import DataLoader
from honing.data.prepared_rows import REJECTED
from honing.data.prompts.rows import Prompt, PromptCollator, PromptDataset, load_prompts, read_prompt_sources
from honing.data.tokenizer import tokenizer_fingerprint
from honing.errors import ConfigError, DataError
from honing.models import is_lora
from honing.models.generation import end_of_turn_ids
from honing.recipes.row_data import split_rows
from honing.recipes.sft import SFTRecipe
from honing.rl.rewards import RewardScorer


class GRPORecipe(SFTRecipe):
    """The SFT recipe's tokenizer, chat template, model, LoRA and export; prompts for data; GRPO's train module."""

    def __init__(self, config: Any):
        super().__init__(config)
        self._reference: torch.nn.Module | None = None

    @property
    def grpo(self) -> GRPOSection:
        """The ``grpo`` section (required by ``method: grpo``)."""
        if self.config.grpo is None:
            raise ConfigError("grpo: method 'grpo' needs a grpo section, at least grpo.rewards: [{name: ...}]")
        return self.config.grpo

    # --- model assets -----------------------------------------------------------------
    def build_model(self) -> torch.nn.Module:
        """The policy; with ``grpo.beta`` > 0 and no LoRA, also a frozen copy of it as the KL reference (taken
        here, before the policy is parallelised)."""
        model = super().build_model()
        if self.grpo.beta != 0.0 and not is_lora(model):
            self._reference = copy.deepcopy(model).eval().requires_grad_(False)
        return model

    def build_reference_model(self) -> torch.nn.Module | None:
        """The frozen copy (beta > 0, full fine-tuning); None with LoRA (its adapters are disabled instead) or
        beta = 0 (no KL term)."""
        return self._reference

    # --- data -------------------------------------------------------------------------
    def prompt_ids(self, prompt: Prompt) -> list[int]:
        """The prompt's tokens: messages rendered with the chat template's generation prompt, or the text as is."""
        text = prompt.prompt
        if prompt.is_conversational:
            text = self.tokenizer.apply_chat_template(prompt.prompt, tokenize=False, add_generation_prompt=True)
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    row_method = "grpo"

    def row_settings(self) -> dict[str, Any]:
        """The tokenizer and the chat template that renders conversational prompts."""
        return {"tokenizer": tokenizer_fingerprint(self.tokenizer), "chat_template": content_hash([self.chat_template])}

    def row_cut(self) -> None:
        """Prompts are stored whole: one longer than ``data.seq_len - grpo.max_completion_length`` is dropped when
        the rows are used."""
        return None

    def read_items(self, fields: list[dict[str, Any]]) -> tuple[list[list[tuple[Any, str]]], BadRowReport]:
        """Each source's prompts and origins in file order (a bad row fails: GRPO has no data.bad_rows)."""
        return read_prompt_sources(fields), BadRowReport()

    def build_row(self, prompt: Prompt) -> dict[str, Any]:
        """A prompt's token ids, the prompt itself and the columns its rewards read."""
        if self.config.data.cache_rows:
            for name, value in prompt.columns.items():
                try:
                    same = json.loads(json.dumps(value)) == value
                except (TypeError, ValueError):
                    same = False
                if not same:
                    raise DataError(
                        f"column {name!r} holds a {type(value).__name__} that prepared rows cannot keep as it is (JSON "
                        "values only); convert it, or set data.cache_rows: false"
                    )
        return {"prompt_ids": self.prompt_ids(prompt), "prompt": prompt.prompt, "columns": prompt.columns}

    def tokenize_rows(
        self, table: Any, indices: Sequence[int], split: str
    ) -> tuple[list[Prompt], list[list[int]], int]:
        """The prompts ``indices`` of ``table`` that leave ``grpo.max_completion_length`` tokens of ``data.seq_len``,
        their token ids, and how many were longer."""
        room = self.config.data.seq_len - self.grpo.max_completion_length
        kept, token_ids, dropped = [], [], 0
        for index in indices:
            row = table.row(index)
            if row["status"] == REJECTED:
                raise DataError(f"{row['origin']}: {row['reason']}")
            if len(row["prompt_ids"]) > room:
                dropped += 1
                continue
            kept.append(Prompt(row["prompt"], row["columns"]))
            token_ids.append(row["prompt_ids"])
        return kept, token_ids, dropped

    def build_data(self) -> tuple[DataLoader, None]:
        """A resumable loader of left-padded prompts (no validation loss: the reward is logged every step)."""
        data, grpo = self.config.data, self.grpo
        if data.validation is not None and not self.config.callbacks.generation_eval.enabled:
            raise ConfigError(
                "data.validation: method 'grpo' reads held-out prompts only for callbacks.generation_eval "
                "(exact match of greedy answers); enable it or remove data.validation"
            )
        kept, token_ids, dropped = self.tokenize_rows(*split_rows(self, validation=False)["train"], "train")
        room = data.seq_len - grpo.max_completion_length
        if not kept:
            raise DataError(
                f"no prompt fits in data.seq_len ({data.seq_len}) minus grpo.max_completion_length "
                f"({grpo.max_completion_length}); raise data.seq_len"
            )
        self.print(
            f"train: {len(kept):,} prompts"
            + (f" ({dropped:,} longer than {room} tokens dropped)" if dropped else "")
            + f", {grpo.num_generations} completions each per step"
        )
        self.collator = PromptCollator(self.tokenizer.pad_token_id)
        loader = DataLoader(
            PromptDataset(kept, token_ids),
            global_batch_size=data.global_batch_size,
            collate_fn=self.collator,
            seed=self.config.trainer.seed,
            shuffle=data.shuffle,
            rank=self.parallel_dims.dp_rank,
            world_size=self.parallel_dims.dp_size,
            num_workers=self.config.data.num_workers,
        )
        return loader, None

    # --- train module -----------------------------------------------------------------
    def stop_token_ids(self) -> list[int]:
        """End of sequence and the chat template's end of turn."""
        ids = [self.tokenizer.eos_token_id, *end_of_turn_ids(self.tokenizer)]
        return [int(i) for i in ids if i is not None]

    def build_train_module(self) -> Any:
        """GRPO's train module with the rewards of ``grpo.rewards``."""
        from honing.methods.grpo import GRPOTrainModule

        grpo = self.grpo
        scorer = RewardScorer([(reward.name, reward.weight) for reward in grpo.rewards])
        reference = self.reference_model
        if reference is not None:
            reference = reference.to(self.device)
        return GRPOTrainModule(
            self.model,
            self.build_optimizer(self.model),
            tokenizer=self.tokenizer,
            scorer=scorer,
            stop_token_ids=self.stop_token_ids(),
            num_generations=grpo.num_generations,
            max_completion_length=grpo.max_completion_length,
            temperature=grpo.temperature,
            top_p=grpo.top_p,
            top_k=grpo.top_k,
            beta=grpo.beta,
            epsilon=grpo.epsilon,
            epsilon_high=grpo.epsilon_high,
            loss_type=grpo.loss_type,
            scale_rewards=grpo.scale_rewards,
            num_iterations=grpo.num_iterations,
            reference_model=reference,
            seed=self.config.trainer.seed,
            sample_interval=grpo.sample_interval,
            **self.train_module_options(),
        )

    def held_out_answers(self) -> list[tuple[Any, str]]:
        """The ``data.validation`` prompts as (messages, their ``answer`` column) for the generation eval: the
        held-out words a verifiable reward checks, answered greedily before and after training."""
        data = self.config.data
        if data.validation is None:
            return []
        prompts = load_prompts(self._sources(data.validation.sources), seed=self.config.trainer.seed)
        answerable = [p for p, _ in prompts if p.is_conversational and isinstance(p.columns.get("answer"), str)]
        if len(answerable) < len(prompts):
            raise DataError(
                f"data.validation: {len(prompts) - len(answerable)} of {len(prompts)} prompts cannot be checked by "
                "callbacks.generation_eval; expected conversations whose last assistant turn (or 'answer' column) "
                "is the expected answer"
            )
        return [(p.prompt, p.columns["answer"]) for p in answerable]
