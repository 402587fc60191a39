"""``callbacks.loss_watchdog`` (axolotl's ``loss_watchdog_threshold`` / ``loss_watchdog_patience``): a run whose loss
stays above the threshold for ``patience`` consecutive steps is stopped; one below it resets the count."""

import json

from honing.train.callbacks.loss_watchdog import LossWatchdogCallback
from tests.helpers import make_trainer


class FakeTrainer:
    """Keeps the cancel request the callback makes."""

    def __init__(self):
        self.reasons = []

    def cancel_run(self, reason, no_sync=False):
        self.reasons.append(reason)


def test_only_patience_consecutive_losses_above_the_threshold_cancel():
    callback, trainer = LossWatchdogCallback(threshold=5.0, patience=3), FakeTrainer()
    callback.attach(trainer)
    losses = [6.0, 7.0, 4.0, 6.0, 6.0, float("nan"), 6.0, 6.0, 6.0, 9.0]
    for step, loss in enumerate(losses, start=1):
        callback.on_log(step, {"train/loss": loss})
        if step == 8:
            assert trainer.reasons == []  # 4.0 and the NaN each broke the run of high losses
    assert len(trainer.reasons) == 1 and "for 3 consecutive steps" in trainer.reasons[0]
    assert "at step 9" in trainer.reasons[0]  # the third in a row; step 10 asks nothing more


def test_a_run_above_the_threshold_stops_after_the_step_that_decided_it(tmp_path):
    # a tiny Llama's loss starts near ln(64) ~ 4.2: every step is above 1.0
    trainer = make_trainer(
        tmp_path, max_duration="12steps", callbacks={"watchdog": LossWatchdogCallback(threshold=1.0)}
    )
    trainer.fit()
    logged = [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert trainer.canceled and "loss watchdog" in trainer.cancel_reason
    assert 3 <= trainer.global_step < 12 and max(logged) == trainer.global_step
    calm = LossWatchdogCallback(threshold=1e9)
    trainer = make_trainer(tmp_path / "calm", max_duration="4steps", callbacks={"watchdog": calm})
    trainer.fit()
    assert not trainer.canceled and trainer.global_step == 4
