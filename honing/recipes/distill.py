"""On-policy distillation (TRL's GKD): chat rows in, the student trained towards a frozen teacher's next-token
distributions on the dataset's completions or on its own samples; full or LoRA.

Parts: a chat tokenizer, SFT's chat row kind (padded: each row's prompt is sampled from), a frozen teacher
(``honing.recipes.distill_teacher``: loaded, or a copy of the student as DPO's reference), the distillation train
module (``honing.methods.distill``) with the sampler GRPO's rollouts use.
"""

from __future__ import annotations

from typing import Any

import torch

from honing.config import RunConfig
from honing.config.distill_schema import DistillSection
from honing.data.chat.chat_rows import ChatRows
from honing.data.chat.padding import PaddedDataset
from honing.data.collate import pad_collate
from honing.data.formats import Conversation
from honing.data.report import DataReport
from honing.methods.distill import DistillTrainModule
from honing.recipes.base import Recipe, chat_assets, chat_rows, stop_token_ids, train_module_options
from honing.recipes.distill_teacher import build_teacher
from honing.recipes.sft import prompt_and_answer, validation_examples
from honing.run.parts import HeldOutAnswers, ModelAssets, TrainInputs


class DistillRecipe(Recipe):
    """Conversations → chat template with assistant-only labels → padded rows → the generalized JSD to a frozen
    teacher, on the rows' completions or the student's own (``distill.lmbda``)."""

    def __init__(self, config: RunConfig):
        super().__init__(config)
        self.distill = config.distill or DistillSection()  # its defaults when absent

    def model_assets(self) -> ModelAssets:
        """A byte-level or pretrained tokenizer with the run's chat template (the teacher's must be the same)."""
        return chat_assets(self.config)

    def compile_blockers(self) -> list[str]:
        """On-policy rows are decoded in the step (``distill.lmbda`` > 0): each new length would recompile."""
        return ["the student's decoding"] if self.distill.lmbda > 0 else []

    def build_reference_model(self, model: torch.nn.Module, assets: ModelAssets) -> torch.nn.Module | None:
        """The frozen teacher (``distill.teacher_model_name_or_path``, or a copy of the student as built)."""
        return build_teacher(model, self.distill, self.config, assets.tokenizer, self.models, self.placement)

    def row_kind(self, assets: ModelAssets) -> PaddedChatRows:
        """SFT's conversations with assistant-only labels, padded (never packed: each row's prompt is sampled from)."""
        return chat_rows(PaddedChatRows, assets, self.config, self.cache_dir)

    def build_train_module(self, inputs: TrainInputs) -> DistillTrainModule:
        """The distillation TrainModule with the run's ``distill`` settings and teacher."""
        cfg, tokenizer = self.distill, inputs.assets.tokenizer
        return DistillTrainModule(
            inputs.model,
            self.build_optimizer(inputs.model),
            teacher=inputs.reference_model,
            pad_token_id=tokenizer.pad_token_id,
            stop_token_ids=stop_token_ids(tokenizer),
            seq_len=self.config.data.seq_len,
            lmbda=cfg.lmbda,
            beta=cfg.beta,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            top_k=cfg.top_k,
            max_new_tokens=cfg.max_new_tokens,
            seq_kd=cfg.seq_kd,
            seed=self.config.trainer.seed,
            **train_module_options(self.config, self.placement, inputs.data.collator),
        )

    def held_out_answers(self, assets: ModelAssets) -> HeldOutAnswers:
        """The validation conversations as (messages before the last assistant turn, that turn's text)."""
        examples = validation_examples(self.row_kind(assets), self.config)
        held_out = [example for example in examples if isinstance(example, Conversation)]
        return [item for item in map(prompt_and_answer, held_out) if item is not None]


class PaddedChatRows(ChatRows):
    """SFT's row kind, always padded (``data.packing`` is refused for distillation): a row is one conversation."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.group_by_length = self.data.group_by_length

    def dataset(self, fitted: Any, report: DataReport) -> tuple[Any, Any]:
        """One conversation per row, right-padded by the batch's collator."""
        report.rows, report.row_length = len(fitted), max(report.lengths)
        return PaddedDataset(fitted), pad_collate(self.tokenizer.pad_token_id)
