"""The Trainer's names that are its collaborators': a delegated method is the collaborator's (its signature on the
class, its bound method on a trainer), a delegated value reads and writes the collaborator's attribute, and a
setting set on the Trainer reaches the collaborator that reads it."""

from __future__ import annotations

import inspect

from honing.train import Trainer
from honing.train.trainer_delegates import Delegated, delegated_value
from honing.train.trainer_metrics import Metrics
from tests.helpers import make_trainer


class Counter:
    def __init__(self):
        self.count = 0

    def add(self, amount: int) -> int:
        """Add ``amount``."""
        self.count += amount
        return self.count


class Owner:
    add = Delegated("counter", Counter.add)
    count = delegated_value("counter.count", settable=True)
    read_only = delegated_value("counter.count")

    def __init__(self):
        self.counter = Counter()


def test_a_delegated_method_is_the_collaborators():
    owner = Owner()
    assert Owner.add is Counter.add and Owner.add.__doc__ == "Add ``amount``."
    assert owner.add(2) == 2 and owner.counter.count == 2
    assert owner.__dict__["add"] == owner.counter.add  # bound once, then read from the instance


def test_a_delegated_value_reads_and_writes_the_collaborators_attribute():
    owner = Owner()
    owner.count = 5
    assert owner.counter.count == 5 and owner.read_only == 5
    owner.counter.count = 7
    assert owner.count == 7
    try:
        owner.read_only = 1
    except AttributeError:
        pass
    else:
        raise AssertionError("a value not marked settable was set")


def test_the_trainers_olmo_core_names_have_the_collaborators_signatures(tmp_path):
    assert list(inspect.signature(Trainer.record_metric).parameters) == list(
        inspect.signature(Metrics.record_metric).parameters
    )
    trainer = make_trainer(tmp_path, max_duration="2steps")
    trainer.fit()
    assert trainer.global_step == trainer.progress.global_step == 2
    # the checkpointer callback saves the last step; the checkpoints collaborator recorded it
    assert trainer.last_checkpoint_step == trainer.checkpoints.last_checkpoint_step == 2


def test_a_load_setting_set_on_the_trainer_reaches_its_checkpoints(tmp_path):
    first = make_trainer(tmp_path / "a", max_duration="4steps")
    first.fit()  # step4
    trainer = make_trainer(tmp_path / "b", max_duration="6steps")
    trainer.load_path = str(tmp_path / "a")  # after construction, as an OLMo-core script may
    assert trainer.checkpoints.config.load_path == trainer.config.load_path == str(tmp_path / "a")
    trainer.fit()
    assert trainer.checkpoint_loaded
