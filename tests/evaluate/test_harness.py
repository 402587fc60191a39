"""lm-eval's results read into honing's per-task form, flat metrics and table; the end of turn stops generation."""

from __future__ import annotations

import math

from honing.evaluate.harness import _stop_at_end_of_turn, flat_metrics, format_table, task_results
from tests.helpers import tiny_llama

RESULTS = {
    "results": {
        "gsm8k_local": {
            "alias": "gsm8k_local",
            "exact_match,strict-match": 0.25,
            "exact_match_stderr,strict-match": 0.125,
            "exact_match,flexible-extract": 0.5,
            "exact_match_stderr,flexible-extract": "N/A",
        },
        "tiny": {"alias": "tiny", "acc,none": 1.0, "acc_stderr,none": 0.0, "bad,none": math.nan},
    },
    "n-samples": {"gsm8k_local": {"original": 1319, "effective": 4}, "tiny": {"original": 2, "effective": 2}},
    "n-shot": {"gsm8k_local": 5, "tiny": 0},
    "versions": {"gsm8k_local": 3.0, "tiny": 1.0},
    "configs": {"gsm8k_local": {"task": "gsm8k_local", "process_results": print}, "tiny": {"task": "tiny"}},
}


def test_results_become_per_task_metrics_flat_names_and_a_table():
    per_task = task_results(RESULTS)
    assert per_task["gsm8k_local"]["metrics"] == {"exact_match/strict-match": 0.25, "exact_match/flexible-extract": 0.5}
    assert per_task["gsm8k_local"]["stderr"] == {"exact_match/strict-match": 0.125}
    assert per_task["gsm8k_local"]["samples"] == 4 and per_task["gsm8k_local"]["num_fewshot"] == 5
    assert isinstance(per_task["gsm8k_local"]["config"]["process_results"], str)  # JSON can hold it
    assert flat_metrics(per_task) == {
        "eval/harness/gsm8k_local/exact_match/strict-match": 0.25,
        "eval/harness/gsm8k_local/exact_match/flexible-extract": 0.5,
        "eval/harness/tiny/acc": 1.0,  # NaN is left out
    }
    table = format_table(per_task).splitlines()
    assert table[2] == "| gsm8k_local | exact_match/strict-match | 0.2500 ± 0.1250 | 4 |"
    assert table[3] == "| gsm8k_local | exact_match/flexible-extract | 0.5000 | 4 |"


def test_the_end_of_turn_token_stops_generation_while_evaluating():
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {"<eos>": 0, "<|im_end|>": 1, "a": 2}
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="a")))
    tokenizer.add_special_tokens({"eos_token": "<eos>", "additional_special_tokens": ["<|im_end|>"]})
    model = tiny_llama(vocab=3)
    model.generation_config.eos_token_id = 0
    restore = _stop_at_end_of_turn(model, tokenizer)
    assert model.generation_config.eos_token_id == [0, 1]
    restore()
    assert model.generation_config.eos_token_id == 0
