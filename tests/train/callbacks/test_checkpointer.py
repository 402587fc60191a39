from honing.train import Checkpointer
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
