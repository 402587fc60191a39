"""LLaMA-Factory's ``dataset_info`` columns and tags and axolotl's ``field_*`` / ``message_property_mappings`` /
``roles`` translate to a source's ``columns`` / ``roles``, and the translated sources read local files in those
columns as honing's rows (they were refused with "rename it in the data")."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq

from honing.config import validate
from honing.data.preference.pairs import load_pairs
from honing.data.row_reader import load_examples
from honing.interop.configs import translate

LLAMAFACTORY = {"model_name_or_path": "Qwen/Qwen2.5-0.5B", "do_train": True, "finetuning_type": "full",
                "template": "qwen", "dataset": "mine"}  # fmt: skip
AXOLOTL = {"base_model": "Qwen/Qwen2.5-0.5B", "learning_rate": 1e-5}


def turns(example):
    return [(message.role, message.content) for message in example.messages]


def llamafactory(tmp_path, entry: dict, **keys):
    (tmp_path / "dataset_info.json").write_text(json.dumps({"mine": entry}))
    translation = translate({**LLAMAFACTORY, "stage": "sft", "dataset_dir": str(tmp_path), **keys})
    assert translation.refused == [], translation.refused
    return translation


def test_llamafactory_alpaca_columns_of_other_names_read_a_parquet_file(tmp_path):
    pq.write_table(pa.table({"question": ["2+2?"], "answer": ["4"]}), tmp_path / "qa.parquet")
    entry = {"file_name": "qa.parquet", "columns": {"prompt": "question", "response": "answer"}}
    translation = llamafactory(tmp_path, entry)
    (source,) = translation.config["data"]["train"]["sources"]
    assert source["format"] == "alpaca" and source["columns"] == {"instruction": "question", "output": "answer"}
    (example,) = load_examples(validate(translation.config).data.train.sources).examples
    assert turns(example) == [("user", "2+2?"), ("assistant", "4")]


def test_llamafactory_sharegpt_tags_of_other_names_read_a_jsonl_file(tmp_path):
    row = {"dialog": [{"speaker": "USER", "text": "hello"}, {"speaker": "BOT", "text": "hi"}]}
    (tmp_path / "chats.jsonl").write_text(json.dumps(row) + "\n")
    tags = {"role_tag": "speaker", "content_tag": "text", "user_tag": "USER", "assistant_tag": "BOT"}
    entry = {"file_name": "chats.jsonl", "formatting": "sharegpt", "columns": {"messages": "dialog"}, "tags": tags}
    (source,) = llamafactory(tmp_path, entry).config["data"]["train"]["sources"]
    assert source["columns"] == {"conversations": "dialog", "from": "speaker", "value": "text"}
    assert source["roles"] == {"USER": "human", "BOT": "gpt"}
    (example,) = load_examples([source]).examples
    assert turns(example) == [("user", "hello"), ("assistant", "hi")]


def test_llamafactory_ranked_rows_of_other_names_read_as_pairs(tmp_path):
    row = {"chat": [{"role": "user", "content": "Say hi"}], "good": {"role": "assistant", "content": "hi"},
           "bad": {"role": "assistant", "content": "bye"}}  # fmt: skip
    (tmp_path / "pairs.jsonl").write_text(json.dumps(row) + "\n")
    tags = {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"}
    entry = {"file_name": "pairs.jsonl", "formatting": "sharegpt", "ranking": True,
             "columns": {"messages": "chat", "chosen": "good", "rejected": "bad"}, "tags": tags}  # fmt: skip
    (tmp_path / "dataset_info.json").write_text(json.dumps({"mine": entry}))
    translation = translate({**LLAMAFACTORY, "stage": "dpo", "dataset_dir": str(tmp_path)})
    assert translation.refused == [], translation.refused
    (source,) = translation.config["data"]["train"]["sources"]
    assert source["format"] == "preference"
    (pair,) = load_pairs([source]).pairs
    assert pair.chosen[-1]["content"] == "hi" and pair.rejected[-1]["content"] == "bye"


def test_axolotl_message_fields_and_roles_read_a_jsonl_file(tmp_path):
    row = {"dialog": [{"who": "customer", "says": "hello"}, {"who": "agent", "says": "hi there"}]}
    path = tmp_path / "chats.jsonl"
    path.write_text(json.dumps(row) + "\n")
    dataset = {"path": str(path), "type": "chat_template", "field_messages": "dialog",
               "message_property_mappings": {"role": "who", "content": "says"},
               "roles": {"user": ["customer"], "assistant": ["agent"]}}  # fmt: skip
    translation = translate({**AXOLOTL, "datasets": [dataset]})
    assert translation.refused == [], translation.refused
    (source,) = translation.config["data"]["train"]["sources"]
    assert source["columns"] == {"messages": "dialog", "role": "who", "content": "says"}
    (example,) = load_examples(validate(translation.config).data.train.sources).examples
    assert turns(example) == [("user", "hello"), ("assistant", "hi there")]


def test_axolotl_preference_fields_read_as_pairs(tmp_path):
    row = {"chat": [{"role": "user", "content": "Say hi"}], "yes": {"role": "assistant", "content": "hi"},
           "no": {"role": "assistant", "content": "bye"}}  # fmt: skip
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps(row) + "\n")
    dataset = {"path": str(path), "type": "chat_template.default", "field_messages": "chat", "field_chosen": "yes",
               "field_rejected": "no"}  # fmt: skip
    translation = translate({**AXOLOTL, "rl": "dpo", "datasets": [dataset]})
    assert translation.refused == [], translation.refused
    (source,) = translation.config["data"]["train"]["sources"]
    assert source["columns"] == {"messages": "chat", "chosen": "yes", "rejected": "no"}
    (pair,) = load_pairs([source]).pairs
    assert pair.prompt[-1]["content"] == "Say hi" and pair.rejected[-1]["content"] == "bye"


OUMI = {"model": {"model_name": "Qwen/Qwen2.5-0.5B-Instruct"}, "training": {"trainer_type": "TRL_SFT"}}
OUMI_VL = "Qwen/Qwen2-VL-2B-Instruct"


def oumi_source(dataset: dict):
    translation = translate({**OUMI, "data": {"train": {"datasets": [dataset]}}})
    assert translation.refused == [], translation.refused
    return validate(translation.config).data.train.sources, translation.config["data"]["train"]["sources"][0]


def test_oumi_huggingface_dataset_reads_its_messages_column(tmp_path):
    path = tmp_path / "chats.jsonl"
    row = {"dialog": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]}
    path.write_text(json.dumps(row) + "\n")
    dataset = {"dataset_name": "HuggingFaceDataset", "dataset_path": str(path),
               "dataset_kwargs": {"hf_dataset_path": "org/chats", "messages_column": "dialog"}}  # fmt: skip
    sources, source = oumi_source(dataset)
    assert source == {"path": str(path), "format": "conversation", "columns": {"messages": "dialog"}}
    (example,) = load_examples(sources).examples
    assert turns(example) == [("user", "hello"), ("assistant", "hi")]
    # no dataset_path: the hub data set itself, its split
    _, hub = oumi_source({**dataset, "dataset_path": None, "split": "test"})
    assert hub["path"] == "org/chats:test"


def test_oumi_prompt_response_dataset_reads_its_prompt_and_response_columns(tmp_path):
    pq.write_table(pa.table({"q": ["2+2?"], "a": ["4"]}), tmp_path / "qa.parquet")
    kwargs = {"hf_dataset_path": "org/qa", "prompt_column": "q", "response_column": "a"}
    dataset = {
        "dataset_name": "PromptResponseDataset",
        "dataset_path": str(tmp_path / "qa.parquet"),
        "dataset_kwargs": kwargs,
    }
    sources, source = oumi_source(dataset)
    assert source["columns"] == {"prompt": "q", "completion": "a"}
    (example,) = load_examples(sources).examples
    assert turns(example) == [("user", "2+2?"), ("assistant", "4")]
    refused = translate({**OUMI, "data": {"train": {"datasets": [{"dataset_name": "PromptResponseDataset"}]}}}).refused
    assert refused[0] == ("data.train.datasets[0].dataset_kwargs.hf_dataset_path: required by PromptResponseDataset: "
                          "the hub data set it reads")  # fmt: skip


def test_oumi_hf_vision_reads_its_image_question_and_answer_columns(tmp_path):
    cell = {"bytes": b"\x89PNG", "path": None}  # a hub Image cell: Oumi's image leads the question
    pq.write_table(pa.table({"image": [cell], "problem": ["Which?"], "solution": ["7"]}), tmp_path / "vqa.parquet")
    kwargs = {"hf_dataset_path": str(tmp_path / "vqa.parquet"), "image_column": "image",
              "question_column": "problem", "answer_column": "solution", "processor_name": OUMI_VL}  # fmt: skip
    dataset = {"dataset_name": "hf_vision", "dataset_kwargs": kwargs}
    translation = translate({**OUMI, "model": {"model_name": OUMI_VL}, "data": {"train": {"datasets": [dataset]}}})
    assert translation.refused == [] and translation.config["method"] == "vl_sft"
    source = translation.config["data"]["train"]["sources"][0]
    assert source["columns"] == {"images": "image", "instruction": "problem", "output": "solution"}
    (example,) = load_examples(validate(translation.config).data.train.sources).examples
    assert [item.type for item in example.messages[0].items()] == ["image_base64", "text"]
    assert turns(example)[1] == ("assistant", "7")
    hub = {**kwargs, "hf_dataset_path": "org/vqa", "system_prompt_column": "sys"}
    refused = translate(
        {**OUMI, "data": {"train": {"datasets": [{"dataset_name": "hf_vision", "dataset_kwargs": hub}]}}}
    )
    assert refused.config["data"]["train"]["sources"][0]["path"] == "org/vqa:train"
    assert refused.config["data"]["train"]["sources"][0]["columns"]["system"] == "sys"
    del hub["answer_column"]
    refused = translate(
        {**OUMI, "data": {"train": {"datasets": [{"dataset_name": "hf_vision", "dataset_kwargs": hub}]}}}
    )
    assert refused.refused[0].startswith("data.train.datasets[0].dataset_kwargs.answer_column: required by hf_vision")
