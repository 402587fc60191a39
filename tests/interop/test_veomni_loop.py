"""VeOmni's loop as its document writes it, on a ``BaseTrainer`` over a method's recipe: ``train_step``,
``forward_backward_step``, ``preforward`` and ``postforward`` run in the document's order (clip, optimizer step,
scheduler step, zero-grad), overriding one changes what runs, and with none overridden the step is the method's
own: the same weights, losses and learning rates, also resumed and with skipped steps."""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from honing.config import ConfigError, validate
from honing.interop.veomni import BaseTrainer, Callback
from honing.models import unwrap_model
from honing.recipes.pretrain import PretrainRecipe
from honing.train import Callback as HoningCallback
from tests.distributed.runs import CONFIG

STEPS = 4


def config(tmp_path, name, steps=STEPS, **trainer):
    """The tiny Llama pretraining run: 8 rows a step in micro-batches of 2, clipping that bites, cosine warmup."""
    raw = yaml.safe_load(CONFIG.format(save_folder=tmp_path / name, steps=steps, save_interval=100, custom="[]"))
    raw["callbacks"]["sample"] = {"enabled": False}
    raw["callbacks"]["console"] = {"enabled": False}
    raw["callbacks"]["checkpointer"] = {"save_interval": 2}
    raw["optim"]["grad_clip"] = 0.05
    raw["trainer"].update(trainer)
    return validate(raw)


def metrics(save_folder, *keys):
    """Each logged step's values of ``keys``."""
    rows = [json.loads(line) for line in (save_folder / "metrics.jsonl").read_text().splitlines()]
    return {row["step"]: tuple(row.get(key) for key in keys) for row in rows if "train/loss" in row}


def weights(trainer):
    return unwrap_model(trainer.train_module.model).state_dict()


def same_weights(first, second):
    one, two = weights(first), weights(second)
    return one.keys() == two.keys() and all(torch.equal(one[key], two[key]) for key in one)


class Plain(BaseTrainer, PretrainRecipe):
    """VeOmni's BaseTrainer with nothing overridden."""


KEYS = ("train/loss", "optim/lr", "optim/grad_norm")


def test_with_nothing_overridden_the_step_is_the_methods_own(tmp_path):
    own = PretrainRecipe(config(tmp_path, "own")).run()
    veomni = Plain(config(tmp_path, "veomni"))
    trained = veomni.train()
    assert trained.global_step == STEPS and same_weights(own, trained)
    assert metrics(tmp_path / "veomni", *KEYS) == metrics(tmp_path / "own", *KEYS)  # bit for bit
    # VeOmni's attributes are the run's parts
    assert veomni.optimizer is veomni.train_module.optimizer and veomni.train_dataloader is veomni.train_loader
    assert (
        veomni.state is veomni.trainer
        and veomni.lr_scheduler.get_last_lr()[0] == veomni.optimizer.param_groups[0]["lr"]
    )
    assert own.step_runner is None  # the method's own recipe keeps honing's loop


def test_resumed_and_skipping_runs_keep_the_methods_learning_rates(tmp_path):
    Plain(config(tmp_path, "resumed", hard_stop="2steps")).train()  # stops after step 2, saved there
    resumed = Plain(config(tmp_path, "resumed")).train()  # resumes from step 2: the LR set for step 3 on train begin
    whole = PretrainRecipe(config(tmp_path, "whole")).run()
    assert resumed.global_step == STEPS and same_weights(resumed, whole)
    skip = [{"start": 2, "stop": 3}]
    skipped_own = PretrainRecipe(config(tmp_path, "skip_own", steps_to_skip=skip)).run()
    skipped = Plain(config(tmp_path, "skip_veomni", steps_to_skip=skip)).train()
    assert same_weights(skipped, skipped_own)
    assert metrics(tmp_path / "skip_veomni", "optim/lr") == metrics(tmp_path / "skip_own", "optim/lr")


class Ordered(BaseTrainer, PretrainRecipe):
    """Records the order of the step's parts."""

    calls: list[str]  # given before build

    def post_init(self):
        optimizer, scheduler = self.optimizer, self.lr_scheduler
        for name, owner, method in (
            ("optimizer.step", optimizer, "step"),
            ("lr_scheduler.step", scheduler, "step"),
            ("optimizer.zero_grad", optimizer, "zero_grad"),
        ):
            setattr(owner, method, self.recorded(name, getattr(owner, method)))

    def recorded(self, name, function):
        def call(*args, **kwargs):
            self.calls.append(name)
            return function(*args, **kwargs)

        return call

    def train_step(self, data_iterator):
        self.calls.append("train_step")
        super().train_step(data_iterator)

    def forward_backward_step(self, micro_batch):
        self.calls.append("forward_backward_step")
        return super().forward_backward_step(micro_batch)

    def preforward(self, micro_batch):
        self.calls.append("preforward")
        return super().preforward(micro_batch)

    def postforward(self, outputs, micro_batch):
        self.calls.append("postforward")
        return super().postforward(outputs, micro_batch)

    def clip_grad_norm(self, max_norm):
        self.calls.append(f"clip_grad_norm({max_norm})")
        return super().clip_grad_norm(max_norm)


class PreOptimStep(HoningCallback):
    """honing's (OLMo-core's) pre_optim_step, added through VeOmni's add_callback: before the clip."""

    def __init__(self, calls):
        self.calls = calls

    def pre_optim_step(self):
        self.calls.append("pre_optim_step")


def test_the_step_runs_in_the_documents_order(tmp_path):
    recipe = Ordered(config(tmp_path, "order", steps=2))
    recipe.calls = []
    recipe.add_callback(PreOptimStep(recipe.calls))  # honing's form: joins the Trainer, named by its class
    trainer = recipe.train()
    assert trainer.has_callback("PreOptimStep")
    micro = ["forward_backward_step", "preforward", "postforward"]
    one_step = [
        "train_step",
        *micro * 4,  # 8 rows in micro-batches of 2
        "pre_optim_step",
        "clip_grad_norm(0.05)",  # self.args.train.optimizer.max_grad_norm: optim.grad_clip
        "optimizer.step",
        "lr_scheduler.step",
        "optimizer.zero_grad",
    ]
    assert recipe.calls == one_step * 2


class DoubledLoss(BaseTrainer, PretrainRecipe):
    def postforward(self, outputs, micro_batch):
        loss, loss_dict = super().postforward(outputs, micro_batch)
        return loss * 2, {**loss_dict, "doubled": loss.detach() * 2}


class FirstLabelsOnly(BaseTrainer, PretrainRecipe):
    def preforward(self, micro_batch):
        micro_batch = super().preforward(micro_batch)
        labels = micro_batch["labels"].clone()
        labels[:, 8:] = -100  # the loss on each row's first 8 tokens only
        return {**micro_batch, "labels": labels, "targets": torch.nn.functional.pad(labels[:, 1:], (0, 1), value=-100)}


class NoUpdate(BaseTrainer, PretrainRecipe):
    def train_step(self, data_iterator):
        self.seen = getattr(self, "seen", 0) + len(next(data_iterator))  # micro-batches seen, nothing trained


def test_overriding_a_step_changes_what_runs(tmp_path):
    Plain(config(tmp_path, "plain", steps=1)).train()
    base_loss, _, base_norm = metrics(tmp_path / "plain", *KEYS)[1]
    DoubledLoss(config(tmp_path, "doubled", steps=1)).train()
    loss, _, norm = metrics(tmp_path / "doubled", *KEYS)[1]
    assert (loss, norm) == (2 * base_loss, 2 * base_norm)  # doubling is exact in floating point
    FirstLabelsOnly(config(tmp_path, "first", steps=1)).train()
    assert metrics(tmp_path / "first", "train/loss")[1][0] < base_loss / 2  # 7 of each row's 31 targets summed
    untouched = NoUpdate(config(tmp_path, "none", steps=2))
    before = None

    class Snapshot(HoningCallback):
        def on_train_begin(self):
            nonlocal before
            before = {key: value.clone() for key, value in weights(self.trainer).items()}

    untouched.add_callback(Snapshot())
    trainer = untouched.train()
    assert untouched.seen == 8 and trainer.global_step == 2
    assert all(torch.equal(before[key], value) for key, value in weights(trainer).items())


class Seen(Callback):
    """VeOmni's Callback, built with the trainer."""

    def __init__(self, trainer):
        super().__init__(trainer)
        self.events = []

    def on_train_begin(self, state, **kwargs):
        self.events.append(("on_train_begin", state.global_step))

    def on_epoch_begin(self, state, **kwargs):
        self.events.append(("on_epoch_begin", state.epoch))

    def on_step_begin(self, state, micro_batches=None, **kwargs):
        rows = [tuple(micro["input_ids"].shape) for micro in micro_batches]
        self.events.append(("on_step_begin", state.global_step, type(micro_batches).__name__, rows))

    def on_step_end(self, state, **kwargs):
        self.events.append(("on_step_end", state.global_step, sorted(kwargs), sorted(kwargs["loss_dict"])))

    def on_train_end(self, state, **kwargs):
        self.events.append(("on_train_end", state.global_step))

    def on_my_event(self, state, value=None):
        self.events.append(("on_my_event", value))


class Announcing(BaseTrainer, PretrainRecipe):
    def post_init(self):
        self.callbacks.call("on_my_event", self.state, value=3)  # VeOmni's self.callbacks.call(...)


def test_callbacks_as_veomni_writes_them(tmp_path):
    trainer = Announcing(config(tmp_path, "callbacks", steps=2))
    seen = Seen(trainer)
    trainer.add_callback(seen)  # the document's trainer.add_callback(MyCustomCallback(trainer))
    trainer.train()
    assert seen.trainer is trainer and trainer.args.train.seed == 0
    step = [("on_step_begin", s, "list", [(2, 32)] * 4) for s in (1, 2)]
    ends = [("on_step_end", s, ["grad_norm", "loss", "loss_dict"], ["ce_loss"]) for s in (1, 2)]
    assert seen.events == [
        ("on_my_event", 3),
        ("on_train_begin", 0),
        ("on_epoch_begin", 1),
        step[0],
        ends[0],
        step[1],
        ends[1],
        ("on_train_end", 2),
    ]


def test_what_veomnis_step_does_not_do_is_refused_in_one_line(tmp_path):
    with pytest.raises(TypeError, match=r"subclassed together with a method's recipe, e.g. class Alone\(BaseTrainer"):

        class Alone(BaseTrainer):
            pass

        Alone(config(tmp_path, "alone"))
    with pytest.raises(ConfigError, match=r"trainer.nonfinite_loss: skip is honing's own optimizer step's"):
        Plain(config(tmp_path, "skip", nonfinite_loss="skip")).build()
    from honing.recipes.dpo import DPORecipe

    class DPOTrainer(BaseTrainer, DPORecipe):
        pass

    raw = {
        "method": "dpo",
        "trainer": {"save_folder": str(tmp_path / "dpo"), "max_duration": "1steps"},
        "data": {
            "train": {"sources": [{"path": "generated:addition_preference?samples=8&seed=0"}]},
            "chat_template": "chatml",
            "seq_len": 64,
            "global_batch_size": 4,
            "cache_dir": str(tmp_path / "cache"),
        },
        "model": {"config": {"model_type": "llama", "hidden_size": 32, "num_hidden_layers": 1}},
    }
    raw["model"]["config"].update(num_attention_heads=2, num_key_value_heads=2, intermediate_size=64)
    with pytest.raises(ConfigError, match=r"DPOTrainer: the default train_step trains the next-token loss"):
        DPOTrainer(validate(raw)).build()
