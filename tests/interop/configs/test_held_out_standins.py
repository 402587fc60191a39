"""The held-out training benchmark's stand-ins (benchmarks/held_out_standins.py): the model family read from a name,
the size caps, and generated rows that honing's own readers take for the named data set or the method."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

from held_out_standins import cap_sizes, family, stand_in, stand_in_source  # noqa: E402


@pytest.mark.parametrize(
    "name,expected",
    [
        ("HuggingFaceTB/SmolLM2-135M-Instruct", ("llama", False, True)),
        ("Qwen/Qwen3-8B", ("qwen3", False, True)),
        ("Qwen/Qwen2.5-VL-7B-Instruct", ("qwen2_5_vl", True, True)),
        ("/data/share/hub/models/olmOCR-2-7B-1025", ("qwen2_5_vl", True, True)),
        ("Qwen/Qwen2-VL-2B-Instruct", ("qwen2_vl", True, True)),
        ("allenai/Molmo-7B-D-0924", ("molmo2", True, True)),
        ("google/gemma-3-12b-it", ("gemma3_text", False, True)),
        ("Qwen/Qwen3-30B-A3B", ("qwen3_moe", False, True)),
        ("EleutherAI/pythia-70m", ("llama", False, False)),  # no row: a tiny llama, counted as unknown
    ],
)
def test_family_is_read_from_the_model_name_vl_patterns_first(name, expected):
    assert family(name) == expected


def test_sizes_above_what_three_cpu_steps_allow_are_capped_and_said():
    config = {"data": {"seq_len": 8192, "batch_size_per_rank": 16, "micro_batch_size": 2}}
    assert cap_sizes(config) == ["data.seq_len 8192->512", "data.batch_size_per_rank 16->8"]
    assert config["data"] == {"seq_len": 512, "batch_size_per_rank": 8, "micro_batch_size": 2}
    # a batch of 48 rows in micro batches of 6 keeps whole micro batches: 6, not 8 (honing refuses 8 / 6)
    odd = {"data": {"batch_size_per_rank": 48, "micro_batch_size": 6}}
    assert cap_sizes(odd) == ["data.batch_size_per_rank 48->6"] and odd["data"]["batch_size_per_rank"] == 6


def test_a_hub_data_set_becomes_a_local_file_in_its_own_columns_that_its_builder_reads(tmp_path):
    from honing.data.named.registry import named_dataset, named_row

    source = {"path": "Jiayi-Pan/Countdown-Tasks-3to4:train", "subset": "default"}
    assert stand_in_source(source, "grpo", tmp_path) == "named countdown rows"
    assert source["dataset"] == "countdown" and "subset" not in source and Path(source["path"]).is_file()
    first = Path(source["path"]).read_text().splitlines()[0]
    assert "prompt" in named_row(named_dataset("countdown"), json.loads(first))


def test_a_missing_file_with_column_mappings_gets_rows_in_the_users_columns(tmp_path):
    source = {"path": "/nowhere/pairs.jsonl", "columns": {"chosen": "good", "rejected": "bad"}}
    assert stand_in_source(source, "dpo", tmp_path) == "pairs rows"
    row = json.loads(Path(source["path"]).read_text().splitlines()[0])
    assert {"good", "bad", "messages"} <= set(row) and "chosen" not in row


def test_a_hub_source_in_prompt_completion_format_gets_rows_of_that_format_in_its_columns(tmp_path):
    # Oumi's PromptResponseDataset (hf_dataset_path, prompt_column, response_column) as converted
    source = {"path": "O1-OPEN/OpenO1-SFT:train", "format": "prompt_completion",
              "columns": {"prompt": "instruction", "completion": "output"}}  # fmt: skip
    assert stand_in_source(source, "sft", tmp_path) == "prompt_completion rows"
    row = json.loads(Path(source["path"]).read_text().splitlines()[0])
    assert set(row) == {"instruction", "output"} and all(isinstance(value, str) and value for value in row.values())


def test_a_local_file_that_exists_is_kept(tmp_path):
    here = tmp_path / "mine.jsonl"
    here.write_text("{}\n")
    source = {"path": str(here)}
    assert stand_in_source(source, "sft", tmp_path / "work") is None and source == {"path": str(here)}


def test_a_relative_cache_folder_of_the_config_goes_under_the_runs_temporary_folder(tmp_path):
    local = tmp_path / "model"
    local.mkdir()
    config = {"method": "sft", "model": {"name_or_path": str(local)}, "data": {"cache_dir": "pdfs"}}
    changed, notes, _ = stand_in(config, tmp_path / "work", tmp_path / "models")
    assert changed["data"]["cache_dir"] == str(tmp_path / "work" / "pdfs")
    assert any(note.startswith("data.cache_dir pdfs") for note in notes)
    absolute = {"method": "sft", "model": {"name_or_path": str(local)}, "data": {"cache_dir": str(tmp_path / "c")}}
    assert stand_in(absolute, tmp_path / "work", tmp_path / "models")[0]["data"]["cache_dir"] == str(tmp_path / "c")
