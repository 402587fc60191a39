"""A training script written in OLMo-core's style (its ``olmo_core.train`` document), run by honing.

It prepares the environment, builds a train module and a data loader, builds the trainer from a
``TrainerConfig(work_dir=...)`` with ``.with_callback(...)`` and ``.build(...)``, and calls ``fit()``. A callback
reads each step's loss with ``get_metric("loss", namespace="train")`` into a file of the work folder, persisted to
the save folder; ``write_file`` writes a summary; ``--cancel-at N`` cancels the run after step N, and the
checkpointer the trainer adds by default (as OLMo-core's) saves it there. Run it again and it resumes. At the end,
``Checkpointer.load(..., load_optim_state=True)`` reads the newest checkpoint back into a fresh train module.

    python examples/olmo_core_style.py runs/olmo-core-style --steps 6 --cancel-at 3   # stops after step 3
    python examples/olmo_core_style.py runs/olmo-core-style --steps 6                 # resumes, trains 4 to 6

A tiny Llama built from a config and random tokens: it runs on a CPU in seconds, nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from honing.data.loader import DataLoader
from honing.interop.olmo_core import (  # olmo_core.train's names, only the import root changed
    Callback,
    Checkpointer,
    CheckpointerConfig,
    Duration,
    LoadStrategy,
    Trainer,
    TrainerConfig,
    prepare_training_environment,
    teardown_training_environment,
)
from honing.methods.lm import LMTrainModule
from honing.optim.param_groups import build_adamw

LOSSES_FILE = "losses.jsonl"


class LossFile(Callback):
    """Appends each step's loss to ``work_dir/losses.jsonl`` and persists it to the save folder at the end."""

    def post_step(self) -> None:
        loss = self.trainer.get_metric("loss", namespace="train")  # a tensor until the metrics are collected
        os.makedirs(self.trainer.work_dir, exist_ok=True)
        with open(self.trainer.work_dir / LOSSES_FILE, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"step": self.step, "loss": float(loss)}) + "\n")

    def post_train(self) -> None:
        self.trainer.persist_working_file(LOSSES_FILE)


class CancelAt(Callback):
    """Cancels the run after step ``step`` (as a preemption or a user's decision would)."""

    def __init__(self, step: int | None):
        self.at = step

    def post_step(self) -> None:
        if self.at is not None and self.step == self.at:
            self.trainer.cancel_run(f"--cancel-at {self.at}")


def build_train_module() -> LMTrainModule:
    """A 2-layer Llama with AdamW, seeded: the same weights every time."""
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(vocab_size=256, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    )
    optimizer = build_adamw(model, lr=1e-3, weight_decay=0.0, betas=(0.9, 0.95), eps=1e-8)
    return LMTrainModule(model, optimizer, micro_batch_size=4, scheduler={"name": "constant"})


def build_data_loader() -> DataLoader:
    """64 rows of 32 random tokens, 8 rows a step."""
    rows = torch.randint(0, 256, (64, 32), generator=torch.Generator().manual_seed(0))
    return DataLoader([{"input_ids": row, "labels": row} for row in rows], global_batch_size=8, seed=0)


def main(save_folder: str, *, steps: int = 6, cancel_at: int | None = None, work_dir: str | None = None) -> Trainer:
    """Train (or resume) for ``steps`` steps, canceling after ``cancel_at``; return the trainer."""
    prepare_training_environment(seed=0)
    try:
        train_module = build_train_module()
        data_loader = build_data_loader()

        trainer_config = TrainerConfig(
            save_folder=save_folder,
            work_dir=work_dir,
            max_duration=Duration.steps(steps),
            load_strategy=LoadStrategy.if_available,
            metrics_collect_interval=2,
            checkpointer=CheckpointerConfig(save_thread_count=1),
        )
        trainer = (
            trainer_config.with_callback("loss_file", LossFile())
            .with_callback("cancel_at", CancelAt(cancel_at))
            .build(train_module, data_loader)
        )
        trainer.fit()
        trainer.write_file(
            "summary.json",
            json.dumps(
                {
                    "step": trainer.global_step,
                    "canceled": trainer.is_canceled,
                    "tokens": trainer.global_train_tokens_seen,
                }
            ),
        )

        # The newest checkpoint, read back into a fresh train module with its optimizer state (OLMo-core's keyword).
        latest = Checkpointer.latest_checkpoint(save_folder)
        trainer_state = trainer.checkpointer.load(latest, build_train_module(), load_optim_state=True)
        print(f"{latest}: step {trainer_state['global_step']}, canceled: {trainer.is_canceled}", flush=True)
        return trainer
    finally:
        teardown_training_environment()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("save_folder")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--cancel-at", type=int, default=None, help="cancel the run after this step")
    parser.add_argument("--work-dir", default=None, help="the local working folder (default: the save folder)")
    arguments = parser.parse_args()
    main(arguments.save_folder, steps=arguments.steps, cancel_at=arguments.cancel_at, work_dir=arguments.work_dir)
