"""Keys that olmOCR's forks add to its trainer config, read as those forks' own code reads them: Qwen-VL's
``tune_mm_llm`` / ``tune_mm_mlp`` / ``tune_mm_vision`` switches and ``qwen3_settings`` section (Backdrop9019/olmocr's
``train_qwen3.py``), ``model.max_memory``, ``training.pin_memory`` and ``collator_skip_over_max`` (pjuangph/olmocr),
``training.max_train_samples`` / ``max_eval_samples`` (posicube-services/KolmOCR), ``training.model_max_length``
(the Qwen-VL fine-tuning scripts' length cut) and ``training.best_model_*_weight`` (dahee325/vlmocr-finetune's
best-checkpoint score)."""

from __future__ import annotations

from typing import Any

from honing.interop.configs.axolotl_reasons import LOADER
from honing.interop.configs.translation import Keys, Translation

# Backdrop9019/olmocr's Qwen3Settings defaults, which its train_qwen3.py copies onto the processor's bounds
QWEN3_MIN_PIXELS = 12544
QWEN3_MAX_PIXELS = 1658944
# the Qwen-VL image processors' own patch merge size, the only one their checkpoints are built for
QWEN_MERGE_SIZE = 2


def translate_fork_model(t: Translation, model: Keys) -> None:
    """``tune_mm_*`` as ``model.freeze_vision`` / ``freeze_projector`` / ``freeze_language`` (the fork freezes
    every weight, then unfreezes the parts switched on), and ``max_memory`` (moot)."""
    switches = {name: model.take(f"tune_mm_{name}") for name in ("vision", "mlp", "llm")}
    if any(value is not None for value in switches.values()):
        vision, mlp, llm = (bool(switches[name]) for name in ("vision", "mlp", "llm"))
        t.set("model.freeze_vision", not vision)
        t.set("model.freeze_projector", not mlp)
        t.set("model.freeze_language", not llm)
        if not llm and t.get("model.lora") is not None:
            t.refuse(model.key("tune_mm_llm"), "false with use_lora: LoRA adapts the language model it freezes")
        t.note(  # the fork's set_model leaves an untied head and Qwen3-VL's DeepStack mergers out of its parts
            model.key("tune_mm_llm"),
            "as Qwen-VL's fine-tuning scripts: parts switched off stay frozen (model.freeze_vision / freeze_projector "
            "/ freeze_language); the LM head is the language model's, the DeepStack mergers the projector's",
        )
    model.note(
        "max_memory",
        "not needed: accelerate's per-device memory caps for from_pretrained's device_map; honing places the model "
        "itself (one device per process, or sharded by FSDP2)",
    )


def translate_fork_training(t: Translation, training: Keys) -> None:
    """The forks' ``training.*`` keys: the length cut, skipping over-long rows, the sample limits, pinned memory."""
    length = training.number("model_max_length", int)
    if length is not None:
        if "data.seq_len" in t.defaults:
            t.set("data.seq_len", length)
        else:  # both cuts apply: the shorter one decides
            t.set("data.seq_len", min(length, int(t.get("data.seq_len"))))
            t.note(training.key("model_max_length"), "with collator_max_token_len: the shorter cut (data.seq_len)")
    if training.take("collator_skip_over_max"):
        t.set("data.overlong", "drop")  # the fork's loader leaves rows longer than collator_max_token_len out
    training.note("pin_memory", LOADER)
    limit = training.number("max_train_samples", int)
    if limit is not None:
        sources = t.get("data.train", {}).get("sources", [])
        if len(sources) == 1:
            limit_source(sources[0], limit)
        elif sources:
            t.refuse(
                training.key("max_train_samples"),
                f"{limit}: the fork keeps the first {limit} rows of its sources together; give each source's "
                "max_samples (dataset.train[N].max_samples)",
            )
    limit = training.number("max_eval_samples", int)
    if limit is not None:  # the fork cuts each evaluation set to its first N rows
        for source in t.get("data.validation", {}).get("sources", []):
            limit_source(source, limit)
    translate_best_score_weights(t, training)


def translate_best_score_weights(t: Translation, training: Keys) -> None:
    """dahee325/vlmocr-finetune's best-checkpoint score, ``eval_weight x metric_for_best_model + train_weight x the
    last train loss`` (weights normalised; defaults 1 and 0): with no train-loss weight it is the metric alone, as
    olmOCR's; a blend is refused (honing ranks checkpoints by one validation metric)."""
    keys = ("best_model_eval_metric_weight", "best_model_train_loss_weight")
    weights = [training.number(name, float, default) for name, default in zip(keys, (1.0, 0.0), strict=True)]
    if not any(training.has(name) for name in keys):
        return
    if min(weights) < 0 or max(weights) == 0:
        t.refuse(training.key(keys[1]), f"weights {weights}: the fork needs both >= 0 and one > 0")
    elif weights[1] > 0:
        t.refuse(
            training.key(keys[1]),
            f"{weights[1]}: the fork ranks checkpoints by metric_for_best_model blended with the last train loss; "
            "honing ranks them by one validation metric (callbacks.evaluator.metric_for_best_model)",
        )
    else:
        t.note(training.key(keys[0]), "the fork's best-checkpoint score is metric_for_best_model alone (no train loss)")


def limit_source(source: dict[str, Any], limit: int) -> None:
    """A source's first ``limit`` rows (or fewer, when it is limited already)."""
    source["max_samples"] = min(limit, source.get("max_samples") or limit)


def translate_qwen3_settings(t: Translation, settings: Keys) -> None:
    """Backdrop9019/olmocr's ``qwen3_settings``: the processor's pixel bounds (its defaults where unset), the prompt
    order, and its switches, each honoured, moot with a note, or refused in one line."""
    t.set("data.min_pixels", settings.number("min_pixels", int, QWEN3_MIN_PIXELS))
    t.set("data.max_pixels", settings.number("max_pixels", int, QWEN3_MAX_PIXELS))
    settings.allow("merge_size", (QWEN_MERGE_SIZE,), "is not available: Qwen-VL's processors merge 2x2 patches")
    first = settings.take("prompt_first")
    if first is not None:
        chosen = t.get("data.pdf_pages.prompt_first")
        if chosen is not None and bool(chosen) != bool(first):
            t.refuse(settings.key("prompt_first"), f"{first!r} differs from the pipeline's InstructUserMessages step")
        else:
            t.set("data.pdf_pages.prompt_first", bool(first))
    settings.allow("use_olmocr_pipeline", (True,), "is not available: honing reads olmOCR's data through its pipeline")
    settings.note("model_type", "not needed: honing reads the model's family from its config")
    settings.allow("include_metadata", (False,), "is not available: honing's olmOCR prompts carry no page metadata")
    settings.note("skip_validation", "not needed: honing checks each PDF as it prepares the rows (data.bad_rows)")
    settings.done("not a key of the fork's Qwen3Settings")
