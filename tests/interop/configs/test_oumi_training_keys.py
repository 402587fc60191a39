"""Oumi's ``model.model_name``, ``data.validation``, ``training`` and ``peft`` keys as honing's: what each one
becomes, proving rows of docs/coming-from.md's Oumi section."""

from __future__ import annotations

import copy

from honing.config import validate
from honing.interop.configs import translate

BASE = {
    "model": {"model_name": "Qwen/Qwen2.5-0.5B-Instruct"},
    "data": {"train": {"datasets": [{"dataset_name": "text_sft_jsonl", "dataset_path": "train.jsonl"}]}},
    "training": {"trainer_type": "TRL_SFT"},
}


def translated(*, data=None, peft=None, **training):
    """``BASE`` with ``training.*`` keys (and a ``data.validation`` / ``peft`` section) translated: no refusal, and
    honing's schema accepts it."""
    raw = copy.deepcopy(BASE)
    raw["training"].update(training)
    if data:
        raw["data"].update(data)
    if peft is not None:
        raw["peft"] = peft
    translation = translate(raw)
    assert translation.refused == [], translation.refused
    validate(translation.config, source="oumi")
    return translation


def values(translation, *paths):
    """The translation's values at honing's dotted ``paths``."""
    return {path: translation.get(path) for path in paths}


def test_the_model_the_run_and_its_length():
    translation = translated(output_dir="runs/sft", run_name="sft-1", max_steps=30)
    assert values(translation, "model.name_or_path", "trainer.save_folder", "run_name", "trainer.max_duration") == {
        "model.name_or_path": "Qwen/Qwen2.5-0.5B-Instruct",
        "trainer.save_folder": "runs/sft",
        "run_name": "sft-1",
        "trainer.max_duration": "30steps",
    }
    assert translated(num_train_epochs=2).get("trainer.max_duration") == "2epochs"


def test_the_batch_is_per_device_rows_times_accumulation():
    translation = translated(per_device_train_batch_size=4, gradient_accumulation_steps=2)
    assert values(translation, "data.micro_batch_size", "data.batch_size_per_rank", "data.global_batch_size") == {
        "data.micro_batch_size": 4,
        "data.batch_size_per_rank": 8,  # per device, as in the HF Trainer: x the ranks under torchrun
        "data.global_batch_size": None,
    }


def test_seed_checkpoints_evaluation_and_logging_intervals():
    translation = translated(
        data={"validation": {"datasets": [{"dataset_name": "text_sft_jsonl", "dataset_path": "valid.jsonl"}]}},
        seed=3,
        save_steps=10,
        eval_strategy="steps",
        eval_steps=5,
        per_device_eval_batch_size=2,
        logging_strategy="steps",
        logging_steps=7,
    )
    assert values(
        translation,
        "data.validation.sources",
        "trainer.seed",
        "callbacks.checkpointer.save_interval",
        "callbacks.evaluator.interval",
        "callbacks.evaluator.batch_size",
        "callbacks.console.log_interval",
    ) == {
        "data.validation.sources": [{"path": "valid.jsonl", "format": "conversation"}],
        "trainer.seed": 3,
        "callbacks.checkpointer.save_interval": 10,
        "callbacks.evaluator.interval": 5,
        "callbacks.evaluator.batch_size": 2,
        "callbacks.console.log_interval": 7,
    }
    # transformers' eval_strategy "epoch" (Oumi's halloumi 8B config): honing's every_epoch, the interval unused
    validation = {"validation": {"datasets": [{"dataset_name": "text_sft_jsonl", "dataset_path": "valid.jsonl"}]}}
    by_epoch = translated(data=validation, eval_strategy="epoch", eval_steps=5)
    assert by_epoch.get("callbacks.evaluator.every_epoch") is True
    assert by_epoch.get("callbacks.evaluator.interval") is None
    raw = copy.deepcopy(BASE)
    raw["training"].update(logging_strategy="epoch")  # how often the loss is reported: a note, the same steps
    translation = translate(raw)
    assert translation.refused == []
    epoch_note = "training.logging_strategy: 'epoch': honing reports every"
    assert any(note.startswith(epoch_note) for note in translation.notes)


def test_epoch_saves_trackers_checkpointing_and_mixed_precision():
    translation = translated(
        save_epoch=True,
        enable_wandb=True,
        enable_tensorboard=False,
        enable_gradient_checkpointing=True,
        mixed_precision_dtype="BF16",
    )
    assert values(
        translation,
        "callbacks.checkpointer.save_at_epoch_end",
        "callbacks.wandb.enabled",
        "callbacks.tensorboard.enabled",
        "parallel.activation_checkpointing",
        "trainer.precision",
    ) == {
        "callbacks.checkpointer.save_at_epoch_end": True,
        "callbacks.wandb.enabled": True,
        "callbacks.tensorboard.enabled": False,
        "parallel.activation_checkpointing": "full",
        "trainer.precision": "bf16-mixed",
    }


def test_resuming():
    resumed = translated(resume_from_checkpoint="runs/sft/step10")
    assert values(resumed, "trainer.load_path", "trainer.load_strategy") == {
        "trainer.load_path": "runs/sft/step10",
        "trainer.load_strategy": "always",
    }
    assert translated(try_resume_from_last_checkpoint=True).get("trainer.load_strategy") == "if_available"
    assert translated().get("trainer.load_strategy") == "never"  # Oumi's default: start afresh


def test_peft_keys_become_model_lora_only_with_use_peft():
    peft = {"lora_r": 16, "lora_alpha": 32, "lora_dropout": 0.1, "lora_target_modules": ["q_proj", "v_proj"],
            "lora_bias": "none", "lora_task_type": "causal_lm", "lora_modules_to_save": ["lm_head"]}  # fmt: skip
    lora = translated(use_peft=True, peft=peft).get("model.lora")
    assert lora == {
        "rank": 16,
        "alpha": 32.0,
        "dropout": 0.1,
        "bias": "none",
        "task_type": "CAUSAL_LM",
        "target_modules": ["q_proj", "v_proj"],
        "modules_to_save": ["lm_head"],
        "missing_targets": "skip",  # peft's rule, as under Oumi: a name the model lacks is passed over
    }
    full = translated(peft=peft)  # Oumi ignores the section without training.use_peft: every weight trains
    assert full.get("model.lora") is None
    assert "training.use_peft is not true" in [note for note in full.notes if note.startswith("peft:")][0]


def test_fp16_mixed_precision_and_neftune():
    translation = translated(mixed_precision_dtype="FP16", trainer_kwargs={"neftune_noise_alpha": 5})
    assert values(translation, "trainer.precision", "sft.neftune_noise_alpha") == {
        "trainer.precision": "fp16-mixed",
        "sft.neftune_noise_alpha": 5.0,
    }
