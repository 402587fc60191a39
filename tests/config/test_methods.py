"""``method`` selects which keys are used: refusals name the key and the method on one line; defaults never count."""

from __future__ import annotations

import copy
import json

import pydantic
import pytest

from honing.config import ConfigError, leaf_keys, load_config, validate
from honing.config.methods import METHODS, Method, refusals, unused_keys, users_of
from honing.config.schema import RunConfig, Section

# who reads a key grows with every method added: the messages name them in the table's order
GENERATION_EVAL_USERS = ", ".join(users_of("callbacks.generation_eval"))
BAD_ROWS_USERS = ", ".join(users_of("data.bad_rows"))
BASE = {"data": {"train": {"sources": [{"path": "corpus.txt"}]}}, "model": {"config": {"model_type": "llama"}}}


def raw_config(method: str = "pretrain", **sections) -> dict:
    raw = copy.deepcopy(BASE)
    raw["method"] = method
    for section, values in sections.items():
        raw.setdefault(section, {}).update(values)
    return raw


def refusal(raw: dict) -> str:
    with pytest.raises(ConfigError) as info:
        validate(raw)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_defaults_never_count_as_given():
    for method in METHODS:
        config = validate(raw_config(method))
        assert refusals(config, method) == []
    assert validate(raw_config("pretrain")).data.packing is True  # the default is there, just not given


@pytest.mark.parametrize(
    "section, values, line",
    [
        (
            "callbacks",
            {"generation_eval": {"enabled": True}},
            f"config: callbacks.generation_eval: not used by method 'pretrain' (used by: {GENERATION_EVAL_USERS})",
        ),
        ("callbacks", {"generation_eval": {}}, "config: callbacks.generation_eval: not used by method 'pretrain'"),
        ("data", {"packing": True}, "config: data.packing: not used by method 'pretrain' (used by: sft, vl_sft)"),
        ("data", {"chat_template": "chatml"}, "config: data.chat_template: not used by method 'pretrain'"),
        ("data", {"train_on": "all"}, "config: data.train_on: not used by method 'pretrain'"),
        ("data", {"group_by_length": False}, "config: data.group_by_length: not used by method 'pretrain'"),
        ("data", {"overlong": "drop"}, "config: data.overlong: not used by method 'pretrain'"),
        ("data", {"bad_rows": "skip"}, "config: data.bad_rows: not used by method 'pretrain'"),
        (
            "data",
            {"train": {"sources": [{"path": "a.json", "format": "alpaca"}]}},
            "config: data.train.sources[0].format: 'alpaca' not used by method 'pretrain'; expected one of: auto, "
            "text, jsonl",
        ),
    ],
)
def test_pretraining_refuses_fine_tuning_keys(section, values, line):
    assert refusal(raw_config("pretrain", **{section: values})).startswith(line)


def test_fine_tuning_refuses_what_it_does_not_read():
    jsonl = raw_config("sft", data={"validation": {"sources": [{"path": "a.jsonl"}, {"path": "b", "format": "jsonl"}]}})
    assert refusal(jsonl) == (
        "config: data.validation.sources[1].format: 'jsonl' not used by method 'sft'; expected "
        "one of: auto, text, conversation, alpaca, sharegpt, prompt_completion"
    )
    assert refusal(raw_config("sft", tokenizer={"kind": "bpe"})).startswith(
        "config: tokenizer.kind: 'bpe' not used by method 'sft'; expected one of: auto, byte, pretrained"
    )
    assert refusal(raw_config("sft", tokenizer={"vocab_size": 4096})) == (
        "config: tokenizer.vocab_size: not used by method 'sft' (used by: pretrain)"
    )


@pytest.mark.parametrize("method", ["sft", "dpo", "grpo", "vl_sft"])
def test_the_text_document_separator_is_refused_where_text_files_are_not_pretraining_documents(method):
    assert refusal(raw_config(method, data={"text_document_separator": "\n\n"})) == (
        f"config: data.text_document_separator: not used by method {method!r} (used by: pretrain)"
    )
    assert validate(raw_config("pretrain", data={"text_document_separator": "\n\n"})).data.text_document_separator


def test_every_refused_key_is_listed_on_one_line():
    message = refusal(
        raw_config(
            "pretrain", data={"packing": False, "bad_rows": "skip"}, callbacks={"generation_eval": {"enabled": True}}
        )
    )
    assert message == (
        "config: data.packing: not used by method 'pretrain' (used by: sft, vl_sft); data.bad_rows: not used "
        f"by method 'pretrain' (used by: {BAD_ROWS_USERS}); callbacks.generation_eval: not used by method "
        f"'pretrain' (used by: {GENERATION_EVAL_USERS})"
    )


def test_shared_features_are_accepted_for_pretraining():
    config = validate(
        raw_config(
            "pretrain",
            model={"config": {"model_type": "llama"}, "lora": {"rank": 4}, "freeze_layers": ["*layers.0*"]},
            optim={"param_groups": [{"params": "*embed*", "lr": 1e-4}]},
            callbacks={"evaluator": {"metric_for_best_model": "eval/loss", "greater_is_better": False}},
        )
    )
    assert config.model.lora.rank == 4 and config.optim.param_groups[0].lr == 1e-4


def test_a_refusal_from_an_override_names_the_file(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("data:\n  train:\n    sources: [{path: a.txt}]\nmodel:\n  config: {model_type: llama}\n")
    with pytest.raises(ConfigError) as info:
        load_config(str(path), ["callbacks.generation_eval.enabled=true"])
    assert (
        str(info.value)
        == f"{path}: callbacks.generation_eval: not used by method 'pretrain' (used by: {GENERATION_EVAL_USERS})"
    )
    assert load_config(str(path), ["method=sft", "callbacks.generation_eval.enabled=true"]).method == "sft"


def test_the_table_names_real_keys_and_sections():
    leaves = leaf_keys(RunConfig)
    for name, method in METHODS.items():
        for key in method.unused:
            assert any(leaf == key or leaf.startswith(key + ".") for leaf in leaves), f"{name}: unknown key {key}"
        for key in method.values:
            assert key in leaves, f"{name}: unknown key {key}"
        assert method.section is None or method.section in RunConfig.model_fields
    schema = RunConfig.model_json_schema()
    assert schema["properties"]["method"]["enum"] == list(METHODS)
    assert schema["x-honing-methods"]["pretrain"]["unused"] == sorted(unused_keys("pretrain"))  # + others' sections
    json.dumps(schema)


def test_a_method_with_its_own_section_is_one_table_line(monkeypatch):
    class DPOSection(Section):
        beta: float = 0.1

    class WithDPO(RunConfig):
        dpo: DPOSection | None = None

    monkeypatch.setitem(METHODS, "dpo", Method(unused=("data.packing",), section="dpo"))
    with pytest.raises(pydantic.ValidationError, match=r"dpo: not used by method 'sft' \(used by: dpo(, vl_dpo)?\)"):
        WithDPO.model_validate(raw_config("sft", dpo={"beta": 0.2}))
    config = WithDPO.model_validate(raw_config("sft", data={"packing": True}))
    assert refusals(config, "sft") == []
    assert refusals(config, "dpo") == ["data.packing: not used by method 'dpo' (used by: sft, vl_sft)"]
    assert refusals(config, "pretrain") == ["data.packing: not used by method 'pretrain' (used by: sft, vl_sft)"]


@pytest.mark.parametrize("method", ["sft", "grpo", "reward", "vl_dpo", "pretrain"])
def test_the_pair_caps_are_refused_where_no_text_pair_is_cut(method):
    line = refusal(raw_config(method, data={"max_prompt_length": 64}))
    assert line == f"config: data.max_prompt_length: not used by method {method!r} (used by: dpo, orpo, cpo, kto)"
    assert validate(raw_config("dpo", data={"max_prompt_length": 64})).data.max_prompt_length == 64
