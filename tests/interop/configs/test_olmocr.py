"""olmOCR's training API (its ``TrainConfig`` YAML, its entry points, its model families) as honing reads it: each
test proves rows of docs/coming-from.md's olmOCR section, key by key, on olmOCR's own published config."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from honing.config import validate
from honing.interop.configs import machine_options, translate

PUBLISHED = yaml.safe_load((Path(__file__).parents[2] / "e2e" / "olmocr_qwen2vl_7b_lora.yaml").read_text())
# the published file's anchor-text lengths: olmOCR's own prompt builder, which honing's rows do not need
ANCHOR_TEXT = "target_anchor_text_len"


def published(**changes):
    """olmOCR's published TrainConfig without its anchor-text lengths, with ``changes`` (dotted keys; None
    removes one) applied."""
    raw = copy.deepcopy(PUBLISHED)
    for split in ("train_data", "valid_data"):
        for source in raw[split]["sources"]:
            source.pop(ANCHOR_TEXT)
    for path, value in changes.items():
        *parents, last = path.split(".")
        node = raw
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value
    return raw


def translated(**changes):
    """The translation of ``published(**changes)``: no refusal, and honing's schema accepts it."""
    translation = translate(published(**changes))
    assert translation.refused == []
    validate(translation.config, source="olmocr")
    return translation


def refusals(**changes):
    """The refusal lines of ``published(**changes)``."""
    return translate(published(**changes)).refused


def noted(translation, key):
    """The note about ``key`` (exactly one)."""
    found = [note for note in translation.notes if note.startswith(f"{key}:")]
    assert len(found) == 1, (key, translation.notes)
    return found[0]


def test_the_entry_points_have_honings_counterparts():
    from honing.cli import main
    from honing.distributed import get_rank
    from honing.recipes import recipe_class
    from honing.train.callbacks.upload import CheckpointUploadCallback

    assert callable(main) and callable(recipe_class("vl_sft").run)  # run_train(config): honing train / .run()
    assert get_rank() == 0  # olmOCR's get_rank(): 0 outside a process group
    assert callable(CheckpointUploadCallback.on_checkpoint_saved)  # olmOCR's on_save: called at every save


def test_every_section_of_the_published_train_config_is_read_as_written():
    translation = translate(copy.deepcopy(PUBLISHED))
    # nothing is refused but the anchor-text lengths (olmOCR's own prompt builder; their row is their own)
    assert all(f".{ANCHOR_TEXT}: " in line for line in translation.refused)
    translation = translated()
    config = translation.config
    assert config["method"] == "vl_sft" and config["data"]["num_workers"] == 10  # max_workers
    assert config["callbacks"]["wandb"]["project"] == "pdelfin"
    assert [source["path"] for source in config["data"]["train"]["sources"]] == [
        source["response_glob_path"] for source in PUBLISHED["train_data"]["sources"]
    ]


def test_model_keys(monkeypatch):
    monkeypatch.setattr(machine_options, "flash_attention_installed", lambda name: True)
    config = translated().config
    assert config["model"]["name_or_path"] == "Qwen/Qwen2-VL-7B-Instruct"
    assert config["model"]["attn_implementation"] == "flash_attention_2"  # use_flash_attn: true, flash-attn here
    assert config["trainer"]["precision"] == "bf16"  # olmOCR loads the model in bfloat16
    changed = translated(**{"model.dtype": "float32", "model.trust_remote_code": True, "model.use_flash_attn": False})
    assert changed.get("trainer.precision") == "fp32" and changed.get("model.trust_remote_code") is True
    assert changed.get("model.attn_implementation") is None
    assert refusals(**{"model.arch": "seq2seq"}) == [
        "model.arch: 'seq2seq' is not available: honing trains with transformers ('causal')"
    ]


def test_qwen2_vl_is_a_family_and_the_original_molmo_is_not():
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    from honing.models.vl_families import FAMILIES

    for family in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl"):
        assert {"pixel_values", "image_grid_thw"} <= set(FAMILIES[family].model_input_keys)
    # olmOCR's Molmo is remote code (model_type "molmo"): neither honing's family nor transformers' image-text
    # model; transformers' own Molmo2 is both
    assert "molmo" not in FAMILIES and "molmo" not in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES
    assert "molmo2" in FAMILIES and "molmo2" in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES


def test_lora_keys_and_regex_targets():
    lora = translated().config["model"]["lora"]
    assert {key: lora[key] for key in ("rank", "alpha", "dropout", "task_type")} == {
        "rank": 32,
        "alpha": 32.0,
        "dropout": 0.05,
        "task_type": "CAUSAL_LM",
    }
    # regex entries: one peft regex, each entry matching a module name or its end
    assert lora["target_modules"].startswith(r"(?:.*\.)?(?:q_proj|k_proj|v_proj|o_proj|")
    plain = translated(**{"lora.target_modules": ["q_proj", "v_proj", "k_proj", "o_proj"], "lora.bias": "all"})
    assert plain.get("model.lora.target_modules") == ["q_proj", "v_proj", "k_proj", "o_proj"]
    assert plain.get("model.lora.bias") == "all"
    assert translated(lora=None).get("model.lora", "absent") is None  # no lora section: full fine-tuning


def test_data_sources_names_image_sizes_seed_and_cache():
    translation = translated()
    config = translation.config
    assert config["data"]["pdf_longest_side"] == 1024 and config["data"]["cache_dir"].endswith("pdelfin_cache")
    assert config["trainer"]["seed"] == 1337  # train_data.seed: honing's one seed
    noted(translation, "train_data.sources[0].name")  # a training source's name names it in messages only
    assert [source["name"] for source in config["data"]["validation"]["sources"]] == [
        "openai_batch_data_v5_1_eval",
        "openai_batch_data_v5_1_iabooks_eval",
    ]
    assert refusals(**{"hparams.seed": 42})[0].startswith(
        "train_data.seed: 1337 differs from hparams.seed (42): honing has one seed"
    )
    assert refusals(**{"train_data.sources.0.target_longest_image_dim": [1024, 1280]})[0].startswith(
        "train_data.sources[0].target_longest_image_dim: [1024, 1280]: olmOCR picks one size per example at random"
    )


@pytest.mark.parametrize(
    ("metric", "expected"),
    [
        ("eval_loss", "eval/loss"),
        ("openai_batch_data_v5_1_eval_loss", "eval/openai_batch_data_v5_1_eval/loss"),
    ],
)
def test_the_best_model_metric_and_loading_it_at_the_end(metric, expected):
    evaluator = translated(**{"valid_data.metric_for_best_model": metric}).config["callbacks"]["evaluator"]
    assert evaluator["metric_for_best_model"] == expected and evaluator["load_best_model_at_end"] is True


def test_hparams():
    config = translated().config
    assert config["optim"] == {
        "betas": [0.9, 0.999],
        "weight_decay": 0.01,
        "lr": 1e-4,
        "grad_clip": 1.0,
        "name": "adamw_torch",
    }
    assert config["scheduler"]["name"] == "cosine" and config["scheduler"]["warmup_ratio"] == 0.03
    assert config["data"]["micro_batch_size"] == 1  # batch_size
    # batch_size x gradient_accumulation_steps: the rows of a step on one process
    assert config["data"].get("batch_size_per_rank", config["data"].get("global_batch_size")) == 4
    assert config["trainer"]["max_duration"] == "10000steps"
    assert config["parallel"]["activation_checkpointing"] == "full"  # gradient_checkpointing
    assert config["callbacks"]["evaluator"]["batch_size"] == 1  # eval_batch_size
    assert config["callbacks"]["console"]["log_interval"] == 10 and config["callbacks"]["evaluator"]["interval"] == 100
    warmup = translated(**{"hparams.warmup_ratio": None, "hparams.warmup_steps": 50})
    assert warmup.get("scheduler.warmup_steps") == 50
    assert translated(**{"hparams.optim": "adamw_torch_fused"}).get("optim.name") == "adamw_torch_fused"
    # olmOCR's max_steps default (-1: 3 epochs of a data set it samples) has no honing equivalent
    assert refusals(**{"hparams.max_steps": None})[0].startswith("hparams.max_steps: -1: olmOCR then trains 3 epochs")


def test_moot_hparams_are_notes_and_a_summed_loss_is_refused():
    translation = translated(**{"hparams.find_unused_parameters": True, "num_proc": 8})
    for key in ("hparams.pad_multiple_of", "hparams.find_unused_parameters", "num_proc"):
        noted(translation, key)
    assert refusals(**{"hparams.reduce_loss": "sum"}) == [
        "hparams.reduce_loss: 'sum' is not available: honing averages the loss over the batch's tokens"
    ]


def test_save_generate_wandb_and_aws():
    translation = translated(
        **{"save.limit": 2, "wandb.wandb_api_key": "wandb-secret", "wandb.mode": "offline"},
        aws={"access_key_id": "AKID", "secret_access_key": "aws-secret", "default_region": "us-west-2"},
    )
    callbacks = translation.config["callbacks"]
    assert callbacks["upload"]["save_path"] == PUBLISHED["save"]["path"]
    assert callbacks["checkpointer"] == {"save_interval": 1000, "keep_last": 2}
    assert translation.get("data.seq_len") == 8192  # generate.max_length
    assert callbacks["wandb"] == {
        "enabled": True,
        "project": "pdelfin",
        "entity": "ai2-llm",
        "api_key": "wandb-secret",
        "mode": "offline",
    }
    assert translated(**{"wandb.api_key": "other-secret"}).get("callbacks.wandb.api_key") == "other-secret"
    assert translation.config["storage"] == {
        "aws_access_key_id": "AKID",
        "aws_secret_access_key": "aws-secret",
        "region": "us-west-2",
    }
    for name in ("temperature", "top_k", "top_p", "num_beams"):
        assert refusals(**{f"generate.{name}": 1}) == [
            f"generate.{name}: not used in training (olmOCR's inference pipeline reads it)"
        ]
    assert refusals(aws={"profile": "research"})[0].startswith(
        "aws.profile: not available: honing reads keys, not profiles; set AWS_PROFILE in the environment"
    )
