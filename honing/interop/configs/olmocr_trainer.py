"""olmOCR's current trainer config (``olmocr/train/config.py``: ``model`` / ``dataset`` / ``training``, run by
``olmocr/train/train.py``) as a honing ``vl_sft`` config whose sources are ``format: olmocr_pages`` folders.

olmOCR's own loop trains with AdamW (or Muon), a transformers schedule over the steps of its epochs, bf16 autocast,
and one pipeline of steps per data set; the translation writes its dataclass defaults where the file says nothing.
Its batch keys are per device (``per_device_train_batch_size`` x ``gradient_accumulation_steps`` rows a process
steps on), which ``data.batch_size_per_rank`` keeps under torchrun.
"""

from __future__ import annotations

from typing import Any

from honing.interop.configs.hf_args import (
    set_epochs,
    set_optimizer,
    set_precision,
    set_schedule,
    set_warmup,
    step_interval,
)
from honing.interop.configs.machine_options import set_attention
from honing.interop.configs.olmocr_forks import translate_fork_model, translate_fork_training, translate_qwen3_settings
from honing.interop.configs.olmocr_hf_fields import translate_hf_fields
from honing.interop.configs.olmocr_muon import translate_muon
from honing.interop.configs.olmocr_pipeline import pipeline_options
from honing.interop.configs.translation import Keys, Translation

WHOSE = "olmOCR's TrainingConfig default"
# olmOCR's dataclass defaults that differ from honing's
DEFAULTS = {
    "optim.lr": 2e-5,
    "optim.betas": [0.9, 0.999],
    "optim.weight_decay": 0.01,
    "scheduler.name": "cosine",
    "scheduler.warmup_ratio": 0.1,
    "scheduler.semantics": "transformers",  # its Trainer's get_scheduler, step for step
    "callbacks.evaluator.interval": 500,
    "callbacks.checkpointer.save_interval": 500,
    "callbacks.checkpointer.keep_last": 3,
    "callbacks.console.log_interval": 10,
    "trainer.seed": 42,
}
# olmOCR has no row length limit without collator_max_token_len; honing's rows need one
UNLIMITED_SEQ_LEN = 16384
MOOT = {
    "tags": "a label for W&B only",
    "notes": "a label for W&B only",
    "experiment_tracker": "unused by olmOCR's trainer (training.report_to decides)",
    "distributed": "honing runs one process or many the same way (torchrun)",
    "local_rank": "honing reads the rank from torchrun's environment",
    "wandb_project": "unused by olmOCR's trainer (project_name names the W&B project)",
    "wandb_entity": "unused by olmOCR's trainer",
}


def is_olmocr_trainer(raw: dict[str, Any]) -> bool:
    """An olmOCR trainer config: a ``dataset`` section with ``train`` / ``eval`` lists (Oumi's is ``data``)."""
    dataset = raw.get("dataset")
    return isinstance(dataset, dict) and any(isinstance(dataset.get(name), list) for name in ("train", "eval"))


def translate_olmocr_trainer(raw: dict[str, Any]) -> Translation:
    """honing's config for an olmOCR trainer config, with refusals and notes."""
    t = Translation("olmOCR trainer")
    top = t.section(raw, "")
    t.set("method", "vl_sft")
    for path, value in DEFAULTS.items():
        t.default(path, value, WHOSE)
    t.set("trainer.precision", "bf16")  # olmOCR's loop autocasts to bfloat16
    t.set("model.freeze_vision", False)  # olmOCR's freeze_vision_tower defaults to false
    translate_model(t, t.section(top.take("model"), "model"))
    translate_dataset(t, t.section(top.take("dataset"), "dataset"))
    training = t.section(top.take("training"), "training")
    translate_training(t, training, run_name=top.peek("run_name"))
    if top.has("qwen3_settings"):  # a fork's section (Backdrop9019/olmocr)
        translate_qwen3_settings(t, t.section(top.take("qwen3_settings"), "qwen3_settings"))
    top.take("qwen3_settings")
    top.copy("run_name", "run_name", str)
    if top.has("project_name"):
        t.set("callbacks.wandb.project", str(top.take("project_name")))
    top.take("project_name")
    for name, why in MOOT.items():
        top.note(name, why)
    top.done("not a section of olmOCR's trainer config")
    return t


def translate_model(t: Translation, model: Keys) -> None:
    """``model.*``: the model, its dtype and attention kernel, LoRA, freezing."""
    model.copy("name", "model.name_or_path", str)
    if not model.has("name"):
        t.set("model.name_or_path", "Qwen/Qwen2.5-VL-7B-Instruct")  # olmOCR's default
    model.copy("trust_remote_code", "model.trust_remote_code", bool)
    dtype = model.take("torch_dtype", "auto")
    if dtype != "auto":
        set_precision(t, model.key("torch_dtype"), dtype)
    kernel = model.take("attn_implementation")
    if model.take("use_flash_attention", True) and kernel is not None:
        set_attention(t, model.key("attn_implementation"), str(kernel))
    if model.take("load_in_4bit"):
        t.set("model.quantize", "nf4")
    if model.take("load_in_8bit"):
        t.set("model.quantize", "int8")
    model.note("device_map", "honing places the model itself (one device per process, or sharded by FSDP2)")
    model.copy("freeze_vision_tower", "model.freeze_vision", bool)
    model.copy("freeze_language_model", "model.freeze_language", bool)
    translate_lora(t, model)
    translate_fork_model(t, model)
    model.done()


def translate_lora(t: Translation, model: Keys) -> None:
    """``use_lora`` and ``lora_*``: LoRA as olmOCR's trainer builds it (bias none, causal LM)."""
    names = ("lora_rank", "lora_alpha", "lora_dropout", "lora_target_modules", "lora_modules_to_save")
    if not model.take("use_lora", False):
        t.set("model.lora", None)
        for name in names:
            model.note(name, "unused: use_lora is false")
        return
    t.set("model.lora.rank", model.number("lora_rank", int, 8))
    t.set("model.lora.alpha", model.number("lora_alpha", float, 32.0))
    t.set("model.lora.dropout", model.number("lora_dropout", float, 0.1))
    t.set("model.lora.target_modules", model.names("lora_target_modules") or ["q_proj", "v_proj", "k_proj", "o_proj"])
    saved = model.names("lora_modules_to_save")
    if saved:
        t.set("model.lora.modules_to_save", saved)


def translate_dataset(t: Translation, dataset: Keys) -> None:
    """``dataset.train`` / ``dataset.eval``: each entry a ``format: olmocr_pages`` source; the first pipeline is
    ``data.pdf_pages``, another that differs the source's own ``pdf_pages`` (the render size and the token flip rate,
    run-wide in honing, must agree)."""
    chosen: dict[str, Any] | None = None
    for split, name in (("train", "train"), ("validation", "eval")):
        entries = dataset.take(name, [])
        if not isinstance(entries, list):
            t.refuse(dataset.key(name), f"{entries!r}: expected a list of data sets")
            continue
        sources = []
        for index, entry in enumerate(entries):
            keys = t.section(entry, f"{dataset.key(name)}[{index}]")
            source: dict[str, Any] = {"path": keys.take("root_dir"), "format": "olmocr_pages"}
            if source["path"] is None:
                t.refuse(keys.key("root_dir"), "required key is missing")
            label = keys.take("name")
            if label is not None and split == "validation":  # its metric: eval/<name>/loss (olmOCR's eval_<name>_loss)
                source["name"] = "".join(c if c.isalnum() or c in "_.-" else "_" for c in str(label))
            samples = keys.number("max_samples", int)
            if samples is not None:
                source["max_samples"] = samples
            # a pipeline after the first (often the same YAML anchor) adds its refusals, not its notes again
            scratch = t if chosen is None else Translation(t.dialect)
            options = pipeline_options(scratch, keys.key("pipeline"), keys.take("pipeline"))
            if scratch is not t:
                t.refused += scratch.refused
            if chosen is None:
                chosen = {"options": options[0], "side": options[1], "where": keys.key("pipeline")}
            elif options[1] != chosen["side"]:
                t.refuse(
                    keys.key("pipeline"),
                    f"its PDFRenderer size ({options[1]}) differs from {chosen['where']}'s ({chosen['side']}): honing "
                    "renders every source's pages at one data.pdf_longest_side",
                )
            elif options[0].get("token_flip_rate") != chosen["options"].get("token_flip_rate"):
                t.refuse(
                    keys.key("pipeline"),
                    f"its token flip rate differs from {chosen['where']}'s: honing flips every source's reply tokens "
                    "at one data.pdf_pages.token_flip_rate",
                )
            elif options[0] != chosen["options"]:  # this source's own steps: its own pdf_pages, its notes too
                source["pdf_pages"] = options[0]
                t.notes += scratch.notes
            keys.done("not a key of an olmOCR data set")
            sources.append(source)
        if sources:
            t.set(f"data.{split}", {"sources": sources})
    if t.get("data.train") is None:
        t.refuse(dataset.key("train"), "required: at least one training data set")
    cache = dataset.take("cache_dir")  # a fork's cache of the prepared pages (yinz-aizip/olmocr), honing's row cache
    if cache is not None:
        t.set("data.cache_dir", str(cache))
    if chosen is not None:
        t.set("data.pdf_pages", chosen["options"])
        if chosen["side"] is not None:
            t.set("data.pdf_longest_side", int(chosen["side"]))
    dataset.done("not a split of olmOCR's dataset section")


def translate_training(t: Translation, training: Keys, *, run_name: Any) -> None:
    """``training.*``: folder, duration, per-device batch, optimizer, schedule, checkpoints, evaluation, logging."""
    folder = training.take("output_dir", "./outputs")
    t.set("trainer.save_folder", f"{str(folder).rstrip('/')}/{run_name}" if run_name else str(folder))
    epochs = training.number("num_train_epochs", float, 1)
    if epochs is not None:
        set_epochs(t, training.key("num_train_epochs"), epochs)
    per_device = training.number("per_device_train_batch_size", int, 1)
    accumulation = training.number("gradient_accumulation_steps", int, 8)
    t.set("data.micro_batch_size", per_device)
    t.set("data.batch_size_per_rank", per_device * accumulation)
    training.copy("per_device_eval_batch_size", "callbacks.evaluator.batch_size", int)
    translate_optimizer(t, training)
    if training.take("gradient_checkpointing", False):
        t.set("parallel.activation_checkpointing", "full")
    training.note("gradient_checkpointing_kwargs", "honing's activation checkpointing is non-reentrant")
    translate_checkpoints_and_eval(t, training)
    training.copy("seed", "trainer.seed", int)
    training.note("data_seed", "honing's shuffle follows trainer.seed (olmOCR's draws from torch's RNG)")
    training.copy("dataloader_num_workers", "data.num_workers", int)
    if training.take("dataloader_drop_last", True) is False:  # transformers' table says the same (moot)
        t.note(
            training.key("dataloader_drop_last"),
            "not needed: honing's loader always drops an epoch's last rows short of a full batch (fewer than one "
            "batch an epoch)",
        )
    training.note(  # posicube's KolmOCR fork hands it to transformers' DataLoader
        "dataloader_prefetch_factor",
        "unused: how many batches each loader process reads ahead (a fork's key); honing's (data.num_workers) read 2 "
        "ahead each, the same batches",
    )
    limit = training.number("collator_max_token_len", int)
    if limit is not None:
        t.set("data.seq_len", limit)
    else:
        t.default("data.seq_len", UNLIMITED_SEQ_LEN, "olmOCR has no limit without collator_max_token_len")
    t.set("data.overlong", "truncate")  # olmOCR's collator cuts rows at collator_max_token_len
    training.note("remove_unused_columns", "honing's rows hold only what the model takes")
    compile_ = training.take("torch_compile", False)
    t.set("parallel.compile", bool(compile_))
    for name in ("torch_compile_backend", "torch_compile_mode", "torch_compile_fullgraph", "torch_compile_dynamic"):
        training.note(name, "honing compiles each block with torch.compile's defaults (inductor)")
    training.allow("use_early_stopping", (False,), "is not available: honing trains for trainer.max_duration")
    for name in ("early_stopping_patience", "early_stopping_threshold"):
        training.note(name, "unused: use_early_stopping is false")
    translate_fork_training(t, training)
    translate_hf_fields(t, training)
    training.done("not a key of olmOCR's TrainingConfig, nor of transformers' TrainingArguments")


def translate_optimizer(t: Translation, training: Keys) -> None:
    """The optimizer (AdamW or Muon), its settings, clipping and the schedule with its warmup."""
    name = str(training.take("optim", "adamw_torch"))
    set_optimizer(t, training.key("optim"), name)
    training.copy("learning_rate", "optim.lr", float)
    training.copy("weight_decay", "optim.weight_decay", float)
    if training.has("adam_beta1") or training.has("adam_beta2"):
        t.set("optim.betas", [training.number("adam_beta1", float, 0.9), training.number("adam_beta2", float, 0.999)])
    training.copy("adam_epsilon", "optim.eps", float)
    norm = training.number("max_grad_norm", float, 1.0)
    t.set("optim.grad_clip", norm if norm else None)
    translate_muon(t, training, name)
    set_schedule(
        t,
        training.key("lr_scheduler_type"),
        str(training.take("lr_scheduler_type", "cosine")),
        training.take("lr_scheduler_kwargs"),
    )
    set_warmup(t, training.key("warmup_steps"), None, training.key("warmup_ratio"), training.take("warmup_ratio"))


def translate_checkpoints_and_eval(t: Translation, training: Keys) -> None:
    """Evaluation and checkpoints every N steps, the checkpoints kept, logging and trackers."""
    # eval_strategy: transformers' current name of evaluation_strategy, which forks write
    by_epoch = False
    for name in ("evaluation_strategy", "eval_strategy"):
        if str(training.peek(name, "steps")).lower() == "epoch":  # transformers' epoch strategy: honing's every_epoch
            training.take(name)
            by_epoch = True
        else:
            training.allow(name, ("steps",), "is not available: honing runs eval_steps every N steps (or every epoch)")
    training.allow("save_strategy", ("steps",), "is not available: honing runs save_steps every N steps")
    if by_epoch:
        t.set("callbacks.evaluator.every_epoch", True)
        if training.has("eval_steps"):
            training.note("eval_steps", "not used: the strategy is 'epoch' (callbacks.evaluator.every_epoch)")
    training.copy("eval_steps", "callbacks.evaluator.interval", int)
    training.copy("save_steps", "callbacks.checkpointer.save_interval", int)
    training.copy("save_total_limit", "callbacks.checkpointer.keep_last", int)
    for name in ("load_best_model_at_end", "metric_for_best_model", "greater_is_better"):
        training.note(
            name,
            "olmOCR's trainer only tracks the best value; honing logs every eval/<name>/loss and exports the last step",
        )
    interval = step_interval(t, training.key("logging_steps"), training.take("logging_steps"))
    if interval is not None:
        t.set("callbacks.console.log_interval", interval)
    for name in ("logging_dir", "logging_strategy", "logging_first_step"):
        training.note(name, "honing logs every callbacks.console.log_interval steps (and TensorBoard under the folder)")
    trackers = training.names("report_to") or []
    if "wandb" in trackers:
        t.set("callbacks.wandb.enabled", True)
    if "tensorboard" in trackers:  # honing's TensorBoard callback is off by default
        t.set("callbacks.tensorboard.enabled", True)
    for tracker in trackers:
        if tracker not in ("wandb", "none", "tensorboard"):
            t.refuse(training.key("report_to"), f"{tracker!r} is not available: honing logs to W&B and TensorBoard")
