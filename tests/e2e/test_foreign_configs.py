"""Every example config of Oumi's training-methods page and olmOCR's TrainConfig runs through ``honing train`` (in
this process, through the CLI's own ``main``), with a local tiny model folder and local data in place of hub names
and ``/path/to/data``, and two steps instead of the example's length. What each test changes in the document's YAML
is listed beside it; everything else is the document's text."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest
import yaml

from honing.cli import main
from honing.config import apply_override
from tests.interop.configs.olmocr_data import batch_folder

# Shared by every example: a short run in the test's folder (the documents' own lengths are hours).
SHORT_RUN = ["training.max_steps=2", "training.per_device_train_batch_size=2", "training.save_steps=2"]


def _write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    """A tiny Llama with a byte tokenizer (ChatML template), a tiny Qwen2-VL with its processor, and data files."""
    import torch
    from transformers import AutoModelForImageTextToText

    from honing.data.chat.templates import NAMED_TEMPLATES
    from honing.data.generated.tasks import generate_rows, materialize
    from honing.data.tokenizer import build_tokenizer
    from honing.models.tiny_vl import build_tiny_processor, tiny_vl_config
    from tests.helpers import tiny_llama

    root = tmp_path_factory.mktemp("foreign")
    text_model = root / "tiny-llama"
    tokenizer = build_tokenizer("byte")
    tokenizer.chat_template = NAMED_TEMPLATES["chatml"]
    tokenizer.save_pretrained(text_model)
    tiny_llama(vocab=len(tokenizer), max_position_embeddings=512, eos_token_id=tokenizer.eos_token_id).save_pretrained(
        text_model
    )
    vl_model = build_tiny_processor("qwen2_vl", str(root / "tiny-qwen2-vl"))
    torch.manual_seed(0)
    AutoModelForImageTextToText.from_config(tiny_vl_config("qwen2_vl")).save_pretrained(vl_model)

    chats = generate_rows("reverse", samples=16, seed=0)
    pairs = [
        {
            "messages": [row["messages"][0]],
            "chosen": {"messages": [row["messages"][1]]},
            "rejected": {"messages": [{"role": "assistant", "content": "no"}]},
        }
        for row in chats
    ]
    countdown = [
        {
            "ability": "math",
            "data_source": "countdown",
            "extra_info": {"split": "train"},
            "prompt": [
                {
                    "role": "user",
                    "content": f"Using the numbers [{a}, {b}], create an equation that equals "
                    f"{a + b}. Return it in <answer> </answer> tags.",
                }
            ],
            "reward_model": {"ground_truth": {"numbers": [a, b], "target": a + b}, "style": "rule"},
        }
        for a, b in [(79, 8), (3, 4), (10, 2), (5, 6)]
    ]
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(countdown), root / "countdown.parquet")
    return {
        "root": root,
        "text_model": str(text_model),
        "vl_model": vl_model,
        "chats": _write_jsonl(root / "chats.jsonl", chats),
        "pairs": _write_jsonl(root / "pairs.jsonl", pairs),
        "corpus": _write_jsonl(root / "corpus.jsonl", [{"text": row["messages"][1]["content"] * 20} for row in chats]),
        "prompts": _write_jsonl(root / "tldr.jsonl", [{"prompt": r["messages"][0]["content"]} for r in chats]),
        "countdown": str(root / "countdown.parquet"),
        "ocr": materialize("generated:ocr?samples=8&seed=0", str(root / "cache")),
    }


def run_example(tmp_path: Path, document_yaml: str, changes: list[str], overrides: list[str] = ()) -> int:
    """Write the document's YAML with ``changes`` (dotted, list items by index) and train it; the exit code."""
    raw = yaml.safe_load(document_yaml)
    for change in changes:
        apply_override(raw, change)
    path = tmp_path / "foreign.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return main(["train", str(path), *overrides])


def losses(folder: Path) -> list[float]:
    """``train/loss`` of every step in a run's metrics.jsonl."""
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return [row["train/loss"] for row in rows if "train/loss" in row]


OUMI_SFT = """
data:
  train:
    datasets:
      - dataset_name: "text_sft"
        dataset_path: "/path/to/data"
        split: "train"
    collator_name: "text_with_padding"
training:
  trainer_type: "TRL_SFT"
"""


def test_oumi_sft_example_trains_and_its_conversion_trains_to_the_same_losses(assets, tmp_path, caplog, capsys):
    changes = [
        f"model={{model_name: {assets['text_model']}}}",  # the snippet leaves the model to the rest of the page
        f"data.train.datasets[0].dataset_path={assets['chats']}",
        f"training.output_dir={tmp_path / 'oumi'}",
        *SHORT_RUN,
    ]
    with caplog.at_level(logging.INFO, logger="honing.interop.configs"):
        assert run_example(tmp_path, OUMI_SFT, changes) == 0
    assert "read as an Oumi config, translated to honing's" in caplog.text and "method: sft" in caplog.text
    foreign = losses(tmp_path / "oumi")
    assert len(foreign) == 2 and all(math.isfinite(loss) for loss in foreign)

    converted = tmp_path / "converted.yaml"
    assert main(["convert", str(tmp_path / "foreign.yaml"), "-o", str(converted)]) == 0
    text = converted.read_text()
    assert text.startswith("# honing config translated from the Oumi config") and "format: conversation" in text
    assert main(["train", str(converted), f"trainer.save_folder={tmp_path / 'honing'}"]) == 0
    assert losses(tmp_path / "honing") == foreign


OUMI_VL_SFT = """
model:
  model_name: "meta-llama/Llama-3.2-11B-Vision-Instruct"
  chat_template: "llama3-instruct"
  freeze_layers: ["vision_encoder"] # Freeze specific layers to only train the language model, and not the vision encoder
data:
  train:
    collator_name: "vision_language_with_padding" # Visual features collator
    collator_kwargs: {} # Optional: Additional collator parameters
    datasets:
      - dataset_name: "vl_sft_jsonl"
        dataset_path: "/path/to/data"
        trust_remote_code: False # Set to true if needed for model-specific processors
        dataset_kwargs:
          processor_name: "meta-llama/Llama-3.2-11B-Vision-Instruct" # Feature generator
training:
  trainer_type: "TRL_SFT"
"""  # noqa: E501 (the document's text)


def test_oumi_vl_sft_example_trains_with_the_vision_encoder_frozen(assets, tmp_path):
    changes = [
        f"model.model_name={assets['vl_model']}",
        f"data.train.datasets[0].dataset_path={assets['ocr']}",
        f"data.train.datasets[0].dataset_kwargs.processor_name={assets['vl_model']}",
        f"training.output_dir={tmp_path / 'run'}",
        *SHORT_RUN,
    ]
    assert run_example(tmp_path, OUMI_VL_SFT, changes) == 0
    assert len(losses(tmp_path / "run")) == 2
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert saved["method"] == "vl_sft" and saved["model"]["freeze_layers"] == ["vision_encoder"]


OUMI_PRETRAINING = """
data:
  train:
    datasets:
      - dataset_name: "text"
        dataset_path: "/path/to/corpus"
        streaming: true # Stream data from disk and/or network
        pack: true # Pack multiple documents into a single sequence
        max_length: 2048 # Maximum sequence length
training:
  trainer_type: "OUMI"
"""


def test_oumi_pretraining_example_trains(assets, tmp_path):
    changes = [
        f"model={{model_name: {assets['text_model']}}}",
        f"data.train.datasets[0].dataset_path={assets['corpus']}",
        "data.train.datasets[0].max_length=64",  # the tiny model's context (the document: 2048)
        f"training.output_dir={tmp_path / 'run'}",
        *SHORT_RUN,
    ]
    assert run_example(tmp_path, OUMI_PRETRAINING, changes) == 0
    assert len(losses(tmp_path / "run")) == 2


OUMI_DPO = """
data:
  train:
    datasets:
      - dataset_name: "preference_pairs_jsonl"
        dataset_path: "/path/to/data"
    collator_name: "dpo_with_padding"
training:
  trainer_type: "TRL_DPO" # Use the TRL DPO trainer
"""


def test_oumi_dpo_example_trains(assets, tmp_path):
    changes = [
        f"model={{model_name: {assets['text_model']}}}",
        f"data.train.datasets[0].dataset_path={assets['pairs']}",
        f"training.output_dir={tmp_path / 'run'}",
        *SHORT_RUN,
    ]
    assert run_example(tmp_path, OUMI_DPO, changes) == 0
    assert len(losses(tmp_path / "run")) == 2


OUMI_GRPO = """
model:
  model_name: "Qwen/Qwen2-0.5B-Instruct"
data:
  train:
    datasets:
      - dataset_name: "trl-lib/tldr"
        split: "train"
training:
  trainer_type: "TRL_GRPO"
  # Specifies the name of a reward function in our reward function registry.
  reward_functions: ["soft_20tokens_completions"]
  grpo:
    use_vllm: True
"""

# GRPO runs: two completions of four tokens per prompt
GRPO_SHORT = ["training.grpo.num_generations=2", "training.grpo.max_completion_length=4"]


def test_oumi_grpo_example_trains_with_honings_decoder_where_vllm_cannot_run(assets, tmp_path, caplog):
    changes = [
        f"model.model_name={assets['text_model']}",
        f"data.train.datasets[0].dataset_path={assets['prompts']}",  # Oumi reads a hub dataset from a local path
        f"training.output_dir={tmp_path / 'run'}",
        *SHORT_RUN,
        *GRPO_SHORT,
    ]
    with caplog.at_level(logging.INFO, logger="honing.recipes.grpo_validation"):
        assert run_example(tmp_path, OUMI_GRPO, changes) == 0  # use_vllm: True as written
    assert len([r for r in caplog.records if r.getMessage().startswith("grpo.use_vllm: ")]) == 1
    assert len(losses(tmp_path / "run")) == 2


OUMI_VERL_GRPO = """
model:
  model_name: "Qwen/Qwen2-0.5B-Instruct"
data:
  train:
    datasets:
      - dataset_name: "Jiayi-Pan/Countdown-Tasks-3to4"
        split: "train"
  # verl requires a validation set.
  validation:
    datasets:
      - dataset_name: "Jiayi-Pan/Countdown-Tasks-3to4"
        split: "test"
training:
  trainer_type: "VERL_GRPO"
  reward_functions: ["countdown"]
  grpo:
    use_vllm: True
  verl_config_overrides:
    # This sets `data.train_batch_size` to 128 in the verl config.
    data:
      train_batch_size: 128
"""


def test_oumi_verl_grpo_example_reads_verl_rows_and_scores_with_verl_rewards(assets, tmp_path):
    changes = [
        f"model.model_name={assets['text_model']}",
        f"data.train.datasets[0].dataset_path={assets['countdown']}",  # verl's row format, as Parquet
        f"data.validation.datasets[0].dataset_path={assets['countdown']}",
        f"training.output_dir={tmp_path / 'run'}",
        "training.verl_config_overrides.data.train_batch_size=4",  # the document: 128 prompts a step
        *SHORT_RUN,
        *GRPO_SHORT,
    ]
    assert run_example(tmp_path, OUMI_VERL_GRPO, changes) == 0  # use_vllm: True and the validation set as written
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(losses(tmp_path / "run")) == 2 and "train/rewards/verl:countdown/mean" in rows[-1]
    # verl's val_before_train and test_freq -1: the held-out prompts are answered and scored before and at the end
    assert [row["step"] for row in rows if "eval/reward" in row] == [0, 2]
    assert "eval/rewards/verl:countdown/mean" in rows[-1]


OLMOCR_TRAIN_CONFIG = (Path(__file__).parent / "olmocr_qwen2vl_7b_lora.yaml").read_text()


def test_olmocr_train_config_trains_and_keeps_its_secrets_out_of_the_saved_config(assets, tmp_path, caplog):
    # olmOCR's own data: OpenAI batch responses naming local one-page PDFs (with a text layer for the anchor text)
    ocr = batch_folder(tmp_path / "batch", pages=4) / "done" / "*.json"
    changes = [
        f"model.name_or_path={assets['vl_model']}",
        "model.use_flash_attn=false",  # no flash attention on a CPU
        "model.dtype=float32",  # the CPU test trains in fp32 (the file: bfloat16)
        "wandb=null",
        f"train_data.sources=[{{name: ocr_train, response_glob_path: '{ocr}', target_longest_image_dim: [64], "
        "target_anchor_text_len: [6000]}]",
        f"train_data.cache_location={tmp_path / 'cache'}",
        f"valid_data.sources=[{{name: ocr_eval, response_glob_path: '{ocr}', target_longest_image_dim: [64], "
        "target_anchor_text_len: [6000]}]",
        f"valid_data.cache_location={tmp_path / 'cache'}",
        "valid_data.metric_for_best_model=ocr_eval_loss",  # its own metric: eval/ocr_eval/loss
        "hparams.max_steps=2",
        "hparams.eval_every_steps=2",
        "generate.max_length=1024",  # a page with its anchor text and reply: ~550 tokens
        f"save.path={tmp_path / 'uploaded'}",
        "save.save_every_steps=2",
        "aws={access_key_id: AKIDEXAMPLE, secret_access_key: very-secret}",
    ]
    with caplog.at_level(logging.INFO, logger="honing.interop.configs"):
        assert run_example(tmp_path, OLMOCR_TRAIN_CONFIG, changes, [f"trainer.save_folder={tmp_path / 'run'}"]) == 0
    assert "very-secret" not in caplog.text and "read as an olmOCR config" in caplog.text
    assert len(losses(tmp_path / "run")) == 2
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert any("eval/ocr_eval/loss" in row for row in rows)  # the source's own loss picks the best model
    saved = (tmp_path / "run" / "config.yaml").read_text()
    assert "very-secret" not in saved and "AKIDEXAMPLE" not in saved
    assert (tmp_path / "uploaded").is_dir()


def test_olmocr_train_config_as_written_is_refused_on_what_it_cannot_honour(assets, tmp_path, capsys):
    assert run_example(tmp_path, OLMOCR_TRAIN_CONFIG, []) == 2
    error = capsys.readouterr().err.strip()
    # every key of the file translates (its data too: honing reads olmOCR's batch responses and their PDFs); what
    # cannot be here is the data on the authors' machine (checked before any model) and the hub, named in one line
    assert error.count("\n") == 0
    assert "data.train.sources[0].path: no files match data path '/data/jakep/pdfdata/" in error
