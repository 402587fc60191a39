"""What olmOCR's forks write under ``training:`` and ``model:`` beyond olmOCR's own keys: transformers'
``TrainingArguments`` fields read through honing's translation of that class (olmOCR's own keys keep their meaning),
Qwen-VL's ``tune_mm_*`` switches as ``model.freeze_*``, ``qwen3_settings``, ``model.max_memory`` and the forks' data
limits; keys that are neither olmOCR's nor transformers' stay refused in one line."""

from __future__ import annotations

import copy

from honing.config import validate
from honing.interop.configs import translate
from tests.interop.configs.test_olmocr_configs import TRAINER


def with_training(**keys):
    raw = copy.deepcopy(TRAINER)
    raw["training"].update(keys)
    return translate(raw)


def test_training_arguments_fields_are_read_through_transformers_translation():
    translation = with_training(max_steps=20, warmup_steps=10, bf16=True, fp16=False, tf32=True, ddp_timeout=600)
    assert translation.refused == []
    config = translation.config
    assert config["trainer"]["max_duration"] == "20steps"  # max_steps > 0 wins over num_train_epochs
    assert config["scheduler"]["warmup_steps"] == 10 and "warmup_ratio" not in config["scheduler"]  # steps win
    assert config["trainer"]["precision"] == "bf16"  # olmOCR's bf16 weights: bf16 noted, not turned into mixed
    assert config["parallel"]["timeout_seconds"] == 600
    assert any(note.startswith("training.tf32: not needed") for note in translation.notes)
    assert any(note.startswith("training.bf16: the run is in bf16 already") for note in translation.notes)
    constant = with_training(lr_scheduler_type="constant", warmup_steps=10)  # transformers' constant: no warmup
    assert any(note.startswith("training.warmup_steps: the warmup is ignored") for note in constant.notes)
    validate(config)


def test_olmocr_keys_keep_their_meaning_when_transformers_has_them_too():
    # eval_steps / save_steps / logging_steps / report_to are olmOCR's and transformers' alike: a transformers-only
    # key beside them (resume_from_checkpoint, read by translate_outputs) must not reset them to transformers' defaults
    translation = with_training(eval_steps=40, save_steps=80, logging_steps=7, resume_from_checkpoint="/ckpt")
    assert translation.refused == []
    callbacks = translation.config["callbacks"]
    assert callbacks["evaluator"]["interval"] == 40 and callbacks["checkpointer"]["save_interval"] == 80
    assert callbacks["console"]["log_interval"] == 7 and callbacks["evaluator"].get("enabled", True)
    assert translation.config["trainer"]["load_path"] == "/ckpt"


def test_a_refused_training_arguments_field_and_an_unknown_key_are_one_line_each():
    translation = with_training(label_smoothing_factor=0.1, warmup_stepz=3)
    assert translation.refused == [
        "training.label_smoothing_factor: not available: honing's losses take the labels as they are (no label "
        "smoothing of the LM loss)",
        "training.warmup_stepz: not translated: not a key of olmOCR's TrainingConfig, nor of transformers' "
        "TrainingArguments",
    ]


def test_forks_training_keys():
    translation = with_training(
        collator_max_token_len=2048, model_max_length=1024, collator_skip_over_max=True, pin_memory=True,
        max_train_samples=100, max_eval_samples=10,
    )  # fmt: skip
    assert translation.refused == []
    data = translation.config["data"]
    assert data["seq_len"] == 1024 and data["overlong"] == "drop"  # the shorter cut; over-long rows left out
    assert data["train"]["sources"][0]["max_samples"] == 100 and data["validation"]["sources"][0]["max_samples"] == 10
    assert any(note.startswith("training.pin_memory: not needed") for note in translation.notes)
    raw = copy.deepcopy(TRAINER)
    raw["dataset"]["train"].append({**raw["dataset"]["train"][0], "root_dir": "/data/c"})
    raw["training"]["max_train_samples"] = 100
    (line,) = translate(raw).refused
    assert line.startswith("training.max_train_samples: 100: the fork keeps the first 100 rows of its sources")


def test_tune_mm_switches_choose_the_trained_parts():
    raw = copy.deepcopy(TRAINER)
    raw["model"].update(use_lora=False, tune_mm_llm=True, tune_mm_mlp=True, tune_mm_vision=False)
    raw["model"]["max_memory"] = {0: "18GiB"}
    translation = translate(raw)
    assert translation.refused == []
    model = translation.config["model"]
    assert (model["freeze_vision"], model["freeze_projector"], model["freeze_language"]) == (True, False, False)
    assert any(note.startswith("model.max_memory: not needed") for note in translation.notes)
    validate(translation.config)
    raw["model"].update(tune_mm_llm=False, tune_mm_vision=True)
    model = translate(raw).config["model"]
    assert (model["freeze_vision"], model["freeze_projector"], model["freeze_language"]) == (False, False, True)
    raw["model"]["use_lora"] = True  # LoRA adapts the language model that tune_mm_llm: false freezes
    assert translate(raw).refused == [
        "model.tune_mm_llm: false with use_lora: LoRA adapts the language model it freezes"
    ]


def test_olmocrs_freeze_language_model_is_honoured():
    raw = copy.deepcopy(TRAINER)
    raw["model"].update(use_lora=False, freeze_language_model=True)
    translation = translate(raw)
    assert translation.refused == [] and translation.config["model"]["freeze_language"] is True


def test_qwen3_settings():
    raw = copy.deepcopy(TRAINER)
    raw["qwen3_settings"] = {
        "min_pixels": 784, "max_pixels": 50176, "merge_size": 2, "use_olmocr_pipeline": True, "model_type": "qwen3",
        "include_metadata": False, "prompt_first": True, "skip_validation": True,
    }  # fmt: skip
    translation = translate(raw)
    assert translation.refused == []
    data = translation.config["data"]
    assert (data["min_pixels"], data["max_pixels"], data["pdf_pages"]["prompt_first"]) == (784, 50176, True)
    raw["qwen3_settings"] = {"merge_size": 4, "prompt_first": False, "include_metadata": True, "max_pixel": 1}
    assert [line.split(":")[0] for line in translate(raw).refused] == [
        "qwen3_settings.merge_size",
        "qwen3_settings.prompt_first",  # the pipeline's InstructUserMessages says prompt_first: true
        "qwen3_settings.include_metadata",
        "qwen3_settings.max_pixel",
    ]
    raw["qwen3_settings"] = {}  # the section alone: the fork's pixel bounds
    data = translate(raw).config["data"]
    assert (data["min_pixels"], data["max_pixels"]) == (12544, 1658944)


def test_dataloader_drop_last_false_is_a_note_as_in_transformers_table():
    translation = with_training(dataloader_drop_last=False)
    assert translation.refused == [] and translation.config == translate(TRAINER).config
    assert any(note.startswith("training.dataloader_drop_last: not needed") for note in translation.notes)


def test_a_forks_dataset_cache_dir_is_honings_row_cache():
    # yinz-aizip/olmocr hands dataset.cache_dir to its page datasets: the prepared pages, cached once
    raw = copy.deepcopy(TRAINER)
    raw["dataset"]["cache_dir"] = "/scratch/olmocr-cache"
    translation = translate(raw)
    assert translation.refused == []
    assert translation.config["data"]["cache_dir"] == "/scratch/olmocr-cache"


def test_best_model_score_weights_are_the_metric_alone_or_refused_as_a_blend():
    # dahee325/vlmocr-finetune ranks checkpoints by eval_weight x metric + train_weight x train loss
    alone = with_training(best_model_eval_metric_weight=0.5, best_model_train_loss_weight=0)
    assert alone.refused == []
    assert any(note.startswith("training.best_model_eval_metric_weight: the fork's") for note in alone.notes)
    (line,) = with_training(best_model_eval_metric_weight=0.9, best_model_train_loss_weight=0.1).refused
    assert line.startswith("training.best_model_train_loss_weight: 0.1: the fork ranks checkpoints by")
    (line,) = with_training(best_model_eval_metric_weight=0, best_model_train_loss_weight=0).refused
    assert "one > 0" in line
