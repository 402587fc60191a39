"""One evaluation before the first step (verl's ``trainer.val_before_train``): where a run starts from."""

from __future__ import annotations

from typing import TYPE_CHECKING

from honing.train.callbacks.base import Callback
from honing.train.callbacks.order import PRIORITY

if TYPE_CHECKING:
    from honing.train.callbacks.evaluator import EvaluatorCallback


class EvaluateBeforeTrainingCallback(Callback):
    """Runs ``evaluator.evaluate()`` (an ``EvaluatorCallback``) once before step 1, its metrics logged at step 0; a
    resumed run has its evaluations already."""

    priority = PRIORITY["evaluator"]

    def __init__(self, evaluator: EvaluatorCallback):
        self.evaluator = evaluator

    def on_train_begin(self) -> None:
        if self.step == 0:
            self.evaluator.evaluate()
