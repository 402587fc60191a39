"""Tiny models and data for tests: build in milliseconds, deterministic under a seed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

from honing.train import Callback

#: the tiny Llama that runs build from ``model.config`` (one layer, no dropout: tests of ranks, methods and keys, not
#: of capacity)
TINY_LLAMA_CONFIG = {
    "model_type": "llama",
    "hidden_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "intermediate_size": 64,
}


class TokenDataset(torch.utils.data.Dataset):
    """Random token rows (seeded), shaped like PretrainDataset's items."""

    def __init__(self, rows: int = 64, seq_len: int = 16, vocab: int = 64, seed: int = 0):
        generator = torch.Generator().manual_seed(seed)
        self.data = torch.randint(0, vocab, (rows, seq_len), generator=generator)
        self.tokens_per_row = seq_len

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.data[index], "labels": self.data[index]}


def tiny_llama(vocab: int = 64, seed: int = 0, **overrides):
    """A 2-layer Llama with hidden size 32, deterministic under ``seed``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    values = dict(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        intermediate_size=64,
        vocab_size=vocab,
        max_position_embeddings=64,
    )
    values.update(overrides)
    return LlamaForCausalLM(LlamaConfig(**values))


def make_trainer(
    save_folder,
    *,
    max_duration="12steps",
    seed=0,
    rows=64,
    global_batch_size=8,
    micro_batch_size=4,
    callbacks=None,
    save_interval=4,
    async_save=False,
    dropout=0.1,
    init_seed=None,
    callback_adapter=None,
    **trainer_kwargs,
):
    """A complete tiny run: Llama with dropout, AdamW, cosine schedule, checkpointer and metrics file."""
    from honing.config.schema import TrainerSection
    from honing.data.loader import DataLoader
    from honing.distributed import seed_all
    from honing.methods.lm import LMTrainModule
    from honing.optim.param_groups import build_adamw
    from honing.train import Trainer
    from honing.train.callbacks.checkpointer import CheckpointerCallback
    from honing.train.callbacks.metrics_file import MetricsFileCallback

    seed_all(seed)
    model = tiny_llama(seed=seed if init_seed is None else init_seed, attention_dropout=dropout)
    seed_all(seed)
    optimizer = build_adamw(model, lr=1e-2, weight_decay=0.1, betas=(0.9, 0.95), eps=1e-8)
    module = LMTrainModule(
        model,
        optimizer,
        micro_batch_size=micro_batch_size,
        grad_clip=1.0,
        scheduler={"name": "cosine", "warmup_steps": 2, "min_lr_ratio": 0.1},
        precision=trainer_kwargs.get("precision", "fp32"),
    )
    loader = DataLoader(TokenDataset(rows=rows), global_batch_size=global_batch_size, seed=seed)
    all_callbacks = {
        "checkpointer": CheckpointerCallback(save_interval=save_interval, async_save=async_save),
        "metrics_file": MetricsFileCallback(),
    }
    all_callbacks.update(callbacks or {})
    settings = {"metrics_collect_interval": 2, "cancel_check_interval": 1, **trainer_kwargs}
    no_checkpoints, no_evals = settings.pop("no_checkpoints", False), settings.pop("no_evals", False)
    settings["steps_to_skip"] = [{"start": skip.start, "stop": skip.stop} for skip in settings.get("steps_to_skip", [])]
    config = TrainerSection(save_folder=str(save_folder), max_duration=max_duration, **settings)
    trainer = Trainer(
        config, train_module=module, data_loader=loader, callbacks=all_callbacks, callback_adapter=callback_adapter
    )
    trainer.no_checkpoints, trainer.no_evals = no_checkpoints, no_evals
    return trainer


def flat_weights(trainer):
    """Every parameter of the trainer's model, flattened into one tensor."""
    return torch.cat([p.detach().flatten() for p in trainer.train_module.model.parameters()])


class CountingCallback(Callback):
    """A user callback that tests load by import path: records every instance that saw a step end."""

    instances: list[CountingCallback] = []

    def __init__(self, label: str = ""):
        self.label = label

    def on_step_end(self) -> None:
        CountingCallback.instances.append(self)


def torchrun_script(script: Path, *args: str, nproc: int = 2, timeout: float = 180) -> subprocess.CompletedProcess:
    """``script`` under torchrun with ``nproc`` gloo processes (one thread each), from the repository root."""
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(repo)}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    return subprocess.run(
        [*command, str(script), *args], timeout=timeout, env=env, capture_output=True, text=True, cwd=repo
    )
