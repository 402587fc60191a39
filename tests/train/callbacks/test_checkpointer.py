import json

import pytest

from honing.train import Callback, Checkpointer
from honing.train.callbacks.checkpointer import CheckpointerCallback
from tests.helpers import make_trainer


def saved_steps(folder):
    return [step for step, _ in Checkpointer.find_checkpoints(str(folder))]


def test_keep_last_deletes_older_checkpoints(tmp_path):
    callback = CheckpointerCallback(save_interval=2, keep_last=2, async_save=True)
    make_trainer(tmp_path, max_duration="10steps", callbacks={"checkpointer": callback}).fit()
    assert saved_steps(tmp_path) == [8, 10]


def test_ephemeral_checkpoints_are_removed_once_a_later_one_exists(tmp_path):
    callback = CheckpointerCallback(save_interval=4, ephemeral_save_interval=1, async_save=False)
    trainer = make_trainer(tmp_path, max_duration="6steps", hard_stop="6steps", callbacks={"checkpointer": callback})
    trainer.fit()
    # permanent at 4; ephemeral 5 was superseded by 6 (the final save), earlier ephemerals by later saves
    assert saved_steps(tmp_path) == [4, 6]
    assert callback.next_save_step() == 7


def test_protected_checkpoint_survives_keep_last(tmp_path):
    callback = CheckpointerCallback(save_interval=2, keep_last=1, async_save=False, protected_steps={2})
    make_trainer(tmp_path, max_duration="8steps", callbacks={"checkpointer": callback}).fit()
    assert saved_steps(tmp_path) == [2, 8]


def test_final_checkpoint_is_not_saved_twice(tmp_path):
    callback = CheckpointerCallback(save_interval=3, async_save=True)
    trainer = make_trainer(tmp_path, max_duration="6steps", callbacks={"checkpointer": callback})
    trainer.fit()
    assert saved_steps(tmp_path) == [3, 6]


class SaveEphemeralAt(Callback):
    """A user callback asking the trainer for an ephemeral checkpoint, as OLMo-core scripts do."""

    priority = 100  # before the checkpointer, so the interval save of a later step supersedes it

    def __init__(self, step):
        self.at = step
        self.path = None

    def on_step_end(self):
        if self.step == self.at:
            self.path = self.trainer.save_checkpoint(ephemeral=True)


def test_an_ephemeral_save_is_removed_once_a_later_checkpoint_is_complete(tmp_path):
    user = SaveEphemeralAt(3)
    callback = CheckpointerCallback(save_interval=4, async_save=False)
    trainer = make_trainer(
        tmp_path, max_duration="8steps", hard_stop="3steps", callbacks={"checkpointer": callback, "user": user}
    )
    trainer.fit()  # stops at 3: the ephemeral save is the newest, so it is kept
    assert saved_steps(tmp_path) == [3]
    assert json.loads((tmp_path / "step3" / ".complete").read_text())["ephemeral"] is True
    resumed = CheckpointerCallback(save_interval=4, async_save=False)
    make_trainer(tmp_path, max_duration="8steps", callbacks={"checkpointer": resumed}).fit()
    assert saved_steps(tmp_path) == [4, 8]  # step4 complete: the ephemeral step3 went (tracked across the resume)


def test_a_permanent_save_is_kept(tmp_path):
    class SavePermanentAt(SaveEphemeralAt):
        def on_step_end(self):
            if self.step == self.at:
                self.trainer.save_checkpoint()

    callback = CheckpointerCallback(save_interval=4, async_save=False)
    callbacks = {"checkpointer": callback, "user": SavePermanentAt(3)}
    make_trainer(tmp_path, max_duration="8steps", callbacks=callbacks).fit()
    assert saved_steps(tmp_path) == [3, 4, 8]
    assert json.loads((tmp_path / "step3" / ".complete").read_text())["ephemeral"] is False


def test_no_checkpoints_saves_nothing_even_on_request(tmp_path):
    callback = CheckpointerCallback(save_interval=2, async_save=False)
    trainer = make_trainer(tmp_path, max_duration="4steps", no_checkpoints=True, callbacks={"checkpointer": callback})
    trainer.fit()
    callback.save_extra()  # what the best-model callback asks for
    assert saved_steps(tmp_path) == [] and trainer.last_checkpoint_step is None


def test_epoch_end_checkpoints_resume_exactly(tmp_path):
    import shutil

    import torch

    from tests.helpers import flat_weights

    def run(folder):
        callback = CheckpointerCallback(save_interval=100, async_save=True, save_at_epoch_end=True)
        trainer = make_trainer(folder, max_duration="3epochs", rows=64, callbacks={"checkpointer": callback})
        trainer.fit()
        return trainer

    whole = run(tmp_path / "whole")  # 64 rows, 8 a step: 8 steps an epoch
    assert saved_steps(tmp_path / "whole") == [8, 16, 24]
    (tmp_path / "resumed").mkdir()
    shutil.copytree(tmp_path / "whole" / "step8", tmp_path / "resumed" / "step8")  # the first epoch's end only
    resumed = run(tmp_path / "resumed")
    assert resumed.global_step == 24
    assert torch.equal(flat_weights(resumed), flat_weights(whole))


def test_settings_are_keywords_and_protected_steps_the_callbacks_own_copy():
    steps = {2}
    callback = CheckpointerCallback(save_interval=5, protected_steps=steps)
    callback.protected_steps.add(4)  # the best model protects its step
    assert steps == {2} and callback.protected_steps == {2, 4} and callback.save_interval == 5
    assert CheckpointerCallback().protected_steps == set() and CheckpointerCallback().keep_last is None
    with pytest.raises(TypeError):
        CheckpointerCallback(5)  # type: ignore[misc]  # OLMo-core's fields are given by name
