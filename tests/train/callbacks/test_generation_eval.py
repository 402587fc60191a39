import json

import torch

from honing.train.callbacks.generation_eval import GenerationEvalCallback
from tests.helpers import flat_weights, make_trainer


def test_exact_match_before_during_and_after_training_without_touching_the_rng(tmp_path):
    printed = []

    def answer(prompt):
        torch.rand(3)  # sampling would draw random numbers: they must not change training
        return f" {prompt.upper()} " if trainer.global_step >= 4 else prompt

    examples = [("a", "A"), ("b", "B"), ("c", "x")]
    callback = GenerationEvalCallback(answer, examples, interval=4, printer=printed.append)
    trainer = make_trainer(tmp_path / "with", max_duration="6steps", callbacks={"generation": callback})
    trainer.fit()
    # step 0: nothing right; steps 4 and 6 (the end): a and b right (answers are stripped), c never
    assert callback.history == [(0, 0.0), (4, 2 / 3), (6, 2 / 3)]
    assert printed[0] == "held-out exact match before training: 0.0% (0/3) (e.g. expected 'A', got 'a')"
    assert printed[-1].startswith("held-out exact match after training (step 6): 66.7% (2/3)")
    rows = [json.loads(line) for line in (tmp_path / "with" / "generation_eval.jsonl").read_text().splitlines()]
    assert len(rows) == 9 and rows[3] == {"step": 4, "expected": "A", "answer": "A", "correct": True}
    logged = [json.loads(line) for line in (tmp_path / "with" / "metrics.jsonl").read_text().splitlines()]
    assert {row["step"]: row["eval/exact_match"] for row in logged if "eval/exact_match" in row} == {
        0: 0.0,
        4: 2 / 3,
        6: 2 / 3,
    }

    plain = make_trainer(tmp_path / "without", max_duration="6steps")
    plain.fit()
    assert torch.equal(flat_weights(trainer), flat_weights(plain))
