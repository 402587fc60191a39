"""OLMo-core's ``Trainer`` at the edge (``honing/interop/olmo_core_trainer.py``): built directly with the document's
signature; ``load_trainer_state`` / ``load_optim_state`` with the document's meaning (None: when the checkpoint has
it; both apply to every load, resuming from the save folder too), beside honing's own Trainer, which differs; the
batch and token properties of the page's own example; epochs that need the data loader's batch count."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import pytest
import torch

from honing.config.schema import TrainerSection
from honing.data.loader import DataLoader
from honing.distributed import set_log_filter
from honing.errors import ConfigError
from honing.interop.olmo_core import LogFilterType, Trainer, TrainerConfig, unshard_checkpoint
from honing.methods.lm import LMTrainModule
from honing.optim.param_groups import build_adamw
from honing.train import Callback, Checkpointer, Duration, DurationUnit, LoadStrategy, MetricMergeStrategy, ReduceType
from honing.train import Trainer as HoningTrainer
from honing.train.callbacks.checkpointer import CheckpointerCallback
from tests.helpers import TokenDataset, tiny_llama

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

#: the document's ``Trainer(...)`` signature up to its private fields, in its order, with its defaults
DOCUMENTED_SIGNATURE = {
    "work_dir": inspect.Parameter.empty,
    "train_module": inspect.Parameter.empty,
    "data_loader": inspect.Parameter.empty,
    "device": inspect.Parameter.empty,
    "save_folder": inspect.Parameter.empty,
    "checkpointer": inspect.Parameter.empty,
    "callbacks": inspect.Parameter.empty,
    "max_duration": inspect.Parameter.empty,
    "save_overwrite": False,
    "load_path": None,
    "load_strategy": "if_available",
    "load_trainer_state": None,
    "load_optim_state": None,
    "metrics_collect_interval": 5,
    "dp_process_group": None,
    "global_step": 0,
    "global_train_tokens_seen": 0,
    "global_train_petaflops": 0.0,
    "epoch": 1,
    "cancel_check_interval": 25,
    "hard_stop": None,
    "async_bookkeeping": None,
    "bookkeeping_soft_timeout": 30,
    "no_checkpoints": False,
    "no_evals": False,
    "steps_to_skip": None,
}


def train_module(seed: int = 0) -> LMTrainModule:
    model = tiny_llama(seed=seed)
    optimizer = build_adamw(model, lr=1e-3, weight_decay=0.0, betas=(0.9, 0.95), eps=1e-8)
    return LMTrainModule(model, optimizer, micro_batch_size=4)


def data_loader() -> DataLoader:
    return DataLoader(TokenDataset(rows=64), global_batch_size=8, seed=0)


def optimizer_steps(module: LMTrainModule) -> list[float]:
    """AdamW's step count of each parameter with state (empty: a fresh optimizer)."""
    return [float(state["step"]) for state in module.optimizer.state.values() if "step" in state]


class OptimizerAtStart(Callback):
    """Records the optimizer's step counts and the trainer's step once ``fit`` has loaded its checkpoint."""

    def pre_train(self) -> None:
        self.steps, self.global_step = optimizer_steps(self.trainer.train_module), self.trainer.global_step


def trained_folder(tmp_path: Path, steps: int = 2) -> str:
    """A save folder with a checkpoint at ``steps`` (trainer and optimizer state)."""
    folder = str(tmp_path / "run")
    TrainerConfig(save_folder=folder, max_duration=Duration.steps(steps)).build(train_module(), data_loader()).fit()
    return folder


def test_trainer_has_the_documents_signature_and_trains_when_built_directly(tmp_path):
    parameters = inspect.signature(Trainer).parameters
    assert {name: parameter.default for name, parameter in parameters.items()} == DOCUMENTED_SIGNATURE
    assert list(parameters) == list(DOCUMENTED_SIGNATURE)
    trainer = Trainer(
        work_dir=tmp_path / "work",
        train_module=train_module(),
        data_loader=data_loader(),
        device=torch.device("cpu"),
        save_folder=str(tmp_path / "run"),
        checkpointer=Checkpointer(),
        callbacks={},
        max_duration=Duration.steps(2),
        load_strategy=LoadStrategy.never,
    )
    trainer.fit()
    assert trainer.global_step == 2 and trainer.cancel_check_interval == 25
    assert str(trainer.work_dir) == str(tmp_path / "work")
    assert isinstance(trainer.callbacks["checkpointer"], CheckpointerCallback)  # OLMo-core's defaults are added
    assert Checkpointer.find_checkpoints(str(tmp_path / "run"))[-1][0] == 2  # the run's end is saved


def test_load_checkpoint_none_loads_the_optimizer_when_the_checkpoint_has_it_and_honings_trainer_differs(tmp_path):
    step2 = Checkpointer.latest_checkpoint(trained_folder(tmp_path))
    # OLMo-core's: load_optim_state None loads the optimizer state the checkpoint holds, whatever the trainer state
    olmo = TrainerConfig(save_folder=str(tmp_path / "a"), max_duration=Duration.steps(4)).build(
        train_module(seed=1), data_loader()
    )
    olmo.load_checkpoint(step2, load_trainer_state=False)
    assert (
        olmo.global_step == 0
        and optimizer_steps(olmo.train_module)
        and set(optimizer_steps(olmo.train_module)) == {2.0}
    )
    # honing's own Trainer differs: its None follows load_trainer_state (a warm start gets a new optimizer)
    honing = HoningTrainer(
        TrainerSection(save_folder=str(tmp_path / "b"), max_duration="4steps"),
        train_module=train_module(seed=1),
        data_loader=data_loader(),
    )
    honing.load_checkpoint(step2, load_trainer_state=False)
    assert honing.global_step == 0 and optimizer_steps(honing.train_module) == []


def test_load_settings_without_load_path_apply_to_resuming_and_honings_trainer_refuses_them(tmp_path):
    folder = trained_folder(tmp_path)
    seen = OptimizerAtStart()
    config = TrainerConfig(save_folder=folder, max_duration=Duration.steps(3), load_optim_state=False)
    config.with_callback("seen", seen).build(train_module(), data_loader()).fit()
    assert seen.global_step == 2 and seen.steps == []  # the trainer state resumed, the optimizer did not
    seen = OptimizerAtStart()
    config = TrainerConfig(save_folder=folder, max_duration=Duration.steps(4), load_trainer_state=False)
    config.with_callback("seen", seen).build(train_module(), data_loader()).fit()
    # the optimizer resumed (None: the checkpoint has one): step 3's, which began afresh, so one AdamW step
    assert seen.global_step == 0 and set(seen.steps) == {1.0}
    with pytest.raises(ConfigError, match="trainer.load_optim_state: .* trainer.load_path is not set"):
        HoningTrainer(
            TrainerSection(save_folder=folder, load_optim_state=False),
            train_module=train_module(),
            data_loader=data_loader(),
        )


def test_the_pages_example_knows_its_batch_sizes_and_token_durations(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    example = __import__("olmo_core_style")
    loader = example.build_data_loader()
    tokens = len(loader.dataset[0]["input_ids"]) * loader.global_batch_size  # every row holds the same number
    trainer = TrainerConfig(save_folder=str(tmp_path / "run"), max_duration=Duration.steps(3)).build(
        example.build_train_module(), loader
    )
    assert trainer.global_batch_size == trainer.tokens_per_batch == trainer.rank_batch_size == tokens == 256
    assert trainer.tokens_per_epoch == loader.batches_per_epoch * tokens
    assert trainer.max_tokens == 3 * tokens
    assert trainer.convert_duration_to_steps(Duration.tokens(1000)) == -(-1000 // tokens)
    trainer.fit()
    assert trainer.global_train_tokens_seen == trainer.max_tokens  # what the loop counted, step by step
    sys.modules.pop("olmo_core_style", None)


def test_padded_rows_have_no_fixed_token_count():
    rows = [
        {"input_ids": torch.ones(4, dtype=torch.long), "attention_mask": torch.tensor([1, 1, 1, i % 2])}
        for i in range(8)
    ]
    assert DataLoader(rows, global_batch_size=4).tokens_per_batch is None
    uneven = [{"input_ids": torch.ones(3 + i % 2, dtype=torch.long)} for i in range(8)]
    assert DataLoader(uneven, global_batch_size=4).tokens_per_batch is None


class BatchesOnly:
    """A data loader that cannot tell how many batches an epoch holds (no ``total_batches``)."""

    epoch = 1

    def __iter__(self):
        return iter(())


def test_epoch_durations_need_the_loaders_total_batches(tmp_path):
    trainer = TrainerConfig(save_folder=str(tmp_path / "run"), max_duration=Duration.steps(1)).build(
        train_module(), data_loader()
    )
    assert trainer.data_loader.total_batches == trainer.steps_per_epoch == 8  # OLMo-core's name for the count
    assert trainer.convert_duration_to_steps(Duration.epochs(2)) == 16
    trainer.data_loader = BatchesOnly()
    assert trainer.steps_per_epoch is None
    with pytest.raises(RuntimeError, match="does not know its batches per epoch"):
        trainer.convert_duration_to_steps(Duration.epochs(1))
    assert trainer.convert_duration_to_steps(Duration.steps(5)) == 5


def test_enums_print_their_values_as_olmo_cores_str_enums():
    members = [DurationUnit.steps, LoadStrategy.always, ReduceType.l2_norm, MetricMergeStrategy.oldest]
    assert [str(member) for member in members] == ["steps", "always", "l2_norm", "oldest"]
    assert f"{DurationUnit.tokens}" == "tokens" and str(Duration.steps(3)) == "3steps"
    assert [member.value for member in LogFilterType] == ["rank0_only", "local_rank0_only", "all_ranks"]
    set_log_filter(LogFilterType.all_ranks)  # prepare_training_environment's log_filter_type takes a member
    set_log_filter(None)


def test_unshard_checkpoint_writes_whole_model_and_optimizer_files(tmp_path):
    folder = trained_folder(tmp_path)
    step2 = Checkpointer.latest_checkpoint(folder)
    model_path, optim_path = unshard_checkpoint(step2, tmp_path / "unsharded")
    model = torch.load(model_path, weights_only=True)
    fresh = train_module(seed=1)
    Checkpointer().load(step2, fresh, load_optimizer_state=False, load_trainer_state=False)  # read by DCP
    expected = fresh.model.state_dict()
    assert model.keys() == expected.keys() and all(torch.equal(model[key], expected[key]) for key in model)
    assert {float(state["step"]) for state in torch.load(optim_path, weights_only=True)["state"].values()} == {2.0}
    with pytest.raises(FileExistsError, match="save_overwrite"):
        unshard_checkpoint(step2, tmp_path / "unsharded")
    safetensors_path, no_optim = unshard_checkpoint(step2, tmp_path / "st", optim=False, use_safetensors=True)
    assert safetensors_path.name == "model.safetensors" and no_optim is None
