"""Preference pairs: every format, bad rows, the shared demo files, tokenizing and over-long pairs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from honing.data.chat.conversation import ensure_special_tokens, resolve_chat_template
from honing.data.preference.batches import TokenizedPair, fit_pair, tokenize_pair
from honing.data.preference.pairs import PreferencePair, detect_preference_format, load_pairs, to_pair
from honing.data.tokenizer import build_tokenizer
from honing.errors import DataError

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"  # ../shared/data beside the repository

USER = [{"role": "user", "content": "What is 2 + 3?"}]
EXPECTED = PreferencePair(USER, [{"role": "assistant", "content": "5"}], [{"role": "assistant", "content": "6"}])

ROWS = {
    "preference": [
        {"messages": USER, "chosen": "5", "rejected": "6"},
        {"messages": USER, "chosen": {"role": "assistant", "content": "5"}, "rejected": [EXPECTED.rejected[0]]},
    ],
    "preference_prompt": [
        {"prompt": "What is 2 + 3?", "chosen": "5", "rejected": "6"},
        {"prompt": USER, "chosen": EXPECTED.chosen, "rejected": EXPECTED.rejected},
    ],
    "preference_sharegpt": [
        {
            "conversations": [{"from": "human", "value": "What is 2 + 3?"}],
            "chosen": {"from": "gpt", "value": "5"},
            "rejected": {"from": "gpt", "value": "6"},
        }
    ],
    "preference_transcript": [
        {"chosen": "\n\nHuman: What is 2 + 3?\n\nAssistant: 5", "rejected": "\n\nHuman: What is 2 + 3?\n\nAssistant: 6"}
    ],
}


@pytest.mark.parametrize("format", list(ROWS))
def test_every_format_reads_the_same_pair(format):
    for row in ROWS[format]:
        assert detect_preference_format(row) == format
        assert to_pair(row, format) == EXPECTED


def test_transcripts_split_at_the_last_shared_assistant_turn():
    # the replies part before the transcript's last turn: the prompt ends where both still agree
    chosen = "\n\nHuman: hi\n\nAssistant: hello\n\nHuman: and?\n\nAssistant: bye"
    rejected = "\n\nHuman: hi\n\nAssistant: go away"
    pair = to_pair({"chosen": chosen, "rejected": rejected}, "preference_transcript")
    assert pair.prompt == [{"role": "user", "content": "hi"}]
    assert pair.chosen[0]["content"] == "hello\n\nHuman: and?\n\nAssistant: bye"
    assert pair.rejected[0]["content"] == "go away"


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def test_bad_rows_fail_with_file_and_line_or_are_counted(tmp_path):
    rows = [
        {"messages": USER, "chosen": "5", "rejected": "6"},
        {"messages": USER, "chosen": "  ", "rejected": "6"},
        {"messages": USER, "chosen": "5", "rejected": "5"},
        {"messages": USER, "chosen": "5"},
    ]
    path = write_jsonl(tmp_path / "pairs.jsonl", rows)
    with pytest.raises(DataError, match=r"pairs.jsonl:2: the chosen completion is empty"):
        load_pairs([{"path": path}])
    loaded = load_pairs([{"path": path}], bad_rows="skip")
    assert len(loaded.pairs) == 1 and loaded.origins == [f"{path}:1"]
    assert loaded.report.count == 3
    reasons = loaded.report.first_reasons
    assert "chosen and rejected are the same" in reasons[1] and "missing key 'rejected'" in reasons[2]


def test_a_non_preference_format_is_refused(tmp_path):
    path = write_jsonl(tmp_path / "pairs.jsonl", ROWS["preference"])
    with pytest.raises(DataError, match="holds no preference pairs; expected auto or one of"):
        load_pairs([{"path": path, "format": "conversation"}])


@pytest.mark.skipif(not (SHARED / "dpo_demo").exists(), reason="../shared/data/dpo_demo is absent (a fresh clone)")
def test_llama_factory_demo_reads_every_pair():
    loaded = load_pairs([{"path": str(SHARED / "dpo_demo" / "dpo_en_demo.json")}])
    assert len(loaded.pairs) == 300 and loaded.report.count == 0
    assert all(pair.chosen[0]["role"] == "assistant" for pair in loaded.pairs)


@pytest.mark.skipif(not (SHARED / "hh_rlhf").exists(), reason="../shared/data/hh_rlhf is absent (a fresh clone)")
def test_hh_rlhf_reads_every_pair_but_those_with_an_empty_reply():
    loaded = load_pairs([{"path": str(SHARED / "hh_rlhf" / "harmless-base-test.jsonl.gz")}], bad_rows="skip")
    # 4 of the 2,312 transcripts end in an empty "Assistant:" turn: bad by the rule, counted, nothing else is
    assert len(loaded.pairs) == 2308 and loaded.report.count == 4
    assert all("completion is empty" in reason for reason in loaded.report.first_reasons)
    assert all(pair.prompt[0]["role"] == "user" and pair.prompt[-1]["role"] == "user" for pair in loaded.pairs)


@pytest.fixture(scope="module")
def tokenizer():
    tokenizer = build_tokenizer("byte")
    tokenizer.chat_template = resolve_chat_template(tokenizer, "chatml")
    ensure_special_tokens(tokenizer, "chatml")
    return tokenizer


def test_prompt_has_the_generation_prompt_and_completions_are_the_rest(tokenizer):
    tokenized = tokenize_pair(tokenizer, EXPECTED, chat_template="chatml")
    assert tokenizer.decode(tokenized.prompt_ids) == (
        "<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n<|im_start|>assistant\n"
    )
    # as in TRL: everything the rendered conversation adds after the prompt, the end-of-turn newline included
    assert tokenizer.decode(tokenized.chosen_ids) == "5<|im_end|>\n"
    assert tokenizer.decode(tokenized.rejected_ids) == "6<|im_end|>\n"


def test_overlong_pairs_lose_the_prompt_start_first_and_never_a_whole_completion():
    pair = TokenizedPair(list(range(10)), [100, 101, 102], [200])
    assert fit_pair(pair, 13, "truncate") is pair
    fitted = fit_pair(pair, 8, "truncate")
    assert fitted.prompt_ids == list(range(5, 10)) and fitted.chosen_ids == [100, 101, 102]
    assert fit_pair(pair, 8, "drop") is None
    # the completion alone would leave the prompt under half the length: both are cut, neither to nothing
    long = TokenizedPair(list(range(10)), list(range(100, 110)), [200])
    fitted = fit_pair(long, 6, "truncate")
    assert fitted.prompt_ids == [7, 8, 9] and fitted.chosen_ids == [100, 101, 102] and fitted.rejected_ids == [200]


def test_prompt_and_reply_caps_cut_every_pair_as_earlier_trl_did_then_seq_len_fits_it():
    pair = TokenizedPair(list(range(10)), [100, 101, 102, 103], [200, 201])
    # a prompt keeps its last tokens, each reply its first, though the pair fits seq_len (TRL 0.x's DPO tokenize_row)
    capped = fit_pair(pair, 100, "truncate", max_prompt=4, max_completion=3)
    assert (capped.prompt_ids, capped.chosen_ids, capped.rejected_ids) == ([6, 7, 8, 9], [100, 101, 102], [200, 201])
    assert fit_pair(pair, 100, "drop", max_prompt=4) is not None  # a cap cuts, it never drops
    # then seq_len as before: 4 + 3 > 6 cuts the capped prompt from its start
    fitted = fit_pair(pair, 6, "truncate", max_prompt=4, max_completion=3)
    assert fitted.prompt_ids == [7, 8, 9] and fitted.chosen_ids == [100, 101, 102]
    assert fit_pair(pair, 100, "truncate", max_prompt=10, max_completion=4) is pair  # nothing over a cap


def test_generated_preferences_are_written_once(tmp_path):
    from honing.data.generated.preferences import materialize

    path = materialize("generated:addition_preference?samples=5&seed=1", str(tmp_path))
    rows = [json.loads(line) for line in Path(path).read_text().splitlines()]
    assert len(rows) == 5 and os.path.basename(path) == "addition_preference-5-1-v2.jsonl"
    for row in rows:
        a, b = (int(x) for x in row["messages"][0]["content"].removeprefix("What is ").rstrip("?").split(" + "))
        assert a < 10 and b < 10 and int(row["chosen"]) == a + b and 1 <= abs(int(row["rejected"]) - (a + b)) <= 3
    assert materialize("generated:addition_preference?samples=5&seed=1", str(tmp_path)) == path
