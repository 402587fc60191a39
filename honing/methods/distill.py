"""On-policy distillation's TrainModule (TRL's GKDTrainer): the student is trained towards a frozen teacher's
next-token distributions with the generalized JSD (``honing.methods.distill_loss``), both scored on the same tokens.

A step's completions are, with probability ``lmbda``, sampled by the student from the batch's prompts (on-policy);
else the teacher's samples (``seq_kd``) or the dataset's own. The choice and every sampled token come from (seed,
step, rank, row) alone, so a resumed run trains on the same rows as one that never stopped.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from honing.losses import IGNORE_INDEX, batch_targets
from honing.methods.base import BaseTrainModule
from honing.methods.distill_batches import left_padded_prompts, rows_with_completions
from honing.methods.distill_loss import per_token_generalized_jsd
from honing.models.generation import sample_completions
from honing.models.parallel import is_fsdp
from honing.train.metrics import ReduceType

#: where a step's completions come from
STUDENT, TEACHER, DATASET = "student", "teacher", "dataset"
# kept apart from the other seeds drawn from (seed, step, ...): the step's coin, and each row's sampler
_COIN, _SAMPLER = 0x64697374, 0x73616D70


class DistillTrainModule(BaseTrainModule):
    """The generalized JSD between the student's and the teacher's next-token distributions on the completion
    tokens, summed and divided by the step's completion tokens over every rank."""

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        teacher: torch.nn.Module,
        pad_token_id: int,
        stop_token_ids: Sequence[int],
        seq_len: int,
        lmbda: float = 0.5,
        beta: float = 0.5,
        temperature: float = 0.9,
        top_p: float = 1.0,
        top_k: int = 0,
        max_new_tokens: int = 128,
        seq_kd: bool = False,
        seed: int = 0,
        chunked_loss: bool = True,  # the divergence needs both models' logits: nothing to chunk
        **options: Any,
    ):
        super().__init__(model, optimizer, **options)
        self.teacher = teacher.eval().requires_grad_(False)
        self.pad_token_id = int(pad_token_id)
        self.stop_token_ids = sorted({int(i) for i in stop_token_ids})
        self.seq_len = seq_len
        self.lmbda, self.beta, self.seq_kd, self.seed = lmbda, beta, seq_kd, seed
        self.sampling = dict(temperature=temperature, top_p=top_p, top_k=top_k)
        self.max_new_tokens = max_new_tokens
        self._step_tokens: tuple[Any, int] | None = None  # (the loader's batch, the trained rows' tokens)

    # --- the step -----------------------------------------------------------------------
    def completion_source(self, step: int) -> str:
        """Where step ``step``'s completions come from: the same on every rank (each takes part in the sampling)."""
        if np.random.default_rng([self.seed, step, _COIN]).random() < self.lmbda:
            return STUDENT
        return TEACHER if self.seq_kd else DATASET

    def train_batch(self, batch: dict[str, Any], dry_run: bool = False) -> None:
        """Sample the step's completions where it is on-policy (or ``seq_kd``), then back-propagate the divergence
        summed over the completion tokens / the step's completion tokens."""
        self.start_step()
        step = self.trainer.global_step if self.trainer is not None else 0
        source = self.completion_source(step)
        rows = batch if source == DATASET else self.sampled_rows(batch, step, source)
        micro_batches = self.micro_batches(rows)
        for micro in micro_batches:
            micro["targets"] = batch_targets(micro)
        local_tokens = sum((micro["targets"] != IGNORE_INDEX).sum() for micro in micro_batches)
        scale = self.ranks.grad_divisor / self.ranks.sum(local_tokens).clamp(min=1)
        loss_sum = self.backward_each(micro_batches, self.divergence_sum, scale)
        self._step_tokens = (batch, self.collator.num_tokens(rows) * self.ranks.dp_size)
        self.record_loss(loss_sum * scale, cross_entropy=False, dry_run=dry_run)
        if self.trainer is not None and not dry_run:
            self.trainer.record_metric("train/on_policy", float(source == STUDENT), ReduceType.max)
            self.trainer.record_metric("train/target_tokens", self.ranks.count_once(local_tokens), ReduceType.sum)

    def divergence_sum(self, micro: dict[str, torch.Tensor]) -> torch.Tensor:
        """The micro-batch's divergence summed over its completion tokens (the student's graph kept)."""
        student, teacher = self.target_logits(micro, grad=True)
        return per_token_generalized_jsd(student, teacher, beta=self.beta).sum()

    def target_logits(self, micro: dict[str, torch.Tensor], *, grad: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """``(student, teacher)`` logits in fp32 at the positions that predict a completion token ``[tokens, vocab]``;
        the teacher's without gradients, on the same inputs."""
        keep = micro["targets"] != IGNORE_INDEX
        with torch.no_grad(), self.autocast():
            teacher = self.teacher(**self.collator.model_inputs(micro), use_cache=False).logits[keep].float()
        with torch.enable_grad() if grad else torch.no_grad():
            student = self.forward(micro).logits[keep].float()
        if student.shape[-1] != teacher.shape[-1]:  # checked when the teacher is loaded; a custom recipe may skip it
            raise ValueError(f"the student has {student.shape[-1]} logits per token, the teacher {teacher.shape[-1]}")
        return student, teacher

    # --- sampling -----------------------------------------------------------------------
    def sampled_rows(self, batch: dict[str, Any], step: int, source: str) -> dict[str, torch.Tensor]:
        """The batch's prompts with completions sampled by the student (or the teacher), as right-padded rows."""
        prompt_ids, prompt_mask = left_padded_prompts(
            {key: batch[key].to(self.device) for key in ("input_ids", "labels", "attention_mask")}, self.pad_token_id
        )
        rank = self.parallel_dims.dp_rank
        seeds = [sampling_seed(self.seed, step, rank, row) for row in range(prompt_ids.shape[0])]
        model = self.model if source == STUDENT else self.teacher
        completion_ids, completion_mask = sample_completions(
            model,
            prompt_ids,
            prompt_mask,
            max_new_tokens=max(1, min(self.max_new_tokens, self.seq_len - prompt_ids.shape[1])),
            stop_token_ids=self.stop_token_ids,
            pad_token_id=self.pad_token_id,
            seeds=seeds,
            sync_ranks=is_fsdp(model),
            **self.sampling,
        )
        return rows_with_completions(prompt_ids, prompt_mask, completion_ids, completion_mask, self.pad_token_id)

    # --- what the loop asks ---------------------------------------------------------------
    def num_tokens(self, batch: Any) -> int:
        """The trained rows' real tokens (the sampled ones on an on-policy step) times the batches a step reads."""
        if self._step_tokens is not None and self._step_tokens[0] is batch:
            return self._step_tokens[1]
        return super().num_tokens(batch)

    @torch.no_grad()
    def eval_batch(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """On the held-out rows' completions: the summed divergence, forward KL(teacher ‖ student), the tokens
        where the student's most likely next token is the teacher's, and the tokens."""
        self.model.eval()
        sums = torch.zeros(4, device=self.device, dtype=torch.float64)
        for micro in self.micro_batches(batch):
            micro["targets"] = batch_targets(micro)
            student, teacher = self.target_logits(micro, grad=False)
            sums += torch.stack(
                [
                    per_token_generalized_jsd(student, teacher, beta=self.beta).sum().double(),
                    per_token_generalized_jsd(student, teacher, beta=0.0).sum().double(),
                    (student.argmax(-1) == teacher.argmax(-1)).sum().double(),
                    torch.tensor(float(student.shape[0]), device=self.device, dtype=torch.float64),
                ]
            )
        return {"jsd_sum": sums[0], "kl_sum": sums[1], "agree": sums[2], "tokens": sums[3]}

    def eval_metrics(self, totals: dict[str, float]) -> dict[str, float]:
        """``loss`` (the divergence per completion token), ``forward_kl`` and ``teacher_agreement``."""
        tokens = max(totals["tokens"], 1.0)
        return {
            "loss": totals["jsd_sum"] / tokens,
            "forward_kl": totals["kl_sum"] / tokens,
            "teacher_agreement": totals["agree"] / tokens,
        }


def sampling_seed(seed: int, step: int, rank: int, row: int) -> int:
    """The sampling seed of one row of one rank's batch: a hash of (run seed, step, rank, row)."""
    return int(np.random.SeedSequence([seed, step, rank, row, _SAMPLER]).generate_state(1, np.uint64)[0] >> 1)
