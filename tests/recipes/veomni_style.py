"""A recipe written as VeOmni's document subclasses ``BaseTrainer`` (its ``VLMTrainer`` pattern), run by the CLI
from ``method: tests.recipes.veomni_style:FrozenEmbeddingsRecipe``; it leaves evidence files in the save folder."""

from __future__ import annotations

import json
import os
from functools import partial
from typing import Any

import torch

from honing.recipes.pretrain import PretrainRecipe
from honing.train import Callback

MASKED = 4  # the transform takes the loss off each row's first tokens


def mask_first_tokens(item: dict[str, torch.Tensor], *, count: int) -> dict[str, torch.Tensor]:
    """VeOmni's ``process_sample_function``: one item in, the model's inputs out."""
    labels = item["labels"].clone()
    labels[:count] = -100
    return {**item, "labels": labels}


class StepLogger(Callback):
    """VeOmni's callback form: events receive ``state`` and keyword arguments."""

    def __init__(self, folder: str):
        self.folder = folder
        self.steps: list[int] = []
        self.masked: list[bool] = []
        self.losses: list[float] = []

    def on_step_begin(self, state, micro_batches=None):
        self.masked.append(all(bool((micro["labels"][:, :MASKED] == -100).all()) for micro in micro_batches))

    def on_step_end(self, state, **kwargs):
        if state.global_step % 2 == 0:
            self.steps.append(state.global_step)
        self.losses.append(float(kwargs["loss"]))

    def on_train_end(self, state, **kwargs):
        with open(os.path.join(self.folder, "veomni_callback.json"), "w") as handle:
            json.dump({"steps": self.steps, "masked": self.masked, "losses": self.losses}, handle)


class FrozenEmbeddingsRecipe(PretrainRecipe):
    """Overrides the build steps VeOmni names: model assets, data transform, freezing, parameter groups."""

    def build_model_assets(self) -> list[Any]:
        assets = super().build_model_assets()
        self.assets = assets
        return assets

    def build_data_transform(self):
        return partial(mask_first_tokens, count=MASKED)

    def freeze_module(self) -> None:  # VeOmni's signature: the model is self.model
        self.model.model.embed_tokens.requires_grad_(False)  # VeOmni: self.model.visual.requires_grad_(False)

    def build_param_groups(self) -> list[dict[str, Any]]:
        # VeOmni's form: the tensors themselves, then the config's groups (name patterns)
        return [{"params": list(self.model.model.layers[0].parameters()), "lr": 1e-4}, *super().build_param_groups()]

    def post_init(self) -> None:
        self.initial_embeddings = self.model.model.embed_tokens.weight.detach().clone()
        folder = self.config.trainer.save_folder
        os.makedirs(folder, exist_ok=True)
        self.trainer.add_callback("veomni_steps", StepLogger(folder))
        groups = {g["name"]: g["initial_lr"] for g in self.train_module.optimizer.param_groups}
        with open(os.path.join(folder, "veomni_recipe.json"), "w") as handle:
            json.dump({"assets": [type(a).__name__ for a in self.assets], "groups": groups}, handle)

    def run(self):
        trainer = super().run()
        unchanged = torch.equal(self.model.model.embed_tokens.weight, self.initial_embeddings)
        with open(os.path.join(self.config.trainer.save_folder, "veomni_frozen.json"), "w") as handle:
            json.dump({"embeddings_unchanged": unchanged}, handle)
        return trainer
