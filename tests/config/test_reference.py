"""The key reference and ``honing config keys`` are rendered from the schema: every key has a description, and the
docs' page is what the schema renders today."""

from pathlib import Path

from honing.config import RunConfig, leaf_keys
from honing.config.reference import REGENERATE, config_keys, render_markdown, render_text

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "config.md"


def test_every_key_has_a_one_line_description_in_the_json_schema():
    keys = config_keys()
    assert sorted(key.path for key in keys) == sorted(leaf_keys(RunConfig))
    assert [key.path for key in keys if not key.description] == []
    schema = RunConfig.model_json_schema()
    trainer = schema["$defs"]["TrainerSection"]["properties"]["cancel_check_interval"]
    assert trainer["description"].startswith("SIGTERM / Ctrl-C is exchanged between ranks")


def test_keys_carry_type_default_and_the_methods_that_read_them():
    keys = {key.path: key for key in config_keys()}
    assert keys["trainer.num_threads"].type == "int or null, >= 1" and keys["trainer.num_threads"].default == "null"
    assert keys["trainer.precision"].type == "one of: fp32, bf16-mixed, fp16-mixed, bf16, fp8"
    assert keys["data.train.sources[].path"].default == "required"
    assert keys["callbacks.sample.prompts"].default == '["def "]'
    assert keys["data.document_masking"].methods == ("pretrain",)
    assert keys["grpo.beta"].methods == ("grpo", "vl_grpo")
    assert keys["tokenizer.kind"].values["vl_sft"] == ("auto", "pretrained")


def test_text_lists_each_key_with_its_default_and_description():
    keys = [key for key in config_keys() if key.path.startswith("trainer.")]
    text = render_text(keys)
    assert "trainer.max_duration: str = 100steps\n    How long to train: `200steps`" in text
    assert "data." not in text


def test_the_docs_key_reference_is_what_the_schema_renders():
    rendered = render_markdown()
    assert "| `trainer.cancel_check_interval` | int, &gt;= 1 | `1` | all | SIGTERM / Ctrl-C" in rendered
    assert PAGE.read_text(encoding="utf-8") == rendered, (
        f"{PAGE} is stale: the config schema changed since it was written; regenerate it with `{REGENERATE}`"
    )
