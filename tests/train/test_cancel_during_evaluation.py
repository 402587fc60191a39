"""A signal during an evaluation (a scheduler's SIGTERM, one Ctrl-C) stops it between batches: the run saves and
ends without waiting for the evaluation, records none of its partial metrics, and skips the end-of-training one.
A cancel that is no signal (the loss watchdog) keeps the canceled run's final evaluation. One process here; two
ranks in tests/faults/test_sigterm_during_evaluation.py."""

from __future__ import annotations

import json
import logging
import os
import signal

from honing.data.eval_batches import EvalBatches
from honing.train import Callback, Checkpointer
from honing.train.callbacks.evaluate_before_training import EvaluateBeforeTrainingCallback
from honing.train.callbacks.evaluator import EvaluatorCallback
from honing.train.callbacks.generation_eval import GenerationEvalCallback
from tests.helpers import TokenDataset, make_trainer


class SignalAtBatch:
    """Validation batches that send this process ``signum`` as batch ``at`` of evaluation ``evaluation`` (counted
    from 1) is asked for; counts the batches they gave."""

    def __init__(self, at: int | None = None, evaluation: int = 1, signum: int = signal.SIGTERM):
        self.batches = EvalBatches(TokenDataset(rows=24, seed=5), batch_size=4)  # 6 batches
        self.at, self.evaluation, self.signum = at, evaluation, signum
        self.given = self.evaluations = 0

    def __iter__(self):
        self.evaluations += 1
        for index, batch in enumerate(self.batches):
            if self.evaluations == self.evaluation and index == self.at:
                os.kill(os.getpid(), self.signum)
            self.given += 1
            yield batch


def metrics(folder) -> list[dict]:
    with open(os.path.join(folder, "metrics.jsonl")) as handle:
        return [json.loads(line) for line in handle]


def run(tmp_path, evaluation: int, signum: int = signal.SIGTERM, before_training: bool = False):
    batches = SignalAtBatch(at=2, evaluation=evaluation, signum=signum)
    evaluator = EvaluatorCallback(batches=batches, interval=2)
    callbacks = {"evaluator": evaluator}
    if before_training:
        callbacks["evaluate_before_training"] = EvaluateBeforeTrainingCallback(evaluator)
    trainer = make_trainer(tmp_path, max_duration="8steps", callbacks=callbacks)
    trainer.fit()
    return trainer, batches


def test_a_sigterm_stops_the_evaluation_between_batches_and_the_run_saves(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        trainer, batches = run(tmp_path, evaluation=2)  # step 4's
    # step 2's evaluation: 6 batches; step 4's: stopped once its third batch was read; none at train end
    assert batches.given == 6 + 3
    assert trainer.canceled and trainer.cancel_reason == "received SIGTERM"
    assert trainer.global_step == 4  # the step in progress is finished, no further one
    assert Checkpointer.latest_checkpoint(str(tmp_path)).endswith("step4")
    evaluated = {row["step"] for row in metrics(tmp_path) if "eval/loss" in row}
    assert evaluated == {2}  # step 4's partial evaluation is not recorded
    assert "stopping the evaluation at step 4 after 2 of its batches (received SIGTERM)" in caplog.text
    assert caplog.text.count("the evaluation at step 4") == 1  # not tried again at train end


def test_one_ctrl_c_during_the_evaluation_before_training(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        trainer, batches = run(tmp_path, evaluation=1, signum=signal.SIGINT, before_training=True)
    # two evaluated (the third read) before training; the end-of-training one skipped on its first batch
    assert batches.given == 3 + 1
    assert "skipping the evaluation at step 1 (received SIGINT)" in caplog.text
    assert trainer.canceled and trainer.cancel_reason == "received SIGINT"
    assert trainer.global_step == 1
    assert not any("eval/loss" in row for row in metrics(tmp_path))


def test_a_cancel_that_is_no_signal_keeps_the_final_evaluation(tmp_path):
    class Watchdog(Callback):
        def on_step_end(self) -> None:
            if self.step == 3:
                self.trainer.cancel_run("loss watchdog: test")

    evaluator = EvaluatorCallback(batches=SignalAtBatch(at=None), interval=2)
    trainer = make_trainer(tmp_path, max_duration="8steps", callbacks={"evaluator": evaluator, "dog": Watchdog()})
    trainer.fit()
    assert trainer.canceled and trainer.global_step == 3
    assert {row["step"] for row in metrics(tmp_path) if "eval/loss" in row} == {2, 3}


def test_a_sigterm_stops_the_generation_evaluation_between_prompts(tmp_path):
    asked: list[str] = []

    def answer(prompt: str) -> str:
        asked.append(prompt)
        if len(asked) == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return "4"

    examples = [(f"{n} + 2 =", "4") for n in range(5)]
    generation = GenerationEvalCallback(answer, examples, interval=0, printer=lambda text: None)
    trainer = make_trainer(tmp_path, max_duration="8steps", callbacks={"generation_eval": generation})
    trainer.fit()
    # before training: stopped as the third prompt came up; at train end (a canceled run): skipped
    assert len(asked) == 2 and generation.history == []
    assert trainer.canceled and trainer.global_step == 1
    assert not any("eval/exact_match" in row for row in metrics(tmp_path))
