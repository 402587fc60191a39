"""Pretraining from prepared token shards (``format: tokens``): exact resume mid-epoch, the tokenizer the
shards were made with, and a prepared folder on S3."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from honing.config import validate
from honing.data.text import pieces as text_pieces
from honing.data.text.corpus import tokenize_documents
from honing.data.text.token_windows import TokenSource
from honing.errors import DataError
from honing.recipes import PretrainRecipe
from honing.recipes.build_run import data_alone
from tests.helpers import TINY_LLAMA_CONFIG

WORDS = "the quick brown fox jumps over a lazy dog while seven wizards quietly hex".split()


def corpus(path, count, seed):
    rng = np.random.default_rng(seed)
    lines = [{"text": " ".join(rng.choice(WORDS, size=int(rng.integers(4, 40))))} for _ in range(count)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


def raw_config(tmp_path, sources, **data):
    return {
        "trainer": {"save_folder": str(tmp_path / "run"), "max_duration": "8steps", "num_threads": 1, "seed": 3},
        "data": {
            "train": {"sources": sources},
            "seq_len": 32,
            "global_batch_size": 4,
            "micro_batch_size": 2,
            "cache_dir": str(tmp_path / "cache"),
            **data,
        },
        "tokenizer": {"kind": "byte"},
        "model": {"config": {**TINY_LLAMA_CONFIG, "attention_dropout": 0.1}},
        "callbacks": {
            "checkpointer": {"save_interval": 4},
            "evaluator": {"interval": 4, "max_batches": 2},
            "sample": {"enabled": False},
            "console": {"enabled": False},
        },
    }


def prepare(tmp_path, name, count, seed, **tokenizer):
    raw = raw_config(tmp_path, [{"path": corpus(tmp_path / f"{name}.jsonl", count, seed)}])
    raw["tokenizer"].update(tokenizer)
    result = PretrainRecipe(validate(raw)).prepare(str(tmp_path / name), workers=1, shard_bytes=4096)
    assert len(result.index.shards) > 1
    return str(tmp_path / name)


def test_resume_mid_epoch_is_bit_identical_to_an_uninterrupted_run(tmp_path):
    sources = [
        {"path": prepare(tmp_path, "a", 150, 0), "format": "tokens"},
        {"path": prepare(tmp_path, "b", 80, 1), "format": "tokens", "weight": 0.5},
    ]
    raw = raw_config(tmp_path, sources, document_masking=True, validation_split=0.1)
    trainer = PretrainRecipe(validate(raw)).run()
    assert trainer.data_loader.batches_per_epoch > 8  # step 4 and step 8 are both mid-epoch
    save_folder = tmp_path / "run"
    expected = load_file(str(save_folder / "hf" / "model.safetensors"))
    expected_rows = [json.loads(line) for line in (save_folder / "metrics.jsonl").read_text().splitlines()]

    # as if the run had stopped right after its step-4 checkpoint
    shutil.rmtree(save_folder / "step8")
    shutil.rmtree(save_folder / "hf")
    resumed = PretrainRecipe(validate(raw)).run()
    assert resumed.global_step == 8
    actual = load_file(str(save_folder / "hf" / "model.safetensors"))
    for name in expected:
        assert torch.equal(expected[name], actual[name]), name
    rows = [json.loads(line) for line in (save_folder / "metrics.jsonl").read_text().splitlines()]
    losses = {row["step"]: row["train/loss"] for row in rows if "train/loss" in row}
    assert losses == {row["step"]: row["train/loss"] for row in expected_rows if "train/loss" in row}


def test_a_trained_tokenizer_is_read_back_from_the_prepared_folder(tmp_path):
    folder = prepare(tmp_path, "a", 60, 0, kind="char")
    raw = raw_config(tmp_path, [{"path": folder, "format": "tokens"}])
    raw["tokenizer"]["kind"] = "char"
    recipe = PretrainRecipe(validate(raw))
    assets, data = data_alone(recipe)
    assert len(assets.tokenizer) == len(set("".join(WORDS) + " ")) + 3  # characters + eos, pad, unk
    loader = data.train_loader
    assert assets.tokenizer.decode(next(iter(loader))["input_ids"][0]).replace("<|endoftext|>", " ").strip()


def test_shards_of_another_tokenizer_are_refused(tmp_path):
    folder = prepare(tmp_path, "a", 60, 0, kind="char")
    raw = raw_config(tmp_path, [{"path": folder, "format": "tokens"}])  # byte-level here
    with pytest.raises(DataError, match=r"data.train.sources\[0\] .*prepared with another tokenizer"):
        PretrainRecipe(validate(raw)).build_model_assets()


def test_prepare_to_s3_and_train_from_it(tmp_path, s3):
    raw = raw_config(tmp_path, [{"path": corpus(tmp_path / "a.jsonl", 100, 0)}])
    result = PretrainRecipe(validate(raw)).prepare(f"{s3.url}/tokens", workers=2, shard_bytes=2048)
    keys = s3.keys("tokens")
    assert "index.json" in keys and not any(".tmp-" in key for key in keys)
    assert sum(key.startswith("shard-") for key in keys) == len(result.index.shards) > 1
    again = PretrainRecipe(validate(raw)).prepare(f"{s3.url}/tokens", workers=1, shard_bytes=2048)
    assert again.up_to_date

    raw = raw_config(tmp_path, [{"path": f"{s3.url}/tokens", "format": "tokens"}])
    raw["trainer"]["max_duration"] = "2steps"
    trainer = PretrainRecipe(validate(raw)).run()
    assert trainer.global_step == 2


def test_raw_text_and_prepared_shards_split_a_text_file_on_the_separator_alike(tmp_path, monkeypatch):
    monkeypatch.setattr(text_pieces, "PIECE_BYTES", 64)  # prepare tokenizes long documents in pieces
    path = tmp_path / "corpus.txt"
    paragraphs = [" ".join(WORDS[i % 7 :] * (1 + i % 5)) for i in range(60)]
    path.write_text("\n\n".join(paragraphs) + "\n\n\n\ntrailing words")
    raw = raw_config(tmp_path, [{"path": str(path), "format": "text"}], text_document_separator="\n\n")
    recipe = PretrainRecipe(validate(raw))
    train, _ = recipe.text.documents()  # what training from the raw text reads
    assert train == [*paragraphs, "trailing words"]
    result = recipe.prepare(str(tmp_path / "tokens"), workers=1, shard_bytes=1024)
    assert len(result.index.shards) > 3 and result.index.num_documents == len(train)
    expected = tokenize_documents(train, recipe.model_assets().tokenizer, cache_dir=None)
    source = TokenSource(str(tmp_path / "tokens"), 16, cache_dir=str(tmp_path / "cache"))
    assert np.concatenate(source.tokens).tolist() == expected.tokens.tolist()
