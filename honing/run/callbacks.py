"""The callback registry: name → config section → how it is built from the run's parts.

A new callback is one file in ``honing/train/callbacks/`` (its class sets its ``priority``, from the one
table in ``honing.train.callbacks.order``), one config section in ``honing.config.callbacks_schema.CallbacksSection``,
and one entry here. ``build_callbacks`` builds every entry whose section is enabled, in this order, then the
user's own callbacks (``callbacks.custom``).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from honing.distributed import print0
from honing.errors import ConfigError
from honing.evaluate.scorers import generation_metrics
from honing.train import Callback
from honing.train.callbacks.best_model import BestModelCallback, BestModelExportCallback
from honing.train.callbacks.checkpointer import CheckpointerCallback
from honing.train.callbacks.console import ConsoleCallback
from honing.train.callbacks.evaluate_before_training import EvaluateBeforeTrainingCallback
from honing.train.callbacks.evaluator import EvaluatorCallback
from honing.train.callbacks.export import ExportCallback
from honing.train.callbacks.gc import GarbageCollectorCallback
from honing.train.callbacks.generation_eval import GenerationEvalCallback
from honing.train.callbacks.harness_eval import HarnessEvalCallback
from honing.train.callbacks.hub_upload import HubUploadCallback
from honing.train.callbacks.loss_spike import LossSpikeCallback
from honing.train.callbacks.loss_watchdog import LossWatchdogCallback
from honing.train.callbacks.metrics_file import MetricsFileCallback
from honing.train.callbacks.profiler import ProfilerCallback
from honing.train.callbacks.sample import TextSampleCallback
from honing.train.callbacks.speed_monitor import SpeedMonitorCallback
from honing.train.callbacks.tensorboard import TensorBoardCallback
from honing.train.callbacks.upload import CheckpointUploadCallback
from honing.train.callbacks.wandb import WandbCallback

if TYPE_CHECKING:
    from honing.config.callbacks_schema import (
        CheckpointerSection,
        ConsoleSection,
        EvaluatorSection,
        GarbageCollectorSection,
        GenerationEvalSection,
        HubSection,
        LossSpikeSection,
        LossWatchdogSection,
        ProfilerSection,
        SampleSection,
        SpeedMonitorSection,
        TensorBoardSection,
        UploadSection,
        WandbSection,
    )
    from honing.config.evaluation import HarnessEvalSection
    from honing.run.parts import RunParts

log = logging.getLogger(__name__)

# What an entry's build function returns: callbacks by trainer name (their state is checkpointed under it).
Built = dict[str, Callback]


@dataclass(frozen=True)
class CallbackEntry:
    """One built-in callback: its trainer name, its ``callbacks.<section>`` (None: always on), and the
    function that builds it from the run's parts and that section (returning ``{}`` when it has nothing to do)."""

    name: str
    section: str | None
    build: Callable[[RunParts, Any], Built]

    def enabled(self, callbacks_config: Any) -> bool:
        """True when the entry has no section or its section's ``enabled`` is true."""
        if self.section is None:
            return True
        return bool(getattr(getattr(callbacks_config, self.section), "enabled", True))


def _checkpointer(parts: RunParts, cfg: CheckpointerSection) -> Built:
    return {
        "checkpointer": CheckpointerCallback(
            save_interval=cfg.save_interval,
            keep_last=cfg.keep_last,
            ephemeral_save_interval=cfg.ephemeral_save_interval,
            async_save=cfg.async_save,
            save_at_epoch_end=cfg.save_at_epoch_end,
        )
    }


def _evaluator(parts: RunParts, cfg: EvaluatorSection) -> Built:
    if parts.eval_batches is None:
        return {}
    evaluator = EvaluatorCallback(
        batches=parts.eval_batches,
        interval=cfg.interval,
        max_batches=cfg.max_batches,
        interval_fraction=cfg.interval_fraction,
        every_epoch=cfg.every_epoch,
    )
    if cfg.before_training:  # transformers' eval_on_start
        return {"evaluator": evaluator, "evaluate_before_training": EvaluateBeforeTrainingCallback(evaluator)}
    return {"evaluator": evaluator}


def _best_model(parts: RunParts, cfg: EvaluatorSection, built: Built) -> Built:
    """The best checkpoint by ``callbacks.evaluator.metric_for_best_model``, exported at the end; with
    ``load_best_model_at_end`` (metric default ``eval/loss``, as Hugging Face's) ``hf/`` is that model too."""
    at_end = cfg.load_best_model_at_end
    metric = cfg.metric_for_best_model or ("eval/loss" if at_end else None)
    if not metric or "evaluator" not in built or "checkpointer" not in built:
        if at_end:
            log.warning(
                "callbacks.evaluator.load_best_model_at_end: no validation data or no checkpointer, so there is no "
                "best model: hf/ holds the last step's"
            )
        return {}
    from honing.run.checkpoint_model import LiveModelExport

    best = BestModelCallback(
        built["checkpointer"],
        metric=metric,
        greater_is_better=cfg.greater_is_better,
        # through the run's own model (the best weights loaded in place), so the end needs no second model
        export_fn=LiveModelExport(
            lambda: parts.train_module.model,
            lambda: parts.outputs.processor,
            lambda: best.trainer.checkpointer.work_folder(best.trainer.checkpoint_dir(best.trainer.global_step)),
            keep_loaded=at_end,
        ),
    )
    if at_end and "export" in built:
        built["export"].best = best  # hf/ from the best checkpoint instead of the live model
    return {"best_model": best, "best_model_export": BestModelExportCallback(best)}


def _console(parts: RunParts, cfg: ConsoleSection) -> Built:
    return {"console": ConsoleCallback(log_interval=cfg.log_interval, plain=cfg.plain)}


def _speed_monitor(parts: RunParts, cfg: SpeedMonitorSection) -> Built:
    return {
        "speed_monitor": SpeedMonitorCallback(
            seq_len=parts.config.data.seq_len,
            peak_flops=cfg.peak_flops,
            precision=parts.precision,
            device=parts.device,
        )
    }


def _garbage_collector(parts: RunParts, cfg: GarbageCollectorSection) -> Built:
    return {"garbage_collector": GarbageCollectorCallback(interval=cfg.interval)}


def _loss_spike(parts: RunParts, cfg: LossSpikeSection) -> Built:
    return {
        "loss_spike": LossSpikeCallback(window=cfg.window, warmup_steps=cfg.warmup_steps, warn_score=cfg.warn_score)
    }


def _loss_watchdog(parts: RunParts, cfg: LossWatchdogSection) -> Built:
    if cfg.threshold is None:
        return {}
    return {"loss_watchdog": LossWatchdogCallback(threshold=cfg.threshold, patience=cfg.patience)}


def _sample(parts: RunParts, cfg: SampleSection) -> Built:
    if not cfg.prompts:
        return {}
    return {
        "sample": TextSampleCallback(
            parts.outputs.generate_text, prompts=cfg.prompts, interval=cfg.interval, printer=print0
        )
    }


def _generation_eval(parts: RunParts, cfg: GenerationEvalSection) -> Built:
    examples = parts.held_out_answers()[: cfg.num_prompts]
    if not examples:
        log.warning(
            "callbacks.generation_eval is enabled but there are no validation conversations ending in an "
            "assistant turn; it is skipped"
        )
        return {}
    cer, score_fn = generation_metrics(parts.config.method, cfg.metrics)
    return {
        "generation_eval": GenerationEvalCallback(
            lambda messages: parts.outputs.answer(messages, max_new_tokens=cfg.max_new_tokens),
            examples,
            interval=cfg.interval,
            printer=print0,
            character_error_rate=cer,
            score_fn=score_fn,
        )
    }


def _harness_eval(parts: RunParts, cfg: HarnessEvalSection) -> Built:
    from honing.run.harness_eval import harness_eval_fn  # lm-eval's imports only when asked for

    # the results are written to the trainer's folder: the callback knows its trainer once it is registered
    callback = HarnessEvalCallback(lambda step: evaluate(step), interval=cfg.interval, printer=print0)
    evaluate = harness_eval_fn(parts, cfg, trainer=lambda: callback.trainer)
    return {"harness_eval": callback}


def _wandb(parts: RunParts, cfg: WandbSection) -> Built:
    return {
        "wandb": WandbCallback(
            project=cfg.project,
            entity=cfg.entity,
            name=cfg.name or parts.config.run_name,
            tags=cfg.tags,
            group=cfg.group,
            mode=cfg.mode,
            api_key=cfg.api_key,
            config=parts.config.model_dump(mode="json"),
        )
    }  # the tracker redacts secrets


def _tensorboard(parts: RunParts, cfg: TensorBoardSection) -> Built:
    return {"tensorboard": TensorBoardCallback(config=parts.config.model_dump(mode="json"))}


def _profiler(parts: RunParts, cfg: ProfilerSection) -> Built:
    return {"profiler": ProfilerCallback(start=cfg.start, stop=cfg.stop)}


def _upload(parts: RunParts, cfg: UploadSection) -> Built:
    if not cfg.save_path:
        return {}
    return {"upload": CheckpointUploadCallback(cfg.save_path, storage=parts.config.storage)}


def _hub(parts: RunParts, cfg: HubSection) -> Built:
    if not cfg.repo_id:
        return {}
    if cfg.folder == "adapter" and parts.config.model.lora is None:
        raise ConfigError("callbacks.hub.folder: 'adapter' needs a LoRA run (model.lora); push 'hf' instead")
    hub = HubUploadCallback(
        cfg.repo_id, strategy=cfg.strategy, folder=cfg.folder, private=cfg.private, revision=cfg.revision
    )
    return {"hub": hub}


#: the built-in callbacks, in the order they are built (the trainer runs them by priority)
CALLBACKS: list[CallbackEntry] = [
    CallbackEntry("checkpointer", "checkpointer", _checkpointer),
    CallbackEntry("metrics_file", None, lambda parts, cfg: {"metrics_file": MetricsFileCallback()}),
    CallbackEntry("export", None, lambda parts, cfg: {"export": ExportCallback(parts.outputs.export)}),
    CallbackEntry("console", "console", _console),
    CallbackEntry("speed_monitor", "speed_monitor", _speed_monitor),
    CallbackEntry("garbage_collector", "garbage_collector", _garbage_collector),
    CallbackEntry("loss_spike", "loss_spike", _loss_spike),
    CallbackEntry("loss_watchdog", "loss_watchdog", _loss_watchdog),
    CallbackEntry("evaluator", "evaluator", _evaluator),
    CallbackEntry("sample", "sample", _sample),
    CallbackEntry("wandb", "wandb", _wandb),
    CallbackEntry("tensorboard", "tensorboard", _tensorboard),
    CallbackEntry("profiler", "profiler", _profiler),
    CallbackEntry("upload", "upload", _upload),
    CallbackEntry("hub", "hub", _hub),
    CallbackEntry("generation_eval", "generation_eval", _generation_eval),
    CallbackEntry("harness_eval", "harness_eval", _harness_eval),
]


def build_callbacks(parts: RunParts, entries: list[CallbackEntry] | None = None) -> Built:
    """Every enabled entry's callbacks, then best-model selection, then ``callbacks.custom``."""
    cfg = parts.config.callbacks
    built: Built = {}
    for entry in CALLBACKS if entries is None else entries:
        if entry.enabled(cfg):
            built.update(entry.build(parts, getattr(cfg, entry.section) if entry.section else None))
    # best-model selection needs the evaluator and the checkpointer built above
    built.update(_best_model(parts, cfg.evaluator, built))
    for index, custom in enumerate(cfg.custom):
        built[f"custom{index}"] = load_callback(custom.import_path, custom.kwargs, key=f"callbacks.custom[{index}]")
    return built


def load_callback(import_path: str, kwargs: dict[str, Any], *, key: str) -> Callback:
    """Import ``package.module:ClassName`` and instantiate it with ``kwargs``."""
    module_name, _, class_name = import_path.partition(":")
    try:
        module = importlib.import_module(module_name)
        cls = getattr(module, class_name)
    except (ImportError, AttributeError) as error:
        raise ConfigError(f"{key}.import_path: cannot import {import_path!r}: {error}") from None
    if not (isinstance(cls, type) and issubclass(cls, Callback)):
        raise ConfigError(f"{key}.import_path: {import_path!r} is not a honing.train.Callback subclass")
    return cls(**kwargs)
