"""A training script written in VeOmni's style (its ``BaseTrainer`` document), run by honing.

It extends the arguments with a dataclass (``freeze_vit``, ``loss_weight``), subclasses ``BaseTrainer`` (over
honing's vision-language SFT recipe) to freeze the vision tower when ``self.args.train.freeze_vit`` says so and to
weight the loss in an overridden ``forward_backward_step``, and registers a callback with the document's own line,
``trainer.add_callback(MyCallback(trainer))``, which sees each step's micro-batches as a list. At the end it writes
what it saw to the save folder (``my_callback.json``, ``summary.json``).

    python examples/veomni_style.py examples/veomni_style.yaml                          # VeOmni's parse_args
    python examples/veomni_style.py examples/veomni_style.yaml train.freeze_vit=false   # an override, as any key
    honing train examples/veomni_style.yaml recipe=examples.veomni_style:VLMTrainer     # from the repository root

A tiny Qwen2-VL built from its config and generated images of short strings: it runs on a CPU in seconds, nothing
is downloaded.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import torch

from honing.interop.veomni import BaseTrainer, Callback, TrainingArguments, VeOmniArguments, parse_args
from honing.recipes.vl_sft import VLSFTRecipe


@dataclass
class MyTrainingArguments(TrainingArguments):
    """This trainer's own keys: the config's ``train`` section."""

    freeze_vit: bool = field(default=False, metadata={"help": "Freeze ViT"})
    loss_weight: float = field(default=1.0, metadata={"help": "Multiplies the training loss"})


@dataclass
class Arguments(VeOmniArguments):
    """The sections this trainer adds to honing's config."""

    train: MyTrainingArguments = field(default_factory=MyTrainingArguments)


class MyCallback(Callback):
    """Keeps each step's micro-batches (their count and rows) and the keys of its ``loss_dict``."""

    def __init__(self, trainer):
        super().__init__(trainer)
        self.micro_batches: list[dict] = []
        self.loss_dict_keys: list[list[str]] = []

    def on_step_begin(self, state, micro_batches=None, **kwargs):
        self.micro_batches.append(
            {"type": type(micro_batches).__name__, "rows": [len(micro["input_ids"]) for micro in micro_batches]}
        )

    def on_step_end(self, state, **kwargs):
        if state.global_step % 2 == 0:
            print(f"Step {state.global_step}: Custom action executed.", flush=True)
        self.loss_dict_keys.append(sorted(kwargs["loss_dict"]))

    def on_train_end(self, state, **kwargs):
        seen = {"micro_batches": self.micro_batches, "loss_dict_keys": self.loss_dict_keys}
        with open(os.path.join(self.trainer.args.train.output_dir, "my_callback.json"), "w") as handle:
            json.dump(seen, handle)


class VLMTrainer(BaseTrainer, VLSFTRecipe):
    """VeOmni's ``VLMTrainer`` pattern: the vision tower frozen by a key of this trainer's own, a weighted loss."""

    arguments = Arguments

    def freeze_module(self):
        if self.args.train.freeze_vit:
            # VeOmni's self.model.visual; transformers 5 keeps the tower on the inner model
            self.model.model.visual.requires_grad_(False)

    def post_init(self):
        self.vision_before = [p.detach().clone() for p in self.model.model.visual.parameters()]

    def forward_backward_step(self, micro_batch):
        micro_batch = self.preforward(micro_batch)
        outputs = self.model_forward(micro_batch)
        loss, loss_dict = self.postforward(outputs, micro_batch)
        loss = loss * self.args.train.loss_weight
        loss.backward()
        return loss, {**loss_dict, "weighted_loss": loss.detach()}


def main(argv: list[str] | None = None) -> VLMTrainer:
    """Parse ``CONFIG.yaml [key=value ...]`` (``sys.argv`` by default), train, write ``summary.json``."""
    args = parse_args(Arguments, argv)
    trainer = VLMTrainer(args)
    trainer.add_callback(MyCallback(trainer))
    trainer.train()
    vision = list(trainer.model.model.visual.parameters())
    summary = {
        "step": trainer.state.global_step,
        "freeze_vit": trainer.args.train.freeze_vit,
        "vision_trainable": sum(p.numel() for p in vision if p.requires_grad),
        "vision_unchanged": all(torch.equal(p, q) for p, q in zip(vision, trainer.vision_before)),
    }
    with open(os.path.join(args.trainer.save_folder, "summary.json"), "w") as handle:
        json.dump(summary, handle)
    print(json.dumps(summary), flush=True)
    return trainer


if __name__ == "__main__":
    main()
