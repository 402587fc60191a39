"""Callbacks written with OLMo-core's or VeOmni's event names are adapted once, when registered, to honing's: the
Trainer calls honing's names only, and the adapted callback is still the user's (its class, state and attributes)."""

from __future__ import annotations

from honing.interop.callback_names import ForeignNamedCallback, with_honing_event_names
from honing.train import Callback
from honing.train.callbacks.checkpointer import CheckpointerCallback
from tests.helpers import make_trainer


class VeOmniSteps(Callback):
    """VeOmni's form: events receive ``state`` (the trainer) and keyword arguments."""

    def __init__(self):
        self.rows: list[list[int]] = []
        self.ended: list[tuple[int, list[str]]] = []
        self.losses: list[float] = []
        self.finished_at: int | None = None

    def on_step_begin(self, state, micro_batches=None):  # only the keyword it names
        self.rows.append([len(micro["input_ids"]) for micro in micro_batches])

    def on_step_end(self, state, **kwargs):
        self.ended.append((state.global_step, sorted(kwargs)))
        self.losses.append(float(kwargs["loss"]))

    def on_train_end(self, state, **kwargs):
        self.finished_at = state.global_step

    def state_dict(self):
        return {"steps": len(self.ended)}


class VeOmniPositional(Callback):
    """VeOmni's ``on_step_end`` with its keywords as named parameters, none of them defaulted (issue 44)."""

    def __init__(self):
        self.seen: list[tuple[float, dict[str, float], float]] = []

    def on_step_end(self, state, loss, loss_dict, grad_norm):
        self.seen.append((float(loss), {key: float(value) for key, value in loss_dict.items()}, float(grad_norm)))


class OLMoCoreSteps(Callback):
    """OLMo-core's names only."""

    def __init__(self):
        self.events: list[tuple[str, int]] = []
        self.logged: list[int] = []

    def pre_train(self):
        self.events.append(("pre_train", self.step))

    def pre_step(self, batch):
        self.events.append((f"pre_step:{len(batch['input_ids'])}", self.step))

    def post_step(self):
        self.events.append(("post_step", self.step))

    def log_metrics(self, step, metrics):
        self.logged.append(step)

    def post_train(self):
        self.events.append(("post_train", self.step))


class Tracker(Callback):
    """honing's on_log plus a method of its own that happens to carry an OLMo-core name: no adaptation."""

    def on_log(self, step, metrics):
        pass

    def log_metrics(self, step, metrics):
        raise AssertionError("the tracker's own log_metrics is not an event")


def test_a_callback_in_honings_form_is_registered_as_it_is():
    tracker = Tracker()
    assert with_honing_event_names(tracker) is tracker
    checkpointer = CheckpointerCallback(save_interval=2)
    assert with_honing_event_names(checkpointer) is checkpointer
    assert isinstance(with_honing_event_names(VeOmniSteps()), ForeignNamedCallback)


def test_veomni_events_get_the_trainer_as_state_and_their_keywords(tmp_path):
    steps = VeOmniSteps()
    trainer = make_trainer(
        tmp_path, max_duration="4steps", callbacks={"veomni": steps}, callback_adapter=with_honing_event_names
    )
    trainer.add_callback("tracker", Tracker())
    trainer.fit()
    assert steps.rows == [[4, 4]] * 4  # micro_batches: the step's batch of 8 rows as its micro-batches of 4
    assert steps.ended == [(step, ["grad_norm", "loss", "loss_dict"]) for step in (1, 2, 3, 4)]
    assert len(steps.losses) == 4 and steps.finished_at == 4
    # registered as the user's callback: its class, attributes and state
    assert trainer.has_callback(VeOmniSteps) and isinstance(trainer.callbacks["veomni"], VeOmniSteps)
    assert trainer.callbacks["veomni"].finished_at == 4
    assert trainer.state_dict()["callbacks"]["veomni"] == {"steps": 4}


def test_olmo_core_names_are_called_at_honings_events(tmp_path):
    steps = OLMoCoreSteps()
    trainer = make_trainer(
        tmp_path, max_duration="3steps", callbacks={"olmo": steps}, callback_adapter=with_honing_event_names
    )
    trainer.fit()
    assert steps.events == [
        ("pre_train", 0),
        *[event for step in (1, 2, 3) for event in (("pre_step:8", step), ("post_step", step))],
        ("post_train", 3),
    ]
    assert steps.logged == [1, 2, 3]
    # the hot path calls plain methods: no per-event wrapper between the trainer and the callback
    assert steps.post_step in trainer._handlers_for("on_step_end")


def test_the_trainer_calls_only_the_events_a_callback_implements(tmp_path):
    trainer = make_trainer(tmp_path, max_duration="1steps", callbacks={"olmo": OLMoCoreSteps()})
    # without the recipe's adapter the trainer knows honing's names only: OLMo-core's are not events
    assert all(
        getattr(h, "__self__", None) is not trainer.callbacks["olmo"] for h in trainer._handlers_for("on_step_end")
    )


def test_a_veomni_step_end_naming_loss_dict_gets_the_steps_loss_parts(tmp_path):
    """``on_step_end(self, state, loss, loss_dict, grad_norm)`` is called with all three (it raised TypeError
    when honing passed no ``loss_dict``); a loss without parts is its one entry."""
    seen = VeOmniPositional()
    trainer = make_trainer(
        tmp_path, max_duration="2steps", callbacks={"v": seen}, callback_adapter=with_honing_event_names
    )
    trainer.fit()
    assert len(seen.seen) == 2
    for loss, loss_dict, grad_norm in seen.seen:
        assert list(loss_dict.values()) == [loss] and len(loss_dict) == 1 and grad_norm > 0
