import json

import torch

from honing.data.eval_batches import EvalBatches
from honing.train.callbacks.evaluator import EvaluatorCallback
from tests.helpers import TokenDataset, make_trainer


def test_eval_loss_is_token_weighted_mean_and_leaves_model_in_train_mode(tmp_path):
    validation = EvalBatches(TokenDataset(rows=12, seed=5), batch_size=4)
    evaluator = EvaluatorCallback(batches=validation, interval=3, max_batches=2)
    trainer = make_trainer(tmp_path, max_duration="3steps", callbacks={"evaluator": evaluator}, dropout=0.0)
    trainer.fit()
    model = trainer.train_module.model
    model.eval()
    with torch.no_grad():
        rows = [validation.dataset[i]["input_ids"] for i in range(8)]  # the first 2 batches
        expected = model(input_ids=torch.stack(rows), labels=torch.stack(rows)).loss.item()
    model.train()
    result = evaluator.evaluate()
    assert abs(result["eval/loss"] - expected) < 1e-5
    assert 0.0 <= result["eval/token_accuracy"] <= 1.0
    assert evaluator.last_eval_step == 3
    assert model.training


def test_an_interval_fraction_is_a_share_of_the_runs_steps_known_once_the_data_is(tmp_path):
    # transformers' eval_steps below 1 (axolotl's eval_steps: 0.05 beside num_epochs): ceil(0.3 x 8 steps) = 3
    validation = EvalBatches(TokenDataset(rows=8, seed=5), batch_size=4)
    evaluator = EvaluatorCallback(batches=validation, interval=100, interval_fraction=0.3)
    trainer = make_trainer(tmp_path, max_duration="1epochs", rows=64, callbacks={"evaluator": evaluator})
    trainer.fit()
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert trainer.global_step == 8 and evaluator.interval == 3
    assert [line["step"] for line in lines if "eval/loss" in line] == [3, 6, 8]  # and the last step


def test_every_epoch_evaluates_at_each_epochs_last_step_and_not_every_interval(tmp_path):
    # transformers' eval_strategy "epoch" (Oumi's halloumi configs): 64 rows in batches of 8 are 8 steps an epoch
    validation = EvalBatches(TokenDataset(rows=8, seed=5), batch_size=4)
    evaluator = EvaluatorCallback(batches=validation, interval=3, every_epoch=True)
    trainer = make_trainer(tmp_path, max_duration="2epochs", rows=64, callbacks={"evaluator": evaluator})
    trainer.fit()
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps_per_epoch = trainer.progress.steps_per_epoch
    assert trainer.global_step == 2 * steps_per_epoch
    assert [line["step"] for line in lines if "eval/loss" in line] == [steps_per_epoch, 2 * steps_per_epoch]


def test_every_epoch_without_known_epoch_length_evaluates_when_the_epoch_ends(tmp_path, monkeypatch):
    # a loader that cannot tell its batches per epoch ahead (a streamed data set): the epoch's end event decides
    from honing.train.trainer_progress import Progress

    validation = EvalBatches(TokenDataset(rows=8, seed=5), batch_size=4)
    evaluator = EvaluatorCallback(batches=validation, interval=3, every_epoch=True)
    trainer = make_trainer(tmp_path, max_duration="20steps", rows=64, callbacks={"evaluator": evaluator})
    assert trainer.progress.steps_per_epoch == 8
    monkeypatch.setattr(Progress, "steps_per_epoch", property(lambda self: None))
    trainer.fit()
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines if "eval/loss" in line] == [8, 16, 20]  # and the last step
