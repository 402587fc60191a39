"""A training script written as OLMo-core's ``olmo_core.train`` document writes one runs on honing unchanged in
shape: ``prepare_training_environment`` (with ``log_filter_type`` and ``shared_filesystem``), a ``TrainerConfig``
with ``CheckpointerConfig``, ``.with_callback(...)`` / ``.with_callbacks(...)``, ``.build(train_module,
data_loader)``, ``fit()``, ``teardown_training_environment()``; callbacks written with OLMo-core's hook names."""

from __future__ import annotations

import inspect

from honing.data.loader import DataLoader
from honing.interop.olmo_core import CheckpointerConfig, TrainerConfig
from honing.methods.lm import LMTrainModule
from honing.optim.builder import OptimizerSettings, build_optimizer
from honing.train import (
    Callback,
    Duration,
    ReduceType,
    prepare_training_environment,
    teardown_training_environment,
)
from honing.train.callbacks.checkpointer import CheckpointerCallback
from tests.helpers import TokenDataset, tiny_llama


class OLMoCoreHooks(Callback):
    """Only OLMo-core's names: every one of them must be called, in OLMo-core's order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int]] = []
        self.logged: dict[int, dict[str, float]] = {}
        self.batches: list[int] = []

    def post_attach(self) -> None:
        self.events.append(("post_attach", self.trainer.global_step))

    def post_checkpoint_loaded(self, path: str) -> None:
        self.events.append(("post_checkpoint_loaded:" + path.rsplit("/", 1)[-1], self.step))

    def pre_train(self) -> None:
        self.events.append(("pre_train", self.step))

    def pre_step(self, batch) -> None:
        self.batches.append(len(batch["input_ids"]))
        self.events.append(("pre_step", self.step))

    def pre_optim_step(self) -> None:
        # gradients exist and the optimizer has not stepped yet: the LR is still the previous step's
        assert any(p.grad is not None for p in self.trainer.train_module.model.parameters())
        self.events.append(("pre_optim_step", self.step))

    def post_train_batch(self) -> None:
        self.events.append(("post_train_batch", self.step))

    def post_step(self) -> None:
        self.events.append(("post_step", self.step))

    def post_checkpoint_saved(self, path: str) -> None:
        self.events.append(("post_checkpoint_saved:" + path.rsplit("/", 1)[-1], self.step))

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        self.logged[step] = metrics

    def post_train(self) -> None:
        self.events.append(("post_train", self.step))


def build_train_module() -> LMTrainModule:
    model = tiny_llama(seed=0)
    optimizer = build_optimizer(model, OptimizerSettings(name="adamw_torch", lr=1e-2))
    return LMTrainModule(model, optimizer, micro_batch_size=4, scheduler={"name": "cosine", "warmup_steps": 1})


def main(save_folder: str, steps: int, hooks: OLMoCoreHooks):
    """The document's script: prepare, build the train module and data loader, build the trainer, fit, tear down."""
    prepare_training_environment(seed=0, log_filter_type="all_ranks", shared_filesystem=True)
    train_module = build_train_module()
    data_loader = DataLoader(TokenDataset(rows=64), global_batch_size=8, seed=0)
    trainer_config = TrainerConfig(
        save_folder=save_folder,
        max_duration=Duration.steps(steps),
        metrics_collect_interval=2,
        checkpointer=CheckpointerConfig(save_overwrite=True),
    )
    trainer_config = trainer_config.with_callback("checkpointer", CheckpointerCallback(save_interval=3)).with_callbacks(
        {"olmo_core_hooks": hooks}
    )
    trainer = trainer_config.build(train_module, data_loader)
    trainer.fit()
    teardown_training_environment()
    return trainer, trainer_config


def test_an_olmo_core_style_script_trains_checkpoints_and_resumes(tmp_path):
    hooks = OLMoCoreHooks()
    base = TrainerConfig(save_folder=str(tmp_path), max_duration="1steps")
    assert base.with_callback("x", hooks).callbacks == {"x": hooks} and base.callbacks == {}  # a new config

    trainer, config = main(str(tmp_path / "run"), 6, hooks)
    assert trainer.global_step == 6 and trainer.checkpointer.save_overwrite is True
    assert config.load_trainer_state is None  # OLMo-core's default: load the trainer state when it is there
    step_events = [name for name, step in hooks.events if step == 2]
    assert step_events == ["pre_step", "pre_optim_step", "post_train_batch", "post_step"]
    assert hooks.events[:2] == [("post_attach", 0), ("pre_train", 0)]
    saved = [name for name, _ in hooks.events if name.startswith("post_checkpoint_saved")]
    assert saved == ["post_checkpoint_saved:step3", "post_checkpoint_saved:step6"]  # async: announced once complete
    names = [name for name, _ in hooks.events]
    assert names.index("post_train") > max(i for i, name in enumerate(names) if name == "post_step")
    assert sorted(hooks.logged) == [1, 2, 3, 4, 5, 6] and all("train/loss" in m for m in hooks.logged.values())
    assert hooks.batches == [8] * 6

    # the same script with a longer duration resumes from step 6: its trainer state is loaded (None: if present)
    resumed = OLMoCoreHooks()
    trainer, _ = main(str(tmp_path / "run"), 8, resumed)
    assert resumed.events[1] == ("post_checkpoint_loaded:step6", 6)
    assert trainer.global_step == 8 and sorted(resumed.logged) == [7, 8]

    # OLMo-core's signatures: save_checkpoint_async returns (path, future); record_ce_loss reduces nothing by default
    path, future = trainer.save_checkpoint_async()
    future.result()
    assert path.endswith("step8")
    assert inspect.signature(trainer.record_ce_loss).parameters["reduce_type"].default is None
    assert trainer.metrics.buffer.reduce_types["train/loss"] == ReduceType.mean  # the train modules pass mean
