"""``honing generate`` on the example configs' exports gives transformers' greedy text, batched or streamed."""

from __future__ import annotations

import json

import pytest

from honing.cli import main
from tests.infer.reference import transformers_greedy

pytestmark = pytest.mark.slow

CODE_PROMPTS = ["def ", "import json\n", "class Decoder(object):\n    def ", "    return ", "# the", "x = [1, 2"]
CHAT_PROMPTS = ["Reverse the letters: abcde", "Reverse the letters: zyx", "hello", "Reverse the letters: qwertyuiop"]


def generate_file(model, prompts, tmp_path, *args):
    """``honing generate MODEL --file`` in this process; the completions it wrote."""
    source, out = tmp_path / "prompts.jsonl", tmp_path / "answers.jsonl"
    source.write_text("".join(json.dumps({"prompt": p, "id": i}) + "\n" for i, p in enumerate(prompts)))
    assert main(["generate", str(model), "--file", str(source), "-o", str(out), "--batch-size", "4", *args]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [row["id"] for row in rows] == list(range(len(prompts)))  # the file's order and columns are kept
    return [row["completion"] for row in rows]


def test_quickstart_export_gives_transformers_greedy_text(quickstart_run, tmp_path, capsys):
    expected = transformers_greedy(quickstart_run / "hf", CODE_PROMPTS, 24, chat=False)
    assert all(len(answer) >= 8 for answer in expected)  # a stop token would hide decoding differences
    assert generate_file(quickstart_run, CODE_PROMPTS, tmp_path, "--max-new-tokens", "24") == expected
    capsys.readouterr()
    assert main(["generate", str(quickstart_run), "--prompt", CODE_PROMPTS[2], "--max-new-tokens", "24"]) == 0
    assert capsys.readouterr().out == expected[2] + "\n"  # streamed to the terminal piece by piece


def test_sft_export_and_its_checkpoint_give_transformers_greedy_chat_answers(sft_run, tmp_path, capsys):
    expected = transformers_greedy(sft_run / "hf", CHAT_PROMPTS, 16, chat=True)
    assert all(len(answer) >= 4 for answer in expected)
    assert generate_file(sft_run, CHAT_PROMPTS, tmp_path, "--max-new-tokens", "16") == expected
    # the last checkpoint holds the same weights as hf/: loaded from the DCP folder, it answers the same
    assert generate_file(sft_run / "step2", CHAT_PROMPTS, tmp_path, "--max-new-tokens", "16") == expected
    capsys.readouterr()
    assert main(["generate", str(sft_run / "hf"), "--prompt", CHAT_PROMPTS[0], "--max-new-tokens", "16"]) == 0
    assert capsys.readouterr().out == expected[0] + "\n"


def test_a_lora_checkpoint_is_merged_on_the_fly(lora_run, tmp_path):
    expected = transformers_greedy(lora_run / "hf", CHAT_PROMPTS, 12, chat=True)  # hf/: merged at export
    assert generate_file(lora_run / "step2", CHAT_PROMPTS, tmp_path, "--max-new-tokens", "12") == expected


def test_sampling_is_repeatable_by_seed_and_independent_of_the_batch(sft_run, tmp_path):
    args = ("--max-new-tokens", "12", "--temperature", "1.0", "--top-p", "0.9", "--seed", "7")
    together = generate_file(sft_run, CHAT_PROMPTS, tmp_path, *args)
    assert generate_file(sft_run, CHAT_PROMPTS, tmp_path, *args, "--batch-size", "1") == together
    assert generate_file(sft_run, CHAT_PROMPTS, tmp_path, *args[:-1], "8") != together


def test_bad_input_is_one_line_and_exit_2(sft_run, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"text": 3}\n')
    assert main(["generate", str(sft_run), "--file", str(bad)]) == 2
    assert capsys.readouterr().err == f'honing: error: {bad}:2: expected {{"prompt": TEXT}} or {{"messages": [...]}}\n'
    assert main(["generate", str(tmp_path / "nothing"), "--prompt", "x"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["generate", str(sft_run), "--prompt", "x", "--top-p", "0"]) == 2
    assert capsys.readouterr().err == "honing: error: --top-p: expected a value in (0, 1], got 0.0\n"
    assert main(["generate", str(sft_run), "--prompt", "x", "--image", "a.png"]) == 2
    assert "is a text model" in capsys.readouterr().err
