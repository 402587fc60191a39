"""The shared step plumbing: non-finite losses, perplexity only for cross-entropy, tokens from the module."""

import json

import pytest
import torch

from honing.errors import NonFiniteLossError
from honing.train import Callback, StepSkipRange
from honing.train.metrics import ReduceType
from tests.helpers import flat_weights, make_trainer


class BreakEmbeddings(Callback):
    """Puts NaN into the input embeddings for step ``step`` (``restore``: only for that step)."""

    def __init__(self, step: int, restore: bool):
        self.at, self.restore, self.saved = step, restore, None

    def _embeddings(self):
        return self.trainer.train_module.model.get_input_embeddings().weight

    def on_step_begin(self):
        if self.step == self.at:
            self.saved = self._embeddings().detach().clone()
            with torch.no_grad():
                self._embeddings().fill_(float("nan"))

    def on_step_end(self):
        if self.step == self.at and self.restore:
            with torch.no_grad():
                self._embeddings().copy_(self.saved)


def metric_rows(folder):
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def test_nonfinite_loss_stops_before_saving_broken_weights(tmp_path):
    trainer = make_trainer(
        tmp_path / "run",
        max_duration="12steps",
        save_interval=4,
        dropout=0.0,
        callbacks={"breaker": BreakEmbeddings(3, restore=False)},
    )
    with pytest.raises(NonFiniteLossError, match="at step 3") as error:
        trainer.fit()
    assert "step 3" in str(error.value) and "nonfinite_loss=skip" in str(error.value)
    # the save of step 4 checked the losses first: no checkpoint holds the NaN weights
    assert not (tmp_path / "run" / "step4").exists()
    # the finite steps before it were still logged
    assert [row["step"] for row in metric_rows(tmp_path / "run") if "train/loss" in row] == [1, 2]


def test_skip_policy_leaves_the_weights_as_if_the_step_was_skipped(tmp_path):
    skipped = make_trainer(
        tmp_path / "a",
        max_duration="6steps",
        save_interval=100,
        dropout=0.0,
        nonfinite_loss="skip",
        callbacks={"breaker": BreakEmbeddings(3, restore=True)},
    )
    assert skipped.train_module.updater.skip_nonfinite  # the trainer section's policy reached the optimizer step
    skipped.fit()
    reference = make_trainer(
        tmp_path / "b", max_duration="6steps", save_interval=100, dropout=0.0, steps_to_skip=[StepSkipRange(3, 4)]
    )
    reference.fit()
    assert torch.equal(flat_weights(skipped), flat_weights(reference))
    rows = {row["step"]: row for row in metric_rows(tmp_path / "a")}
    assert rows[3]["optim/skipped_steps"] == 1 and "optim/grad_norm" not in rows[3]
    assert all(torch.isfinite(torch.tensor(rows[s]["train/loss"])) for s in (1, 2, 4, 5, 6))


def test_perplexity_only_for_a_cross_entropy_loss(tmp_path):
    trainer = make_trainer(tmp_path / "ce", max_duration="2steps")
    trainer.fit()
    assert all("train/perplexity" in row for row in metric_rows(tmp_path / "ce") if "train/loss" in row)

    class NotCrossEntropy(Callback):  # a method whose train/loss is e.g. a DPO loss
        def on_step_end(self):
            self.trainer.record_metric("train/loss", 0.5, ReduceType.mean, merge_strategy="latest")

    trainer = make_trainer(tmp_path / "other", max_duration="2steps", callbacks={"other": NotCrossEntropy()})
    trainer.train_module.record_loss = lambda loss, **kwargs: None  # the module records no loss of its own
    trainer.fit()
    rows = [row for row in metric_rows(tmp_path / "other") if "train/loss" in row]
    assert rows and all("train/perplexity" not in row for row in rows)


def test_tokens_per_step_come_from_the_train_module(tmp_path):
    trainer = make_trainer(tmp_path / "run", max_duration="3steps")
    trainer.train_module.num_tokens = lambda batch: 1000  # e.g. GRPO: prompt plus generated tokens
    trainer.fit()
    assert trainer.global_train_tokens_seen == 3000
