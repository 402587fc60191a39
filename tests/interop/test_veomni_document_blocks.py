"""Every code block of VeOmni's ``BaseTrainer`` document (``../shared/seeds/001_*``, skipped where absent), read from
its text and run with only the import root changed (``veomni.trainer.callbacks`` -> ``honing.interop.veomni``),
bound to a ``BaseTrainer`` subclass as a VeOmni script binds them: 9 blocks. Five run as written; three in a nearest
form, each for a reason in the block itself (an elision ``...`` Python cannot run, or names the page leaves out),
said where it is made; the train() block is honing's documented difference (honing's loop runs the run), and its test
shows that loop makes the block's calls in the block's order and number."""

from __future__ import annotations

import functools
import inspect
import itertools
import json
import sys
import types
from dataclasses import dataclass, field
from types import SimpleNamespace

import torch
import yaml

from honing.config import validate
from honing.interop import veomni
from honing.interop.veomni import BaseTrainer
from honing.models import unwrap_model
from honing.models.tiny_vl import build_tiny_processor
from honing.recipes.pretrain import PretrainRecipe
from honing.recipes.vl_sft import VLSFTRecipe
from tests.distributed.runs import CONFIG
from tests.interop.document_blocks import python_blocks, seed_text

IMPORT_ROOT = ("from veomni.trainer.callbacks import", "from honing.interop.veomni import")
FIRST_LINES = [
    "def train(self):",
    "def train_step(self, data_iterator):",
    "from veomni.trainer.callbacks import Callback",
    "def build_model_assets(self):",
    "def build_data_transform(self):",
    "def build_data_collate_info(self):",
    "def freeze_module(self):",
    "def build_param_groups(self):",
    "@dataclass",
]
SCRIPTS = itertools.count()
TRAIN, TRAIN_STEP, CALLBACK, MODEL_ASSETS, DATA_TRANSFORM, COLLATE_INFO, FREEZE, PARAM_GROUPS, ARGUMENTS = range(9)


def blocks() -> list[str]:
    found = python_blocks(seed_text("001"))
    assert [block.splitlines()[0] for block in found] == FIRST_LINES
    return found


def run_block(text: str, namespace: dict) -> dict:
    """Execute a block, its import root changed, in ``namespace`` (a script module's globals)."""
    exec(compile(text.replace(*IMPORT_ROOT), "veomni-document", "exec"), namespace)
    return namespace


def script_globals(**names) -> dict:
    """A VeOmni script's module: what it imports (the blocks use these names without importing them), from
    honing's edge, and ``names``."""
    script = types.ModuleType(f"veomni_script_{next(SCRIPTS)}")
    sys.modules[script.__name__] = script  # dataclasses and typing resolve "MyTrainingArguments" through it
    exported = {name: getattr(veomni, name) for name in veomni.__all__}
    script.__dict__.update(dataclass=dataclass, field=field, partial=functools.partial, **exported, **names)
    return script.__dict__


def nearest(block: str, old: str, new: str) -> str:
    """The block with ``old`` (present once) replaced: a nearest form."""
    assert block.count(old) == 1
    return block.replace(old, new)


def test_the_names_the_blocks_call_exist_with_the_documents_signatures():
    assert len(blocks()) == 9
    assert list(inspect.signature(veomni.veomni_clip_grad_norm).parameters)[:2] == ["model", "max_grad_norm"]
    assert list(inspect.signature(veomni.build_processor).parameters)[0] == "processor_path"
    assert list(inspect.signature(veomni.Callback).parameters) == ["trainer"]


# --- blocks 4-9: a vision-language trainer built of them --------------------------------------------------------
VL_CONFIG = """
method: vl_sft
train: {{freeze_vit: {freeze_vit}}}
trainer: {{save_folder: {save_folder}, max_duration: 2steps, seed: 0, num_threads: 1}}
data:
  train: {{sources: [{{path: "generated:ocr?samples=8&seed=0"}}]}}
  seq_len: 128
  global_batch_size: 4
  micro_batch_size: 2
tokenizer: {{kind: pretrained, path: {processor}}}
model: {{config: {{model_type: qwen2_vl}}, lora: null, freeze_vision: false}}
optim: {{lr: 1.0e-3{vision_lr}}}
callbacks: {{checkpointer: {{save_interval: 100}}, evaluator: {{enabled: false}}, sample: {{enabled: false}},
            console: {{enabled: false}}}}
"""


def vl_trainer(tmp_path, freeze_vit: bool, seen: list):
    """The document's blocks 4-9 as one VeOmni script's ``VLMTrainer``, its config read by ``parse_args``."""
    found = blocks()
    namespace = script_globals()
    run_block(found[ARGUMENTS], namespace)  # as written

    def process_sample_function(sample, processor):  # the user's own function, which the page does not show
        seen.append(processor)
        return sample

    namespace["process_sample_function"] = process_sample_function
    run_block(found[MODEL_ASSETS], namespace)  # as written: build_processor(self.args.model.tokenizer_path)
    # nearest form: the page's "processor=self.processor, ..." elides the other keywords, and a positional `...`
    # after a keyword is a SyntaxError; with nothing elided the call is the page's
    run_block(nearest(found[DATA_TRANSFORM], "processor=self.processor, ...)", "processor=self.processor)"), namespace)
    run_block(found[COLLATE_INFO], namespace)  # as written
    run_block(found[FREEZE], namespace)  # as written: self.model.visual
    # nearest form: the page leaves out where vit_params / other_params come from; a VeOmni VLM trainer takes them
    # from the model's parameter names
    groups = nearest(
        found[PARAM_GROUPS],
        "    return [",
        "    vit_params = [p for n, p in self.model.named_parameters() if 'visual' in n and p.requires_grad]\n"
        "    other_params = [p for n, p in self.model.named_parameters() if 'visual' not in n and p.requires_grad]\n"
        "    return [",
    )
    run_block(groups, namespace)
    steps = ["build_model_assets", "build_data_transform", "build_data_collate_info", "freeze_module"]
    # block 8 in the run whose tower trains: with it frozen the vision group is empty, which honing's optimizer
    # builder refuses (an empty group names nothing to train), where torch's would keep it
    steps += [] if freeze_vit else ["build_param_groups"]
    trainer_class = type("VLMTrainer", (BaseTrainer, VLSFTRecipe), {
        "arguments": namespace["Arguments"], **{name: namespace[name] for name in steps}})  # fmt: skip
    processor = build_tiny_processor("qwen2_vl", str(tmp_path / "processor"))
    path = tmp_path / f"vl-{freeze_vit}.yaml"
    vision_lr = "" if freeze_vit else ", vision_lr: 1.0e-4"
    text = VL_CONFIG.format(freeze_vit=str(freeze_vit).lower(), save_folder=tmp_path / f"run-{freeze_vit}",
                            processor=processor, vision_lr=vision_lr)  # fmt: skip
    path.write_text(text)
    args = veomni.parse_args(namespace["Arguments"], [str(path)])
    return trainer_class(args)


def test_the_recipe_step_blocks_train_a_vision_language_model(tmp_path):
    seen: list = []
    trainer = vl_trainer(tmp_path, freeze_vit=True, seen=seen)
    assert trainer.args.train.freeze_vit is True  # block 9: the Arguments dataclass read from the YAML's train
    trainer.train()
    assert trainer.state.global_step == 2
    assert seen and all(processor is trainer.processor for processor in seen)  # block 5: partial(..., processor=)
    assert type(trainer.processor).__name__.endswith("Processor") and trainer.tokenizer is trainer.processor.tokenizer
    visual = unwrap_model(trainer.model).model.visual  # block 7: frozen, so unchanged
    assert not any(p.requires_grad for p in visual.parameters())

    seen.clear()
    unfrozen = vl_trainer(tmp_path, freeze_vit=False, seen=seen)
    unfrozen.train()
    visual = unwrap_model(unfrozen.model).model.visual
    groups: dict[float, list] = {}  # honing splits each group by weight decay: the same lr twice
    for group in unfrozen.optimizer.param_groups:
        groups.setdefault(group["initial_lr"], []).extend(group["params"])
    assert set(groups) == {1e-4, 1e-3}  # block 8: args.train.vit_lr is optim.vision_lr
    trainable_vision = {id(p) for p in visual.parameters() if p.requires_grad}
    assert trainable_vision and {id(p) for p in groups[1e-4]} == trainable_vision


# --- blocks 2 and 3: the step and a callback, on a tiny Llama -----------------------------------------------------
def llama_config(tmp_path, name: str, steps: int, duration: str | None = None, sources: list | None = None):
    raw = yaml.safe_load(CONFIG.format(save_folder=tmp_path / name, steps=steps, save_interval=1000, custom="[]"))
    raw["callbacks"].update(sample={"enabled": False}, console={"enabled": False})
    raw["optim"]["grad_clip"] = 0.05  # clipping that bites
    raw["data"].update(seq_len=16, global_batch_size=4)
    if duration:
        raw["trainer"]["max_duration"] = duration
    if sources:
        raw["data"]["train"]["sources"] = sources
    return validate(raw)


class Plain(BaseTrainer, PretrainRecipe):
    """VeOmni's BaseTrainer with nothing overridden."""


def test_the_train_step_and_callback_blocks_train_as_the_default_step(tmp_path, capsys):
    steps = 100  # the callback block prints at step 100
    namespace = script_globals()
    # nearest form: the page's on_step_end call elides its keywords (`...`, which would reach the callbacks as a
    # positional Ellipsis); they are the ones the page names for on_step_end
    step = nearest(blocks()[TRAIN_STEP], "self.state, ...)", "self.state, loss=loss, loss_dict=loss_dict, "
                   "grad_norm=grad_norm)")  # fmt: skip
    run_block(step, namespace)
    documents = type("DocumentStep", (BaseTrainer, PretrainRecipe), {"train_step": namespace["train_step"]})
    trainer = documents(llama_config(tmp_path, "document", steps))
    namespace["trainer"] = trainer
    run_block(blocks()[CALLBACK], namespace)  # as written: trainer.add_callback(MyCustomCallback(trainer))
    trained = trainer.train()
    assert capsys.readouterr().out.count("Step 100: Custom action executed.") == 1
    plain = Plain(llama_config(tmp_path, "plain", steps)).train()
    one, two = (unwrap_model(t.train_module.model).state_dict() for t in (trained, plain))
    assert all(torch.equal(one[key], two[key]) for key in one)  # the page's step is the default step, to the bit
    logged = [json.loads(line) for line in (tmp_path / "document" / "metrics.jsonl").read_text().splitlines()]
    assert sum("train/loss" in row and "optim/grad_norm" in row for row in logged) == steps


# --- block 1: train() -------------------------------------------------------------------------------------------
class Recorder:
    """The calls the document's train() makes: its callbacks' events and its train_step."""

    def __init__(self):
        self.calls: list[str] = []

    def call(self, event, state, **kwargs):
        self.calls.append(event)


class Events(veomni.Callback):
    def __init__(self):
        super().__init__()
        self.calls: list[str] = []
        self.counts: tuple | None = None

    def on_train_begin(self, state, **kwargs):
        self.calls.append("on_train_begin")
        trainer = self.trainer
        self.counts = (trainer.start_epoch, trainer.start_step, trainer.args.train.num_train_epochs,
                       trainer.args.train_steps)  # fmt: skip

    def on_epoch_begin(self, state, **kwargs):
        self.calls.append("on_epoch_begin")

    def on_step_begin(self, state, **kwargs):
        self.calls.append("train_step")

    def on_epoch_end(self, state, **kwargs):
        self.calls.append("on_epoch_end")

    def on_train_end(self, state, **kwargs):
        self.calls.append("on_train_end")


def test_the_train_block_differs_honings_loop_makes_its_calls_in_its_order(tmp_path):
    """honing's Trainer.fit runs the loop (durations, resume, evaluation), so train() is not an override point; the
    document's train(), run as written against a recorder with the run's own counts, makes the calls the run made."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"document {i} " * 3}) + "\n" for i in range(4)))
    trainer = Plain(llama_config(tmp_path, "epochs", 1, duration="2epochs", sources=[{"path": str(corpus)}]))
    events = Events()
    trainer.add_callback(events)
    trainer.train()
    start_epoch, start_step, epochs, per_epoch = events.counts
    assert (start_epoch, start_step, epochs) == (0, 0, 2) and per_epoch == trainer.trainer.steps_per_epoch > 1
    recorder = Recorder()
    stand_in = SimpleNamespace(
        callbacks=recorder,
        state=None,
        start_epoch=start_epoch,
        start_step=start_step,
        train_dataloader=[],
        train_step=lambda iterator: recorder.calls.append("train_step"),
    )
    namespace = run_block(blocks()[TRAIN], script_globals(args=trainer.args))  # args: the script's, as VeOmni's
    namespace["train"](stand_in)
    assert recorder.calls == events.calls and trainer.trainer.global_step == epochs * per_epoch
