"""Keys of configs axolotl's users wrote that ask for nothing in their file (found by benchmarks/held_out_configs.py):
noted in one line, not refused; the same keys asking for something are still refused."""

import yaml

from honing.interop.configs import translate

BASE = """
base_model: m/m
datasets:
  - path: data/chat.jsonl
    type: sharegpt
sequence_len: 64
micro_batch_size: 1
learning_rate: 0.0001
"""


def translated(extra: str):
    return translate(yaml.safe_load(BASE + extra))


def test_an_empty_older_key_and_unused_sampling_lengths_are_notes():
    t = translated("debug:\neval_max_new_tokens: 128\neval_table_max_new_tokens: 128\neval_table_size:\n")
    assert t.refused == []
    assert any(note.startswith("debug: null") for note in t.notes)
    assert sum("axolotl samples no text at evaluation" in note for note in t.notes) == 2


def test_sampling_lengths_with_sampling_asked_and_a_set_unknown_key_are_refused():
    t = translated("debug: true\neval_table_size: 5\neval_max_new_tokens: 128\n")
    assert {line.split(":")[0] for line in t.refused} == {"debug", "eval_table_size", "eval_max_new_tokens"}


def test_special_tokens_and_tokens_reach_the_tokenizer_section():
    t = translated(
        'special_tokens:\n  pad_token: "<pad>"\n  eos_token: "</s>"\n  unk_token:\ntokens:\n  - "<|im_start|>"\n'
    )
    assert t.refused == []
    assert t.get("tokenizer.special_tokens") == {"pad_token": "<pad>", "eos_token": "</s>"}
    assert t.get("tokenizer.added_tokens") == ["<|im_start|>"]
    t = translated('special_tokens:\n  sep_token: "<sep>"\ntokens: "<x>"\n')
    assert sorted(line.split(":")[0] for line in t.refused) == ["special_tokens.sep_token", "tokens"]


def test_base_model_config_is_a_note_only_when_it_is_the_base_model():
    assert translated("base_model_config: m/m\n").refused == []
    assert translated("base_model_config: other/m\n").refused[0].startswith("base_model_config: not translated")


def test_sharegpt_conversation_names_the_chat_template():
    t = translate(yaml.safe_load(BASE.replace("type: sharegpt", "type: sharegpt\n    conversation: chatml")))
    assert t.refused == [] and t.get("data.chat_template") == "chatml"
    t = translate(yaml.safe_load(BASE.replace("type: sharegpt", "type: sharegpt\n    conversation: vicuna_v1.1")))
    assert [line.split(":")[0] for line in t.refused] == ["datasets[0].conversation"]
