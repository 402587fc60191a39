"""Oumi and olmOCR configs translated to honing's: what each key becomes, and one refusal line per key that
cannot be honoured."""

import logging

import pytest
import yaml

from honing.config import ConfigError, load_config
from honing.interop.configs import convert_file, detect_dialect, load_any_config, translate

OUMI = """
model:
  model_name: gpt2-folder
  model_max_length: 128
  torch_dtype_str: float32
  chat_template: chat_ml
  freeze_layers: [model.layers.0]
data:
  train:
    datasets:
      - {dataset_name: text_sft_jsonl, dataset_path: train.jsonl, sample_count: 100}
      - {dataset_name: yahma/alpaca-cleaned, split: train}
  validation:
    datasets:
      - {dataset_name: text_sft_jsonl, dataset_path: valid.jsonl}
training:
  trainer_type: TRL_SFT
  output_dir: runs/oumi
  max_steps: 30
  per_device_train_batch_size: 4
  gradient_accumulation_steps: 2
  learning_rate: 2.0e-4
  lr_scheduler_type: cosine
  warmup_ratio: 0.1
  optimizer: adamw_torch_fused
  save_steps: 10
  eval_strategy: steps
  eval_steps: 5
  logging_steps: 2
  enable_gradient_checkpointing: true
  use_peft: true
peft:
  lora_r: 16
  lora_alpha: 32
  lora_target_modules: [q_proj, v_proj]
"""


def test_an_oumi_config_becomes_honing_keys():
    translation = translate(yaml.safe_load(OUMI))
    assert translation.refused == []
    config = translation.config
    assert config["method"] == "sft" and config["model"]["name_or_path"] == "gpt2-folder"
    assert config["data"]["train"]["sources"] == [
        {"path": "train.jsonl", "format": "conversation", "max_samples": 100},
        {"path": "yahma/alpaca-cleaned:train"},
    ]
    assert config["data"]["seq_len"] == 128 and config["data"]["chat_template"] == "chatml"
    assert config["data"]["batch_size_per_rank"] == 8 and config["data"]["micro_batch_size"] == 4
    assert config["trainer"] == {
        "max_duration": "30steps", "seed": 42, "save_folder": "runs/oumi", "precision": "fp32",
        "load_strategy": "never",  # Oumi's: start afresh (an earlier run's checkpoints are kept: honing's rule)
    }  # fmt: skip
    assert config["optim"]["lr"] == 2.0e-4 and config["optim"]["betas"] == [0.9, 0.999]
    # transformers' own cosine (to 0), step by step: the translation keeps the Trainer's schedule exactly
    assert config["scheduler"] == {"semantics": "transformers", "name": "cosine", "warmup_ratio": 0.1}
    assert config["callbacks"]["checkpointer"]["save_interval"] == 10
    assert config["callbacks"]["evaluator"]["interval"] == 5 and config["callbacks"]["console"]["log_interval"] == 2
    assert config["parallel"]["activation_checkpointing"] == "full"
    # dropout 0, bias none and task type CAUSAL_LM are Oumi's defaults and honing's alike: not written
    assert config["model"]["lora"] == {
        "rank": 16,
        "alpha": 32.0,
        "target_modules": ["q_proj", "v_proj"],
        "missing_targets": "skip",  # peft's rule, which Oumi follows
    }
    assert config["model"]["freeze_layers"] == ["model.layers.0"]


def test_every_key_that_cannot_be_honoured_is_refused_by_name_in_one_line(tmp_path):
    raw = yaml.safe_load(OUMI)
    raw["training"]["grpo"] = {"use_vllm": True}
    raw["training"]["made_up"] = 1
    raw["data"]["train"]["datasets"][0]["mixture_proportion"] = 0.5
    raw["model"]["chat_template"] = "molmo"  # another family's template, for a Qwen model
    path = tmp_path / "oumi.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError) as error:
        load_any_config(str(path))
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"{path}: read as an Oumi config; cannot honour: ")
    for key in (
        "model.chat_template: 'molmo' is not available",
        "data.train.datasets[0].mixture_proportion: given for some datasets only",
        "training.grpo: used by GRPO trainers only",
        "training.made_up: not a key of Oumi's TrainingConfig",
    ):
        assert key in message


def test_verl_grpo_maps_trainer_rewards_and_verl_overrides():
    raw = {
        "model": {"model_name": "m"},
        "data": {"train": {"datasets": [{"dataset_name": "x/countdown", "dataset_path": "rows.parquet"}]}},
        "training": {
            "trainer_type": "VERL_GRPO",
            "reward_functions": ["countdown", "mypkg.rewards:score"],
            "grpo": {"max_completion_length": 64, "num_generations": 4, "temperature": 0.7, "use_vllm": False},
            "verl_config_overrides": {
                "data": {"train_batch_size": 16, "max_prompt_length": 100},
                "actor_rollout_ref": {"actor": {"kl_loss_coef": 0.01, "ppo_epochs": 2}},
            },
        },
    }
    translation = translate(raw)
    assert translation.refused == []
    config = translation.config
    assert config["grpo"]["num_iterations"] == 2  # verl's ppo_epochs: passes over each rollout batch
    assert config["method"] == "grpo" and config["data"]["global_batch_size"] == 16
    assert config["grpo"]["rewards"] == [{"name": "verl:countdown"}, {"name": "verl:mypkg.rewards:score"}]
    assert config["grpo"]["beta"] == 0.01 and config["grpo"]["num_generations"] == 4
    assert config["data"]["seq_len"] == 164  # verl's prompt room + the completion's


def test_trl_grpo_batch_counts_completions():
    raw = {
        "model": {"model_name": "m"},
        "data": {"train": {"datasets": [{"dataset_name": "trl-lib/tldr"}]}},
        "training": {"trainer_type": "TRL_GRPO", "per_device_train_batch_size": 16, "grpo": {"num_generations": 4}},
    }
    data = translate(raw).config["data"]
    assert data["batch_size_per_rank"] == 16 // 4 and "global_batch_size" not in data  # per process, as TRL's


OLMOCR = """
model: {name_or_path: Qwen/Qwen2-VL-2B-Instruct, arch: causal, use_flash_attn: false}
wandb: {project: p, entity: e, wandb_api_key: wandb-secret}
aws: {access_key_id: AKID, secret_access_key: aws-secret, default_region: us-west-2}
train_data:
  seed: 7
  sources: [{name: pages, response_glob_path: "pages/*.jsonl", target_longest_image_dim: [1288]}]
valid_data:
  metric_for_best_model: eval_loss
  sources: [{name: held_out, response_glob_path: "held/*.jsonl"}]
hparams: {batch_size: 2, gradient_accumulation_steps: 8, max_steps: 100, clip_grad_norm: 0.0, lr_scheduler: cosine}
lora:
  rank: 32
  target_modules: [q_proj, "visual.blocks.[0-9]+.attn.qkv"]
save: {path: "s3://bucket/run", limit: 2}
"""


def test_an_olmocr_config_becomes_honing_keys_with_its_defaults():
    translation = translate(yaml.safe_load(OLMOCR))
    assert translation.refused == []
    config = translation.config
    assert config["method"] == "vl_sft" and config["trainer"]["seed"] == 7
    assert config["data"]["pdf_longest_side"] == 1288
    assert config["data"]["batch_size_per_rank"] == 16 and config["optim"]["grad_clip"] is None  # per device, as HF's
    assert config["callbacks"]["checkpointer"] == {"save_interval": 100, "keep_last": 2}  # eval_every_steps' default
    assert config["callbacks"]["upload"]["save_path"] == "s3://bucket/run"
    assert config["callbacks"]["evaluator"]["metric_for_best_model"] == "eval/loss"
    assert config["model"]["lora"]["target_modules"] == r"(?:.*\.)?(?:q_proj|visual.blocks.[0-9]+.attn.qkv)"
    assert config["model"]["lora"]["dropout"] == 0.05 and config["model"]["freeze_vision"] is False
    assert config["storage"]["aws_secret_access_key"] == "aws-secret"


def test_olmocr_secrets_never_reach_the_log_or_the_converted_file(tmp_path, caplog):
    path = tmp_path / "olmocr.yaml"
    path.write_text(OLMOCR)
    with caplog.at_level(logging.INFO, logger="honing.interop.configs"):
        config = load_any_config(str(path), ["data.train.sources[0].path=other/*.jsonl"])
    assert config.storage.aws_secret_access_key == "aws-secret" and config.data.train.sources[0].path == "other/*.jsonl"
    assert "aws-secret" not in caplog.text and "wandb-secret" not in caplog.text and "AKID" not in caplog.text
    text = convert_file(str(path), str(tmp_path / "honing.yaml"))
    assert "aws-secret" not in text and "# storage.aws_secret_access_key: a secret, not written" in text
    assert (tmp_path / "honing.yaml").read_text() == text


def test_honing_config_loads_honings_own_files_and_the_edge_loads_any(tmp_path):
    path = tmp_path / "oumi.yaml"
    path.write_text(OUMI)
    with pytest.raises(ConfigError, match="training: unknown key"):
        load_config(str(path))  # honing.config knows no other system's keys
    assert load_any_config(str(path)).method == "sft"


def test_dialects_are_told_apart_by_their_sections():
    assert detect_dialect({"model": {"name_or_path": "x"}, "data": {"train": {"sources": []}}}) is None
    assert detect_dialect({"training": {"trainer_type": "TRL_SFT"}}) == "oumi"
    assert detect_dialect({"hparams": {}, "model": {"name_or_path": "x"}}) == "olmocr"


def test_oumi_qlora_and_epoch_saves_map_to_honing_keys():
    raw = yaml.safe_load(OUMI)
    raw["peft"].update(q_lora=True, q_lora_bits=4, bnb_4bit_quant_type="nf4")
    raw["training"]["save_epoch"] = True
    translation = translate(raw)
    assert translation.refused == []
    assert translation.config["model"]["quantize"] == "nf4"
    assert translation.config["callbacks"]["checkpointer"]["save_at_epoch_end"] is True
    raw["peft"].update(q_lora_bits=8, bnb_4bit_quant_type=None)
    assert translate(raw).config["model"]["quantize"] == "int8"
    raw["peft"].update(q_lora_bits=4, bnb_4bit_quant_type="fp4")
    assert translate(raw).config["model"]["quantize"] == "fp4"
    raw["peft"].update(bnb_4bit_quant_type=None)  # Oumi's default: FP4, filled in and listed in the header
    translation = translate(raw)
    assert translation.config["model"]["quantize"] == "fp4"
    assert translation.defaults["model.quantize"] == "Oumi's peft.bnb_4bit_quant_type"
    raw["peft"].update(bnb_4bit_quant_type="int4")
    assert translate(raw).refused == [
        "peft.bnb_4bit_quant_type: 'int4' is not available: honing's 4-bit codes are nf4, fp4"
    ]


def test_oumi_auto_workers_is_a_note_and_a_value_of_the_wrong_type_one_refusal_line():
    raw = yaml.safe_load(OUMI)
    raw["training"]["dataloader_num_workers"] = "auto"  # as 91 of Oumi's published configs write it
    translation = translate(raw)
    assert translation.refused == [] and "num_workers" not in translation.config.get("data", {})
    assert any(note.startswith("training.dataloader_num_workers: 'auto'") for note in translation.notes)
    raw["training"]["dataloader_num_workers"] = "many"
    assert translate(raw).refused == [
        "training.dataloader_num_workers: 'many' cannot be read as int (for honing's data.num_workers)"
    ]
