"""olmOCR's training API document (``../shared/seeds/000_*``) by its names (``honing.interop.olmocr``): the saved text
holds no code block (its "Custom Training Script" and "Distributed Training" sections lost theirs), so its names are
run as the page defines them: ``get_rank()``, ``CheckpointUploadCallback(save_path, logger=None)`` as a
``transformers.TrainerCallback`` whose ``on_save(args, state, control)`` copies the newest checkpoint to the save
path, ``update_wandb_config(config, trainer, model)``, and the model type read from the name."""

from __future__ import annotations

import dataclasses
import inspect
import logging

import pytest
import torch

from honing.errors import ConfigError
from honing.interop.olmocr import CheckpointUploadCallback, get_rank, model_type_from_name, update_wandb_config
from tests.helpers import tiny_llama
from tests.interop.document_blocks import oumi_blocks, python_blocks, seed_text


def test_the_page_holds_no_code_block():
    text = seed_text("000")
    assert "Custom Training Script" in text and python_blocks(text) == [] and oumi_blocks(text) == []


def test_get_rank_is_zero_outside_a_process_group():
    assert get_rank() == 0 and list(inspect.signature(get_rank).parameters) == []


@dataclasses.dataclass
class TrainConfig:
    """A stand-in of olmOCR's TrainConfig dataclass (what ``update_wandb_config`` sends as ``script``)."""

    model: dict = dataclasses.field(default_factory=lambda: {"name_or_path": "Qwen/Qwen2-VL-7B-Instruct"})
    max_steps: int = 2


def test_checkpoint_upload_callback_copies_each_saved_checkpoint_and_wandb_gets_the_configs(tmp_path, monkeypatch):
    from peft import LoraConfig, get_peft_model
    from transformers import Trainer, TrainerCallback, TrainingArguments

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    import wandb

    # wandb reads the environment once, when its process-wide settings are first made: a test earlier in this
    # worker may have made them with WANDB_MODE unset (online, asking for a login CI does not have)
    wandb.teardown()
    model = get_peft_model(tiny_llama(), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    rows = [{"input_ids": torch.arange(8) + i, "labels": torch.arange(8) + i} for i in range(4)]
    remote = tmp_path / "remote"
    logger = logging.getLogger("olmocr-test")
    callback = CheckpointUploadCallback(str(remote), logger=logger)
    assert isinstance(callback, TrainerCallback) and callback.logger is logger
    args = TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=2, save_steps=1, per_device_train_batch_size=2,
                             use_cpu=True, report_to=["wandb"], logging_steps=1)  # fmt: skip
    trainer = Trainer(model=model, args=args, train_dataset=rows, callbacks=[callback])
    trainer.train()
    for name in ("checkpoint-1", "checkpoint-2"):  # each save's newest checkpoint, copied whole
        local = {p.relative_to(tmp_path / "out" / name) for p in (tmp_path / "out" / name).rglob("*") if p.is_file()}
        copied = {p.relative_to(remote / name) for p in (remote / name).rglob("*") if p.is_file()}
        assert local and local <= copied
    update_wandb_config(TrainConfig(), trainer, model)
    assert wandb.run.config["script"] == {"model": {"name_or_path": "Qwen/Qwen2-VL-7B-Instruct"}, "max_steps": 2}
    assert wandb.run.config["peft"]["default"]["r"] == 4
    wandb.finish()
    with pytest.raises(ValueError, match="WandbCallback not found"):  # as olmOCR's: no W&B callback, no update
        update_wandb_config(TrainConfig(), Trainer(model=model, args=TrainingArguments(
            output_dir=str(tmp_path / "none"), report_to=[], use_cpu=True)), model)  # fmt: skip


def test_the_model_type_is_olmocrs_by_name_and_honings_by_the_checkpoints_config(tmp_path):
    """olmOCR picks the model class from the name (``qwen`` / ``molmo`` in it); honing reads ``model_type`` from
    the checkpoint's config.json, so a local copy named otherwise trains as the same model (the row says differs)."""
    from honing.config.schema import ModelSection
    from honing.models.tiny_vl import tiny_vl_config
    from honing.recipes.vl_sft import vl_model_type

    assert model_type_from_name("Qwen/Qwen2-VL-7B-Instruct") == "qwen2_vl"
    assert model_type_from_name("allenai/Molmo-7B-O-0924") == "molmo"
    with pytest.raises(ConfigError, match="names neither qwen nor molmo"):
        model_type_from_name("my-ocr-model")
    folder = tmp_path / "my-ocr-model"
    tiny_vl_config("qwen2_vl").save_pretrained(folder)
    assert vl_model_type(ModelSection(name_or_path=str(folder))) == "qwen2_vl"
