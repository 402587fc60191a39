"""Named data sets (``honing.data.named``): each registered data set read from a 3-row local file in its hub columns
gives the prompt and answer its builder promises, and its reward scores a right answer 1 (a wrong one less); a hub
id as the path names the data set; rows in a data set's columns without the name get a one-line error naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from honing.config.data_schema import SourceSection
from honing.data.named.registry import NAMED_DATASETS, named_dataset
from honing.data.preference.pairs import load_pairs
from honing.data.prompts.prompts import read_prompt_sources
from honing.data.prompts.vision_prompts import read_vision_prompt_sources
from honing.data.row_reader import load_examples
from honing.data.sources import source_fields
from honing.errors import DataError
from honing.rl.rewards import resolve_reward

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"
SHARED_COUNTDOWN = SHARED / "countdown" / "countdown_cd3_test.jsonl"
SHARED_GSM8K = SHARED / "gsm8k" / "test.jsonl"
SHARED_ALPACA = SHARED / "alpaca_demo" / "alpaca_en_demo.json"


def write_jsonl(path: Path, rows: list[dict]) -> str:
    """``rows`` as JSON Lines at ``path``; the path as a string."""
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def prompts(path: str, dataset: str | None, **fields) -> list:
    """The GRPO prompts of one source."""
    return [prompt for prompt, _ in read_prompt_sources([{"path": path, "dataset": dataset, **fields}])[0]]


def score(reward: str, prompt, completions: list[str]) -> list[float]:
    """The named reward of each completion to ``prompt`` (its columns as the reward's keyword arguments)."""
    columns = {name: [value] * len(completions) for name, value in prompt.columns.items()}
    return resolve_reward(reward)([prompt.prompt] * len(completions), completions, **columns)


def test_countdown_rows_in_the_hubs_columns_become_tinyzeros_prompt_scored_by_both_countdown_rewards(tmp_path):
    path = write_jsonl(tmp_path / "countdown.jsonl", [{"target": 87, "nums": [79, 8]}, {"target": 24, "nums": [4, 6]}])
    found = prompts(path, "Jiayi-Pan/Countdown-Tasks-3to4")  # the hub id names it as well as 'countdown'
    content = found[0].prompt[0]["content"]
    assert (
        found[0].prompt[0]["role"] == "user"
        and "Using the numbers [79, 8], create an equation that equals 87" in content
    )
    assert content.endswith("Assistant: Let me solve this step by step.\n<think>")
    assert found[1].columns["reward_model"]["ground_truth"] == {"target": 24, "numbers": [4, 6]}
    answers = ["<think>x</think>\n<answer>79 + 8</answer>", "<answer>79 - 8</answer>"]
    assert score("countdown", found[0], answers) == [1.0, 0.0]
    assert score("verl:countdown", found[0], answers) == [1.0, 0.0]  # Oumi's VERL_GRPO reward reads reward_model


@pytest.mark.skipif(not SHARED_COUNTDOWN.is_file(), reason=f"{SHARED_COUNTDOWN} is absent (the shared data sets)")
def test_countdown_reads_d1s_published_file_whose_output_is_the_target():
    found = prompts(str(SHARED_COUNTDOWN), "countdown", max_samples=3)
    first = json.loads(SHARED_COUNTDOWN.read_text().splitlines()[0])  # {"input": "30,100,93", "output": "23"}
    assert found[0].columns["target"] == int(first["output"])
    assert found[0].columns["nums"] == [int(n) for n in first["input"].split(",")]
    assert score("countdown", found[0], ["<answer>30 - (100 - 93)</answer>"]) == [1.0]


GSM8K_ROWS = [
    {"question": "Tom has 3 apples and buys 4. How many?", "answer": "3 + 4 = <<3+4=7>>7\n#### 7"},
    {"question": "A box holds 1,200 pins; half are sold. How many remain?", "answer": "1200 / 2 = 600\n#### 600"},
    {"question": "What is 5 times 5?", "answer": "5 * 5 = 25\n#### 25"},
]


def test_gsm8k_is_the_question_with_oumis_instruction_answered_after_hashes(tmp_path):
    path = write_jsonl(tmp_path / "gsm8k.jsonl", GSM8K_ROWS)
    found = prompts(path, "gsm8k")
    assert found[1].prompt == [
        {"role": "user", "content": GSM8K_ROWS[1]["question"] + "\n\nLet's solve this step by step and provide the "
         "final answer after ####."}
    ]  # fmt: skip
    assert found[1].columns["answer"] == GSM8K_ROWS[1]["answer"]
    assert score("gsm8k", found[1], ["half: 600\n#### 600", "#### 601"]) == [1.0, 0.0]
    sft = load_examples([{"path": path, "dataset": "openai/gsm8k"}]).examples  # SFT: the worked answer is learned
    assert [m.role for m in sft[0].messages] == ["user", "assistant"] and sft[0].messages[1].content.endswith("#### 7")


@pytest.mark.skipif(not SHARED_GSM8K.is_file(), reason=f"{SHARED_GSM8K} is absent (the shared data sets)")
def test_gsm8k_reads_openais_published_test_file():
    found = prompts(str(SHARED_GSM8K), "gsm8k", max_samples=3)
    first = json.loads(SHARED_GSM8K.read_text().splitlines()[0])
    assert found[0].prompt[0]["content"].startswith(first["question"])
    gold = first["answer"].rsplit("#### ", 1)[1]
    assert score("gsm8k", found[0], [f"so\n#### {gold}"]) == [1.0]


def test_math_is_the_problem_with_verls_boxed_instruction_checked_by_math_verify(tmp_path):
    rows = [
        {"problem": "What is $1/2 + 1/4$?", "solution": "Add: $\\frac{3}{4}$. So $\\boxed{\\frac{3}{4}}$.",
         "level": "Level 1", "type": "Algebra"},
        {"problem": "Compute $2^3$.", "solution": "$2^3 = \\boxed{8}$", "level": "Level 1", "type": "Algebra"},
        {"problem": "Compute $3^2$.", "solution": "$\\boxed{9}$", "level": "Level 1", "type": "Algebra"},
    ]  # fmt: skip
    found = prompts(write_jsonl(tmp_path / "math.jsonl", rows), "lighteval/MATH")
    assert found[0].prompt[0]["content"].endswith("output the final answer within \\boxed{}.")
    pytest.importorskip("math_verify")
    assert score("math_verify", found[0], ["It is \\boxed{0.75}", "It is \\boxed{1/2}"]) == [1.0, 0.0]


def test_letter_count_prompts_carry_oumis_system_turn_and_the_count(tmp_path):
    rows = [
        {"conversation_id": f"oumi_letter_count_{i}",
         "messages": [{"role": "user", "content": f"How many '{letter}'s are in '{word}'?"}],
         "metadata": {"letter": letter, "letter_count_integer": count, "word": word}}
        for i, (letter, word, count) in enumerate([("r", "pandered", 1), ("s", "mississippi", 4), ("z", "cat", 0)])
    ]  # fmt: skip
    found = prompts(write_jsonl(tmp_path / "letters.jsonl", rows), "oumi-ai/oumi-letter-count")
    assert [m["role"] for m in found[1].prompt] == ["system", "user"] and "\\boxed{" in found[1].prompt[0]["content"]
    assert [p.columns["letter_count"] for p in found] == [1, 4, 0]
    assert score("count_letters", found[1], ["\\boxed{4}", "\\boxed{3}"])[0] == 0.0  # Oumi's: 0 when right


ALPACA_ROWS = [
    {"instruction": "Reverse the word.", "input": "cat", "output": "tac"},
    {"instruction": "Say hello.", "input": "", "output": "Hello!"},
    {"instruction": "Name a colour.", "input": "", "output": "Blue."},
]


def test_alpaca_gets_alpacas_system_line_and_its_input_under_a_heading(tmp_path):
    path = write_jsonl(tmp_path / "alpaca.jsonl", ALPACA_ROWS)
    examples = load_examples([{"path": path, "dataset": "yahma/alpaca-cleaned"}]).examples
    with_input, without = examples[0].messages, examples[1].messages
    assert with_input[0].content.startswith("Below is an instruction that describes a task, paired with an input")
    assert with_input[1].content == "Reverse the word.\n\n### Input:\ncat" and with_input[2].content == "tac"
    assert without[0].content.startswith("Below is an instruction that describes a task. Write")
    assert without[1].content == "Say hello."


@pytest.mark.skipif(not SHARED_ALPACA.is_file(), reason=f"{SHARED_ALPACA} is absent (the shared data sets)")
def test_alpaca_reads_llama_factorys_published_alpaca_file():
    examples = load_examples([{"path": str(SHARED_ALPACA), "dataset": "alpaca", "max_samples": 3}]).examples
    first = json.loads(SHARED_ALPACA.read_text())[0]
    assert (
        examples[0].messages[-1].content == first["output"] and first["instruction"] in examples[0].messages[1].content
    )


def test_ultrachat_dialogues_are_conversations_and_grpo_answers_their_last_turn(tmp_path):
    rows = [
        {"prompt": f"Q{i}", "prompt_id": f"id{i}",
         "messages": [{"role": "user", "content": f"Q{i}"}, {"role": "assistant", "content": f"A{i}"},
                      {"role": "user", "content": f"more {i}"}, {"role": "assistant", "content": f"B{i}"}]}
        for i in range(3)
    ]  # fmt: skip
    path = write_jsonl(tmp_path / "ultrachat.jsonl", rows)
    examples = load_examples([{"path": path, "dataset": "ultrachat"}]).examples
    assert [m.content for m in examples[2].messages] == ["Q2", "A2", "more 2", "B2"]
    found = prompts(path, "HuggingFaceH4/ultrachat_200k")  # not the 'prompt' column: the dialogue up to its answer
    assert len(found[0].prompt) == 3 and found[0].columns["answer"] == "B0" and found[0].columns["prompt_id"] == "id0"


def test_tldr_is_a_post_for_grpo_and_a_post_then_summary_for_sft(tmp_path):
    rows = [{"prompt": f"POST {i}\nTL;DR:", "completion": f" summary {i}"} for i in range(3)]
    path = write_jsonl(tmp_path / "tldr.jsonl", rows)
    found = prompts(path, "trl-lib/tldr")
    assert found[0].prompt == "POST 0\nTL;DR:" and found[0].columns == {"completion": " summary 0"}
    assert score("soft_20tokens_completions", found[0], [" ".join(["w"] * 20)]) == [pytest.approx(1.0)]
    examples = load_examples([{"path": path, "dataset": "tldr"}]).examples
    assert [(m.role, m.content) for m in examples[1].messages] == [
        ("user", "POST 1\nTL;DR:"),
        ("assistant", " summary 1"),
    ]


def test_geometry3k_puts_the_diagram_before_the_problem_with_oumis_instruction(tmp_path):
    Image.new("RGB", (8, 8), "white").save(tmp_path / "diagram.png")
    rows = [
        {"images": ["diagram.png"], "problem": f"<image>Find x if x + {i} = 5.", "answer": str(5 - i)} for i in range(3)
    ]
    path = write_jsonl(tmp_path / "geometry3k.jsonl", rows)
    examples = load_examples([{"path": path, "dataset": "hiyouga/geometry3k"}]).examples  # VL-SFT's rows
    user = examples[1].messages[0]
    assert [item.type for item in user.items()] == ["image_path", "text"]
    assert (
        user.items()[1].content.startswith("Find x if x + 1 = 5. You FIRST think")
        and examples[1].messages[1].content == "4"
    )
    (conversation, columns), _ = read_vision_prompt_sources([{"path": path, "dataset": "geometry3k"}])[0][2]
    assert columns["answer"] == "3" and len(conversation.images()) == 1  # VL-GRPO's prompt, math_verify's answer


def test_the_file_formats_by_oumis_names_read_their_rows_as_they_are(tmp_path):
    chats = [
        {"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]}
        for i in range(3)
    ]
    path = write_jsonl(tmp_path / "chats.jsonl", chats)
    assert load_examples([{"path": path, "dataset": "text_sft"}]).examples == load_examples([{"path": path}]).examples
    alpaca = write_jsonl(tmp_path / "alpaca.jsonl", ALPACA_ROWS)  # Oumi's text_sft_jsonl reads Alpaca rows too
    assert (
        load_examples([{"path": alpaca, "dataset": "text_sft_jsonl"}]).examples[0].messages[0].content
        == "Reverse the word.\n\ncat"
    )
    pairs = [
        {"messages": [{"role": "user", "content": f"q{i}"}], "chosen": f"good {i}", "rejected": f"bad {i}"}
        for i in range(3)
    ]
    loaded = load_pairs([{"path": write_jsonl(tmp_path / "pairs.jsonl", pairs), "dataset": "preference_pairs_jsonl"}])
    assert loaded.pairs[2].chosen == [{"role": "assistant", "content": "good 2"}]
    images = [{"messages": [{"role": "user", "content": [{"type": "image_path", "content": "d.png"},
               {"type": "text", "content": "what?"}]}, {"role": "assistant", "content": "a square"}]}]  # fmt: skip
    Image.new("RGB", (8, 8)).save(tmp_path / "d.png")
    vl = load_examples([{"path": write_jsonl(tmp_path / "vl.jsonl", images), "dataset": "vl_sft_jsonl"}]).examples
    assert vl[0].images()[0].content == str(tmp_path / "d.png")


def test_every_named_data_set_is_found_by_each_of_its_names():
    for entry in NAMED_DATASETS:
        assert all(named_dataset(name) is entry for name in entry.names)
        assert named_dataset(entry.name.upper()) is entry  # hub ids are matched without case, as the Hub does


def test_a_hub_id_as_the_path_names_the_data_set_with_its_configuration_and_split():
    gsm8k = source_fields({"path": "openai/gsm8k"}, 0)
    assert (gsm8k["dataset"], gsm8k["subset"], gsm8k["path"]) == ("gsm8k", "main", "openai/gsm8k")
    ultrachat = source_fields(SourceSection(path="HuggingFaceH4/ultrachat_200k"), 0)
    assert (ultrachat["dataset"], ultrachat["path"]) == ("ultrachat", "HuggingFaceH4/ultrachat_200k:train_sft")
    assert source_fields({"path": "trl-lib/tldr:test", "format": "prompt"}, 0)["dataset"] is None  # a format: as said


def test_rows_in_a_data_sets_columns_without_its_name_get_the_one_line_error_naming_it(tmp_path):
    path = write_jsonl(tmp_path / "countdown.jsonl", [{"target": 87, "nums": [79, 8]}])
    with pytest.raises(DataError) as info:
        prompts(path, None)
    message = str(info.value)
    assert message.startswith(f"{path}:1: cannot detect a prompt format from the keys 'target', 'nums'")
    assert message.endswith("'countdown' (Jiayi-Pan/Countdown-Tasks-3to4, d1shs0ap/countdown): set the source's "
                            "dataset: countdown") and "\n" not in message  # fmt: skip
    gsm8k = write_jsonl(tmp_path / "gsm8k.jsonl", GSM8K_ROWS)
    with pytest.raises(DataError, match=r"data set 'gsm8k' \(openai/gsm8k\): set the source's dataset: gsm8k;"):
        load_examples([{"path": gsm8k}])


def test_a_named_data_set_refuses_rows_without_its_columns_and_methods_that_read_other_rows(tmp_path):
    path = write_jsonl(tmp_path / "other.jsonl", [{"question": "q", "solution": "s"}])
    with pytest.raises(DataError, match=r"other.jsonl:1: row has the columns 'question', 'solution', not those of the "
                       r"named data set 'countdown' .*: 'target', 'nums' or 'input', 'output'$"):  # fmt: skip
        prompts(path, "countdown")
    countdown = write_jsonl(tmp_path / "countdown.jsonl", [{"target": 3, "nums": [1, 2]}])
    with pytest.raises(DataError, match=r"^data source 0 .*: the named data set 'countdown' .* gives prompts, and "
                       r"this method reads conversations or image conversations$"):  # fmt: skip
        load_examples([{"path": countdown, "dataset": "countdown"}])
    with pytest.raises(DataError, match=r"dataset 'countdwn' is not a named data set; expected one of: countdown, "):
        prompts(countdown, "countdwn")


def test_verls_rows_made_from_a_data_set_are_read_as_they_are(tmp_path):
    built = {"prompt": [{"role": "user", "content": "make 3"}], "reward_model": {"ground_truth": {"target": 3}}}
    found = prompts(write_jsonl(tmp_path / "verl.jsonl", [built]), "countdown")
    assert found[0].prompt == built["prompt"] and found[0].columns == {"reward_model": built["reward_model"]}


def test_a_source_gives_a_format_or_a_dataset_not_both():
    with pytest.raises(ValueError, match="give a source's format or its dataset, not both"):
        SourceSection(path="x.jsonl", dataset="gsm8k", format="conversation")


def test_a_hub_id_as_the_path_loads_the_hub_data_set_with_its_configuration_and_builds_its_rows(tmp_path, monkeypatch):
    import datasets

    local = write_jsonl(tmp_path / "gsm8k.jsonl", GSM8K_ROWS)
    real_load_dataset, calls = datasets.load_dataset, []

    def load_dataset(path, **kwargs):  # the hub is not reachable here: the same call, answered by a local file
        calls.append((path, kwargs))
        return real_load_dataset("json", data_files=local, split=kwargs["split"], streaming=kwargs["streaming"])

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    found = prompts("openai/gsm8k", None)
    assert calls == [("openai/gsm8k", {"split": "train", "streaming": True, "name": "main"})]
    assert found[2].columns["answer"] == GSM8K_ROWS[2]["answer"] and found[2].prompt[0]["content"].endswith("####.")


def test_every_data_set_oumis_translation_names_is_registered_under_that_hub_id():
    from honing.interop.configs.oumi_data import NAMED_DATASETS as OUMI_NAMES

    assert {oumi: named_dataset(oumi).name for oumi in OUMI_NAMES} == OUMI_NAMES
