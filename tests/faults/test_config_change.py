"""Resuming with a changed config: a change that breaks the checkpoint (model shape, tokenizer, vocabulary)
refuses with one line naming the key and both values; other changes (lr, duration, intervals) are allowed and
listed in one warning. The refused run loses nothing: the checkpoints stay and the old config resumes them."""

import logging

import pytest

from honing.config import validate
from honing.errors import ConfigError
from honing.recipes import PretrainRecipe
from honing.train import Checkpointer
from honing.train.config_change import check_resume

CORPUS = "the quick brown fox jumps over the lazy dog. "


def raw_config(tmp_path, max_duration="4steps"):
    text = tmp_path / "corpus.txt"
    if not text.exists():
        text.write_text(CORPUS * 100)
    return {
        "trainer": {"save_folder": str(tmp_path / "run"), "max_duration": max_duration, "num_threads": 1},
        "data": {
            "train": {"sources": [{"path": str(text)}]},
            "seq_len": 16,
            "global_batch_size": 2,
            "cache_dir": str(tmp_path / "cache"),
        },
        "tokenizer": {"kind": "char"},
        "model": {
            "config": {
                "model_type": "llama",
                "hidden_size": 16,
                "num_hidden_layers": 1,
                "num_attention_heads": 2,
                "num_key_value_heads": 2,
                "intermediate_size": 32,
            }
        },
        "optim": {"lr": 1.0e-3},
        "callbacks": {
            "checkpointer": {"save_interval": 2, "async_save": False},
            "evaluator": {"enabled": False},
            "sample": {"enabled": False},
            "console": {"enabled": False},
            "speed_monitor": {"enabled": False},
        },
    }


def changed(raw, key, value):
    *parents, last = key.split(".")
    section = raw
    for part in parents:
        section = section[part]
    section[last] = value
    return raw


@pytest.fixture
def saved_run(tmp_path):
    PretrainRecipe(validate(raw_config(tmp_path))).run()
    assert [s for s, _ in Checkpointer.find_checkpoints(str(tmp_path / "run"))] == [2, 4]
    return tmp_path


def test_allowed_changes_resume_with_one_warning_listing_them(saved_run, caplog):
    raw = changed(raw_config(saved_run, max_duration="6steps"), "optim.lr", 2.0e-3)
    changed(raw, "callbacks.checkpointer.save_interval", 3)
    with caplog.at_level(logging.WARNING):
        trainer = PretrainRecipe(validate(raw)).run()
    assert trainer.global_step == 6
    warnings = [r.getMessage() for r in caplog.records if "changed config" in r.getMessage()]
    assert len(warnings) == 1
    assert "optim.lr: 0.001 -> 0.002" in warnings[0]
    assert 'trainer.max_duration: "4steps" -> "6steps"' in warnings[0]
    assert "callbacks.checkpointer.save_interval: 2 -> 3" in warnings[0]


@pytest.mark.parametrize(
    "key, value, message",
    [
        (
            "model.config.hidden_size",
            32,
            "model.config.hidden_size: the checkpoint {step4} was saved with 16, this run has 32",
        ),
        ("tokenizer.kind", "byte", 'tokenizer.kind: the checkpoint {step4} was saved with "char", this run has "byte"'),
    ],
)
def test_a_change_that_breaks_the_checkpoint_refuses_in_one_line(saved_run, key, value, message):
    raw = changed(raw_config(saved_run, max_duration="6steps"), key, value)
    with pytest.raises(ConfigError) as raised:
        PretrainRecipe(validate(raw)).run()
    text = str(raised.value)
    assert "\n" not in text
    assert message.format(step4=saved_run / "run" / "step4") in text
    # nothing lost: the checkpoints are untouched and the saved config still resumes them
    assert [s for s, _ in Checkpointer.find_checkpoints(str(saved_run / "run"))] == [2, 4]
    trainer = PretrainRecipe(validate(raw_config(saved_run, max_duration="6steps"))).run()
    assert trainer.global_step == 6


@pytest.mark.parametrize(
    "corpus, message",
    [
        (CORPUS + "!", r"model config.json vocab_size: the checkpoint .*step4 was saved with 31, this run has 32"),
        (
            CORPUS.upper(),
            r'tokenizer vocabulary: the checkpoint .*step4 was saved with "31 tokens", this run has '
            r'"31 tokens, \d+ differ',
        ),
    ],
    ids=["larger", "same-size"],
)
def test_a_changed_vocabulary_refuses(saved_run, corpus, message):
    # a char tokenizer's vocabulary comes from the corpus: new characters change the embedding's rows
    (saved_run / "corpus.txt").write_text(corpus * 100)
    with pytest.raises(ConfigError, match=message):
        PretrainRecipe(validate(raw_config(saved_run, max_duration="6steps"))).run()


def test_check_resume_without_saved_files_compares_nothing():
    assert check_resume("ckpt", {"config.yaml": None}, {"config.yaml": "optim: {lr: 1}"}) == []
    allowed = check_resume("ckpt", {"config.yaml": "optim: {lr: 1}"}, {"config.yaml": "optim: {lr: 2}\nrun_name: x"})
    assert [c.describe() for c in allowed] == ["optim.lr: 1 -> 2", 'run_name: (unset) -> "x"']


def test_a_key_only_one_side_knows_is_not_a_breaking_change():
    # a newer honing writes tokenizer.padding_side: its default is not the user's change
    saved = {"config.yaml": "tokenizer: {kind: char}\nmodel: {lora: null}"}
    newer = {"config.yaml": "tokenizer: {kind: char, padding_side: left}\nmodel: {lora: null}"}
    assert [c.key for c in check_resume("ckpt", saved, newer)] == ["tokenizer.padding_side"]
    # LoRA switched on is a change of the model: model.lora itself was saved (as null)
    lora = {"config.yaml": "tokenizer: {kind: char}\nmodel: {lora: {rank: 8}}"}
    with pytest.raises(
        ConfigError,
        match=r'^model.lora: the checkpoint ckpt was saved with null, this run has \{"rank": 8\}; a changed model',
    ):
        check_resume("ckpt", saved, lora)
