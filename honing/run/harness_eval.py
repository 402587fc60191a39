"""``callbacks.harness_eval``: the function its callback calls, from the run's model and tokenizer."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import torch

from honing.distributed import is_rank0
from honing.evaluate.harness import (
    RESULTS_FOLDER,
    HarnessSettings,
    flat_metrics,
    require_lm_eval,
    run_harness,
    task_manager,
    task_results,
    write_results,
)
from honing.export.hf_folder import export_hf, merged_model
from honing.models import is_lora, unwrap_model
from honing.models.loading import auto_model_class
from honing.models.parallel import is_sharded

if TYPE_CHECKING:
    from honing.config.evaluation import HarnessEvalSection
    from honing.run.parts import RunParts
    from honing.train import Trainer


def harness_settings(seed: int, cfg: HarnessEvalSection) -> HarnessSettings:
    """The harness settings of ``callbacks.harness_eval``."""
    return HarnessSettings.read(
        cfg, cfg.tasks, apply_chat_template=cfg.apply_chat_template, seed=seed, key="callbacks.harness_eval.tasks"
    )


def harness_eval_fn(
    parts: RunParts, cfg: HarnessEvalSection, *, trainer: Callable[[], Trainer]
) -> Callable[[int], dict[str, float] | None]:
    """``evaluate(step)``: every rank gathers a sharded model's weights; rank 0 runs lm-eval on the current
    weights, writes ``SAVE_FOLDER/eval/harness/<task>.json`` (``trainer()``'s folder) and returns the flat metrics
    (None elsewhere)."""
    require_lm_eval("callbacks.harness_eval")
    settings = harness_settings(parts.config.trainer.seed, cfg)
    task_manager(settings)  # an unknown task or a missing task file fails now, not after the first steps

    def evaluate(step: int) -> dict[str, float] | None:
        model = parts.model
        if not is_rank0() and not is_sharded(model):
            return None
        with evaluation_model(model, parts.device) as inference:
            if inference is None:  # another rank of a sharded model: it helped gather the weights
                return None
            per_task = task_results(run_harness(inference, parts.tokenizer, settings))
        folder = trainer().work_folder
        write_results(folder, per_task, step=step)
        trainer().persist_working_file(os.path.join(folder, RESULTS_FOLDER))  # uploaded when remote
        return flat_metrics(per_task)

    return evaluate


@contextlib.contextmanager
def evaluation_model(model: torch.nn.Module, device: torch.device) -> Iterator[torch.nn.Module | None]:
    """The model to evaluate: the training model itself (outside DDP), a merged copy of a LoRA model, or for a
    sharded model a whole copy on rank 0 read back from its streamed export (FSDP2's modules need every rank in a
    forward; every rank takes part in the gathers, and the other ranks get None)."""
    inner = unwrap_model(model)
    if not is_sharded(model):
        yield merged_model(inner) if is_lora(inner) else inner
        return
    rank0 = is_rank0()
    with tempfile.TemporaryDirectory() as folder:  # the export path merges LoRA and keys weights as on disk
        export_hf(inner, None, os.path.join(folder, "model"), write=rank0)
        if not rank0:
            yield None
            return
        config_model = inner.get_base_model() if is_lora(inner) else inner
        copy = auto_model_class(config_model.config).from_pretrained(os.path.join(folder, "model"))
        yield copy.to(device)
