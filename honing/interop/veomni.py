"""VeOmni's ``BaseTrainer`` as its document writes it, over one of honing's method recipes.

    from honing.interop.veomni import BaseTrainer, Callback, TrainingArguments, VeOmniArguments, parse_args
    from honing.recipes.vl_sft import VLSFTRecipe

    class VLMTrainer(BaseTrainer, VLSFTRecipe):   # VeOmni: class VLMTrainer(BaseTrainer)
        arguments = Arguments                      # the config sections it reads (VeOmni's "extending arguments")

        def freeze_module(self):
            if self.args.train.freeze_vit:
                self.model.model.visual.requires_grad_(False)

    trainer = VLMTrainer(parse_args(Arguments))
    trainer.add_callback(MyCallback(trainer))
    trainer.train()

A ``BaseTrainer`` is honing's recipe for the method (its ``build()`` parts, its ``build_*`` hooks, VeOmni's
``freeze_module(self)`` included) with VeOmni's names on it: ``self.args``, ``self.optimizer``,
``self.lr_scheduler``, ``self.train_dataloader``, ``self.callbacks.call(...)``, ``self.state`` and ``add_callback``;
``train()`` runs it. honing's loop (``Trainer.fit``: durations, checkpoints, resume, evaluation, cancel) hands each
step's batch to ``train_step`` as a one-item iterator of its micro-batches; ``train_step``,
``forward_backward_step``, ``preforward`` and ``postforward`` are the methods VeOmni's document overrides, and what a
subclass overrides is what runs. With none overridden the step is the method's own (``honing.interop.veomni_step``),
to the same weights.

``BaseTrainer`` does not derive from ``Recipe`` itself: the method's recipe comes in as the subclass's second base
(the recipes name no other system; ``honing.interop.veomni_recipe`` adapts VeOmni's steps as the class is defined).
Method recipes themselves run honing's own loop, untouched (``Trainer.step_runner`` stays None).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any, ClassVar

import torch

from honing.errors import ConfigError
from honing.interop.callback_names import micro_batches_of
from honing.interop.veomni_arguments import (
    ArgumentsView,
    TrainingArguments,
    VeOmniArguments,
    parse_args,
    sections_of,
)
from honing.interop.veomni_callbacks import Callback, CallbackHandler, LoopEvents, in_veomni_form
from honing.interop.veomni_collate import DataCollateInfo
from honing.interop.veomni_functions import TRAINERS_OF_MODELS, build_processor, veomni_clip_grad_norm
from honing.interop.veomni_step import LRScheduler, NextTokenLoss
from honing.models.parallel import gradient_sync
from honing.train.metrics import ReduceType

__all__ = [
    "BaseTrainer",
    "Callback",
    "DataCollateInfo",
    "TrainingArguments",
    "VeOmniArguments",
    "build_processor",
    "parse_args",
    "veomni_clip_grad_norm",
]


class BaseTrainer:
    """VeOmni's ``BaseTrainer`` names over a method's recipe: subclass both, ``class T(BaseTrainer, VLSFTRecipe)``;
    ``T(args)`` takes the run config (``parse_args(Arguments)``, or the CLI's when the YAML names ``recipe: pkg:T``)."""

    #: the arguments this trainer reads: their sections beyond honing's (``train``) are accepted by its config
    arguments: ClassVar[type] = VeOmniArguments
    #: what ``honing.config`` reads to accept them (derived from ``arguments``)
    config_sections: ClassVar[dict[str, type]] = sections_of(VeOmniArguments)

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        cls.config_sections = sections_of(cls.arguments)

    def __init__(self, args: Any, *more: Any, **options: Any):
        if not callable(getattr(super(), "build", None)):
            raise TypeError(
                f"{type(self).__name__}: a BaseTrainer is subclassed together with a method's recipe, e.g. "
                f"class {type(self).__name__}(BaseTrainer, VLSFTRecipe)"
            )
        super().__init__(args, *more, **options)
        self.callbacks = CallbackHandler(self)
        self.lr_scheduler: LRScheduler | None = None
        self.next_token: NextTokenLoss | None = None  # the default step's loss (built with the train module)
        self._honing_callbacks: list[Any] = []  # honing-form callbacks added before the Trainer exists
        self._args: ArgumentsView | None = None

    # --- VeOmni's attributes ----------------------------------------------------------
    @property
    def args(self) -> ArgumentsView:
        """The run config as VeOmni's ``args``: ``args.model``, ``args.data``, ``args.train`` (see
        ``honing.interop.veomni_arguments``)."""
        if self._args is None:
            self._args = ArgumentsView(self.config, type(self).config_sections)
        return self._args

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        """The train module's optimizer."""
        return self.train_module.optimizer

    @property
    def train_dataloader(self) -> Any:
        """honing's data loader: each step's batch, which ``train_step`` receives as its micro-batches."""
        return self.train_loader

    @property
    def state(self) -> Any:
        """The Trainer, as VeOmni's ``TrainerState``: ``global_step``, ``epoch``."""
        return self.trainer

    def add_callback(self, callback: Any) -> None:
        """VeOmni's ``add_callback(MyCallback(trainer))``: a callback in VeOmni's form joins ``self.callbacks``; one
        in honing's (or OLMo-core's) the Trainer's, named by its class."""
        if in_veomni_form(callback):
            self.callbacks.add(callback)
        elif getattr(self, "trainer", None) is None:  # not built yet: the Trainer takes it when it is
            self._honing_callbacks.append(callback)
        else:
            self.trainer.add_callback(callback)

    def train(self) -> Any:
        """VeOmni's entry point: prepare the environment, build, train, tear down (honing's ``run()``)."""
        return self.run()

    # --- the step, as VeOmni's document writes it ---------------------------------------
    def train_step(self, data_iterator: Iterator[list[dict[str, Any]]]) -> None:
        """One optimizer step: the step's micro-batches, each through ``forward_backward_step``; then the
        gradients clipped, the optimizer and LR scheduler stepped, and the gradients zeroed."""
        micro_batches: list[dict[str, Any]] = next(data_iterator)
        self.callbacks.call("on_step_begin", self.state, micro_batches=micro_batches)
        total_loss: Any = 0.0
        total_loss_dict: dict[str, Any] = defaultdict(float)
        last = len(micro_batches) - 1
        for micro_step, micro_batch in enumerate(micro_batches):
            with gradient_sync(self.model, micro_step == last):  # gradients reduced over ranks after the last only
                loss, loss_dict = self.forward_backward_step(micro_batch)
            total_loss = total_loss + loss.detach()
            for key, value in loss_dict.items():
                total_loss_dict[key] = total_loss_dict[key] + value
        self.next_token.record(total_loss)
        self.callbacks.call("pre_optim_step", self.state)  # honing's event (OLMo-core's name), before clipping
        grad_norm = self.clip_grad_norm(self.args.train.optimizer.max_grad_norm)
        self.optimizer.step()
        self.lr_scheduler.step()
        self.optimizer.zero_grad()
        self.callbacks.call(
            "on_step_end", self.state, loss=total_loss, loss_dict=dict(total_loss_dict), grad_norm=grad_norm
        )

    def forward_backward_step(self, micro_batch: dict[str, Any]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """One micro-batch: ``preforward``, the model's forward, ``postforward``, backward; ``(loss, loss_dict)``."""
        micro_batch = self.preforward(micro_batch)
        outputs = self.model_forward(micro_batch)
        loss, loss_dict = self.postforward(outputs, micro_batch)
        loss.backward()
        return loss, loss_dict

    def preforward(self, micro_batch: dict[str, Any]) -> dict[str, Any]:
        """The micro-batch's tensors on the model's device."""
        device = self.train_module.device
        return {
            key: value.to(device, non_blocking=True) if isinstance(value, torch.Tensor) else value
            for key, value in micro_batch.items()
        }

    def model_forward(self, micro_batch: dict[str, Any]) -> Any:
        """The model's forward on a micro-batch, its loss head run over chunks (VeOmni: ``self.model(**micro_batch)``):
        ``outputs.loss`` is the micro-batch's summed next-token cross-entropy."""
        return self.next_token.forward(micro_batch)

    def postforward(self, outputs: Any, micro_batch: dict[str, Any]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The micro-batch's loss from the model's outputs: its share of the step's mean over target tokens."""
        return self.next_token.share(outputs, micro_batch)

    def clip_grad_norm(self, max_norm: float | None) -> torch.Tensor:
        """VeOmni's ``veomni_clip_grad_norm(self.model, max_norm)``: the gradients' total norm (recorded as
        ``optim/grad_norm``), clipped to ``max_norm`` (None: not clipped)."""
        grad_norm = self.train_module.updater.clip_grad_norm(max_norm)
        self.trainer.record_metric("optim/grad_norm", grad_norm, ReduceType.max)
        return grad_norm

    # --- wired into honing's build ------------------------------------------------------
    def build_trainer(self, parts: Any) -> Any:
        """The method's Trainer over the run's ``parts``, its steps run by ``train_step`` and its train / epoch
        events passed on to ``self.callbacks``; the LR scheduler over the train module's schedule."""
        trainer = super().build_trainer(parts)
        self.check_step()
        self.lr_scheduler = LRScheduler(self.train_module)
        TRAINERS_OF_MODELS[self.model] = self  # veomni_clip_grad_norm(self.model, ...) clips as this trainer does
        self.args.attach_loop(trainer)
        trainer.step_runner = self._run_step
        trainer.add_callback("veomni_loop_events", LoopEvents(self.callbacks, self.lr_scheduler))
        for callback in self._honing_callbacks:
            trainer.add_callback(callback)
        self._honing_callbacks.clear()
        return trainer

    def check_step(self) -> None:
        """Refuse, in one line, what VeOmni's step does not do: ``parallel.cp`` above 1, ``trainer.nonfinite_loss:
        skip``; the default ``train_step`` also needs the method's next-token loss (pretrain, sft, vl_sft)."""
        if self.parallel_dims.cp > 1:
            raise ConfigError(
                f"parallel.cp={self.parallel_dims.cp}: {type(self).__name__}'s train_step (VeOmni's) does not cut "
                "rows over sequence-parallel ranks; use parallel.cp=1, or the method's own recipe"
            )
        if self.config.trainer.skips_nonfinite_steps:
            raise ConfigError(
                f"trainer.nonfinite_loss: skip is honing's own optimizer step's; {type(self).__name__}'s train_step "
                "steps as VeOmni's: use stop (the default), or the method's own recipe"
            )
        if hasattr(self.train_module, "forward_loss"):
            self.next_token = NextTokenLoss(self.train_module)
        elif type(self).train_step is BaseTrainer.train_step:
            raise ConfigError(
                f"{type(self).__name__}: the default train_step trains the next-token loss (methods pretrain, sft, "
                f"vl_sft); method {self.config.method!r} has its own: override train_step, or use its own recipe"
            )

    def _run_step(self, batch: Any, emit: Any) -> None:
        """The Trainer's step runner: ``train_step`` over this step's micro-batches (``emit``: honing's events).
        The step is begun here, not in ``train_step``, so that one written as VeOmni's document writes it (no
        honing calls in it) trains too; its loss is recorded after it when it did not record it itself."""
        self.callbacks.emit = emit
        micro_batches = micro_batches_of(self.trainer)
        self.train_module.start_step()
        if self.next_token is not None:  # the step's target tokens over every rank: what the loss averages
            self.next_token.begin(micro_batches)
        self.train_step(iter([micro_batches]))
        if self.next_token is not None and not self.next_token.recorded and torch.is_tensor(self.next_token.total):
            self.next_token.record(self.next_token.total)  # a train_step without honing's record: its shares

    # --- VeOmni's loop counters (its train() reads them; honing's Trainer.fit runs the loop) ----------------
    @property
    def start_epoch(self) -> int:
        """The epoch (from 0, as VeOmni counts) the run starts or resumes in."""
        return max(self.trainer.epoch - 1, 0)

    @property
    def start_step(self) -> int:
        """The step within that epoch the run starts or resumes at (from 0)."""
        per_epoch = self.trainer.steps_per_epoch
        return self.trainer.global_step % per_epoch if per_epoch else self.trainer.global_step
