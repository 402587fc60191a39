"""Image content under text SFT: an error naming file:line, or a rejected row under ``data.bad_rows: skip``."""

import json

import pytest

from honing.config import validate
from honing.errors import DataError
from honing.recipes import SFTRecipe
from tests.helpers import TINY_LLAMA_CONFIG

GOOD = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
IMAGE = {
    "messages": [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "http://x/cat.png"}},
            ],
        },
        {"role": "assistant", "content": "A cat."},
    ]
}


def config(tmp_path, path, generation_eval=False, **data):
    raw = {
        "method": "sft",
        "trainer": {"save_folder": str(tmp_path / "run"), "max_duration": "2steps", "num_threads": 1},
        "data": {
            "train": {"sources": [{"path": str(path)}]},
            "chat_template": "chatml",
            "seq_len": 64,
            "global_batch_size": 2,
            "cache_dir": str(tmp_path / "cache"),
            **data,
        },
        "model": {"config": dict(TINY_LLAMA_CONFIG)},
        "callbacks": {"evaluator": {"enabled": False}, "sample": {"enabled": False}, "console": {"enabled": False}},
    }
    if generation_eval:
        raw["callbacks"]["generation_eval"] = {"enabled": True, "num_prompts": 2, "max_new_tokens": 2}
    return validate(raw)


@pytest.fixture
def image_rows(tmp_path):
    path = tmp_path / "chat.jsonl"
    path.write_text("\n".join(json.dumps(row) for row in [GOOD, GOOD, IMAGE] + [GOOD] * 5) + "\n")
    return path


def test_image_row_under_text_sft_names_file_and_line(tmp_path, image_rows):
    with pytest.raises(DataError) as info:
        SFTRecipe(config(tmp_path, image_rows)).run()
    message = str(info.value)
    assert "chat.jsonl:3: row has image content (image_url in messages[0])" in message
    assert "use method: vl_sft" in message and "\n" not in message


def test_image_row_is_rejected_under_bad_rows_skip(tmp_path, image_rows):
    recipe = SFTRecipe(config(tmp_path, image_rows, bad_rows="skip", packing=False))
    assert recipe.run().global_step == 2
    report = recipe.data_reports["train"]
    assert report.rejected == 1 and report.examples == 7
    assert "chat.jsonl:3: row has image content" in report.reasons[0]


def test_generation_eval_skips_a_rejected_image_row(tmp_path, image_rows):
    good = tmp_path / "good.jsonl"
    good.write_text("\n".join(json.dumps(GOOD) for _ in range(8)) + "\n")
    recipe = SFTRecipe(
        config(
            tmp_path,
            good,
            bad_rows="skip",
            packing=False,
            validation={"sources": [{"path": str(image_rows)}]},
            generation_eval=True,
        )
    )
    assert recipe.run().global_step == 2
    assert recipe.data_reports["validation"].rejected == 1
