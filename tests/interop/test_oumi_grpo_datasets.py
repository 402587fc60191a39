"""Oumi's GRPO data sets through honing's Oumi surface (``honing.interop.oumi``): ``LetterCountGrpoDataset`` and
``CountdownGrpoDataset`` give the Oumi training-methods page's own TRL_GRPO and VERL_GRPO rows
(``../shared/seeds/003_*``) from the rows they were made of; ``Gsm8kGrpoDataset`` and ``CountdownGrpoDataset`` read
the real GSM8K and d1 countdown files (``../shared/data``) into verl's rows, which verl's rewards score; a user's
``@register_dataset`` subclass with its own ``transform`` gives its rows from Python and as a source's ``dataset:``
in a honing run. Each test skips where the shared file it reads is absent."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from honing.data.named.registry import named_dataset
from honing.data.prompts.prompts import read_prompt_sources
from honing.errors import DataError
from honing.interop import oumi
from honing.rl import resolve_reward
from tests.interop.document_blocks import oumi_blocks, seed_text

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"
VERL_COLUMNS = {"data_source", "prompt", "ability", "reward_model", "extra_info"}


def page_rows() -> tuple[dict, dict]:
    """The page's TRL_GRPO (``LetterCountGrpoDataset``) and VERL_GRPO (countdown) rows, as written (Python
    literals: single quotes, trailing commas)."""
    rows = [text for kind, text in oumi_blocks(seed_text("003")) if kind == "json"]
    letters, countdown = rows[-2:]
    return ast.literal_eval(letters), ast.literal_eval(countdown)


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def shared(relative: str) -> Path:
    path = SHARED / relative
    if not path.exists():
        pytest.skip(f"{path} is absent")
    return path


def test_letter_count_gives_the_pages_trl_grpo_row(tmp_path):
    letters, _ = page_rows()
    question = letters["prompt"][1]
    # the data set's own row (its columns as LetterCountGrpoDataset's docstring shows them) for the page's question
    metadata = {"letter": "l", "letter_count_integer": letters["letter_count"], "word": "substantial"}
    raw = {"conversation_id": "oumi_letter_count_0", "messages": [question], "metadata": metadata}
    path = write_jsonl(tmp_path / "letters.jsonl", [raw])
    dataset = oumi.LetterCountGrpoDataset(dataset_path=path, split="validation")
    assert len(dataset) == 1 and dataset[0] == letters
    # honing's named letter_count (what an Oumi config naming oumi-ai/oumi-letter-count trains on): the same prompt
    ((prompt, _),) = read_prompt_sources([{"path": path, "dataset": "oumi-ai/oumi-letter-count-clean"}])[0]
    assert prompt.prompt == letters["prompt"] and prompt.columns == {"letter_count": 1}
    conversation = dataset.conversation(0)
    assert [m.role for m in conversation.messages] == ["system", "user"]
    assert conversation.metadata["conversation_id"] == "oumi_letter_count_0"


def test_countdown_gives_the_pages_verl_grpo_row(tmp_path):
    _, countdown = page_rows()
    truth = countdown["reward_model"]["ground_truth"]
    path = write_jsonl(tmp_path / "countdown.jsonl", [{"target": truth["target"], "nums": truth["numbers"]}])
    row = oumi.CountdownGrpoDataset(dataset_path=path, split="train")[0]
    assert row == countdown
    conversation = oumi.CountdownGrpoDataset(dataset_path=path, split="train").conversation(0)
    assert conversation.messages[0].content == countdown["prompt"][0]["content"]
    assert set(conversation.metadata) == VERL_COLUMNS - {"prompt"}


def test_gsm8k_reads_the_real_test_split_into_verls_rows():
    path = shared("gsm8k/test.jsonl")
    dataset = oumi.Gsm8kGrpoDataset(dataset_path=str(path), split="test")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(dataset) == len(rows) == 1319
    first = dataset[0]
    assert set(first) == VERL_COLUMNS and first["data_source"] == "gsm8k"
    assert first["prompt"] == [
        {"role": "user", "content": rows[0]["question"] + ' Let\'s think step by step and output the final answer '
         'after "####".'}
    ]  # fmt: skip
    truth = rows[0]["answer"].rsplit("#### ", 1)[1].replace(",", "")
    assert first["reward_model"] == {"style": "rule", "ground_truth": truth}
    assert first["extra_info"] == {"split": "test", "answer": rows[0]["answer"], "question": rows[0]["question"]}
    score = resolve_reward("verl:gsm8k")
    columns = {key: [value, value] for key, value in first.items() if key != "prompt"}
    assert score(prompts=["p", "p"], completions=[f"so #### {truth}", "#### -1"], **columns) == [1.0, 0.0]


def test_countdown_reads_the_real_d1_tasks_with_honings_prompt_text(tmp_path):
    d1 = [json.loads(line) for line in shared("countdown/countdown_cd3_test.jsonl").read_text().splitlines()]
    # Oumi's d1shs0ap/countdown has target / nums columns: the file's input / output in them
    rows = [{"target": int(row["output"]), "nums": [int(n) for n in row["input"].split(",")]} for row in d1]
    dataset = oumi.CountdownGrpoDataset(dataset_path=write_jsonl(tmp_path / "cd.jsonl", rows))
    built = named_dataset("countdown").build
    assert len(dataset) == len(d1) == 256
    for index in (0, 255):
        assert set(dataset[index]) == VERL_COLUMNS and dataset[index]["extra_info"] == {"split": ""}
        assert dataset[index]["prompt"] == built(d1[index])["prompt"]  # honing's countdown: the same prompt text


def test_a_users_subclass_with_its_own_transform_gives_its_rows_in_python_and_in_a_honing_source(tmp_path):
    name = "test_oumi_grpo_datasets/echo"

    @oumi.register_dataset(name)
    class EchoGrpoDataset(oumi.BaseExperimentalGrpoDataset):
        default_dataset = name  # Oumi's rule: a data set has a name

        def transform(self, sample):
            return {"prompt": f"Say {sample['word']} twice.", "expected": f"{sample['word']} {sample['word']}"}

    path = write_jsonl(tmp_path / "words.jsonl", [{"word": "tic"}, {"word": "toc"}])
    assert oumi.REGISTRY[name] is EchoGrpoDataset
    assert list(EchoGrpoDataset(dataset_path=path).as_generator()) == [
        {"prompt": "Say tic twice.", "expected": "tic tic"},
        {"prompt": "Say toc twice.", "expected": "toc toc"},
    ]
    read = [prompt for prompt, _ in read_prompt_sources([{"path": path, "dataset": name}])[0]]
    assert [(p.prompt, p.columns) for p in read] == [
        ("Say tic twice.", {"expected": "tic tic"}),
        ("Say toc twice.", {"expected": "toc toc"}),
    ]


def test_the_base_class_checks_prompt_and_completion_as_oumi_does(tmp_path):
    path = write_jsonl(tmp_path / "pairs.jsonl", [{"prompt": "\nTL;DR this. ", "completion": " Short.\n"}])
    dataset = oumi.TldrGrpoDataset(dataset_path=path)
    assert dataset[0] == {"prompt": "TL;DR this.", "completion": "Short."}
    assert [m.role for m in dataset.conversation(0).messages] == ["user", "assistant"]
    with pytest.raises(ValueError, match="doesn't contain 'completion'"):
        oumi.TldrGrpoDataset(dataset_path=write_jsonl(tmp_path / "bad.jsonl", [{"prompt": "x"}]))[0]


def test_a_registered_name_of_honings_own_data_sets_is_refused_in_one_line():
    with pytest.raises(DataError, match="'countdown' is one of honing's named data sets"):
        oumi.register_dataset("countdown")(type("Clash", (oumi.BaseExperimentalGrpoDataset,), {}))
