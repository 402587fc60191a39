"""KTO's rows: TRL's unpaired rows (plain and conversational, Oumi's TRL_KTO data), preference pairs turned into
two rows as TRL's unpair_preference_dataset does, and bad rows refused naming the file, the row and what was
expected; the held-out pairs found among the rows."""

from __future__ import annotations

import json

import pytest

from honing.data.preference.kto_examples import KTOExample, read_example_sources
from honing.data.preference.kto_rows import pair_ids
from honing.errors import DataError

USER, ASSISTANT = "user", "assistant"


def write(path, rows) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def examples(path, format="auto", bad_rows="fail"):
    found, report = read_example_sources([{"path": path, "format": format}], bad_rows=bad_rows)
    return [example for example, _ in found[0]], [origin for _, origin in found[0]], report


def test_trls_unpaired_rows_plain_and_conversational(tmp_path):
    rows = [
        {"prompt": "The sky is", "completion": " blue.", "label": True},
        {
            "prompt": [{"role": "user", "content": "Hi"}],
            "completion": [{"role": "assistant", "content": "Go away"}],
            "label": False,
        },
    ]
    found, origins, _ = examples(write(tmp_path / "kto.jsonl", rows))
    assert found == [
        KTOExample([{"role": USER, "content": "The sky is"}], [{"role": ASSISTANT, "content": " blue."}], True),
        KTOExample([{"role": USER, "content": "Hi"}], [{"role": ASSISTANT, "content": "Go away"}], False),
    ]
    assert origins == [f"{tmp_path / 'kto.jsonl'}:1", f"{tmp_path / 'kto.jsonl'}:2"]
    assert examples(str(tmp_path / "kto.jsonl"), format="prompt_completion")[0] == found


@pytest.mark.parametrize(
    "row",
    [
        {"prompt": "The sky is", "chosen": " blue.", "rejected": " green."},  # TRL's
        {"messages": [{"role": "user", "content": "The sky is"}], "chosen": " blue.", "rejected": " green."},  # Oumi's
        {
            "conversations": [{"from": "human", "value": "The sky is"}],
            "chosen": {"from": "gpt", "value": " blue."},
            "rejected": {"from": "gpt", "value": " green."},
        },  # LLaMA-Factory's (../shared/data/dpo_demo)  # fmt: skip
    ],
)
def test_a_pair_becomes_a_desirable_and_an_undesirable_row(tmp_path, row):
    found, origins, _ = examples(write(tmp_path / "pairs.jsonl", [row, row]))
    prompt = [{"role": USER, "content": "The sky is"}]
    assert found[:2] == [
        KTOExample(prompt, [{"role": ASSISTANT, "content": " blue."}], True),
        KTOExample(prompt, [{"role": ASSISTANT, "content": " green."}], False),
    ]
    assert len(found) == 4 and pair_ids([e.desirable for e in found], origins) == [0, 0, 2, 2]


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ({"prompt": "Hi", "completion": "Hello", "label": "yes"}, "'label' must be true (a desirable completion) or"),
        ({"prompt": "Hi", "completion": "", "label": True}, "the completion is empty; a KTO row needs a non-empty"),
        ({"prompt": "Hi", "reply": "Hello", "label": True}, "cannot detect a KTO format from the keys 'prompt', 'r"),
        ({"prompt": "Hi", "chosen": "same", "rejected": "same"}, "chosen and rejected are the same"),
    ],
)
def test_a_bad_row_names_the_file_the_row_and_what_was_expected(tmp_path, row, reason):
    good = {"prompt": "Hi", "completion": "Hello", "label": True}
    path = write(tmp_path / "kto.jsonl", [good, row] if "completion" in row else [row])
    line = 2 if "completion" in row else 1
    with pytest.raises(DataError, match="data.bad_rows: skip") as info:
        examples(path)
    assert str(info.value).startswith(f"{path}:{line}: {reason}"), str(info.value)
    if line == 2:  # skipped and counted instead
        found, _, report = examples(path, bad_rows="skip")
        assert len(found) == 1 and report.count == 1


def test_a_format_that_holds_no_kto_rows_is_refused(tmp_path):
    path = write(tmp_path / "chat.jsonl", [{"messages": [{"role": "user", "content": "Hi"}]}])
    with pytest.raises(DataError, match="format 'conversation' holds no KTO rows; expected auto or one of"):
        examples(path, format="conversation")


def test_only_a_desirable_row_followed_by_its_undesirable_twin_is_a_pair():
    labels = [True, False, True, True, False, False, True]
    origins = ["a:1", "a:1", "a:2", "a:3", "a:3", "a:4", "a:5"]
    assert pair_ids(labels, origins) == [0, 0, -1, 3, 3, -1, -1]
