"""olmOCR's ``TrainConfig`` YAML (``model`` / ``lora`` / ``train_data`` / ``valid_data`` / ``hparams`` / ``save`` /
``generate`` / ``wandb`` / ``aws``) as a honing ``vl_sft`` config.

olmOCR fine-tunes with Hugging Face's ``Trainer``: the translation writes its defaults (and olmOCR's dataclass
defaults) where the file says nothing, keeps the best model by ``valid_data.metric_for_best_model``, and copies
every checkpoint to ``save.path`` (local or ``s3://``) as olmOCR's ``CheckpointUploadCallback`` does.
"""

from __future__ import annotations

import re
from typing import Any

from honing.interop.configs.hf_args import (
    duration,
    set_hf_defaults,
    set_optimizer,
    set_precision,
    set_schedule,
    set_warmup,
)
from honing.interop.configs.machine_options import set_attention
from honing.interop.configs.translation import Keys, Translation, read_number, schema_has

OLMOCR_SECTIONS = ("hparams", "train_data", "valid_data", "save", "aws", "generate")
# olmOCR's HyperparamConfig / DataConfig / SaveConfig defaults
DEFAULT_SEED = 42
REGEX_CHARACTERS = re.compile(r"[\[\]()+*?|\\^$]")


def is_olmocr(raw: dict[str, Any]) -> bool:
    """An olmOCR TrainConfig: one of its own sections (``hparams``, ``train_data``, ``save``, ...) at the top."""
    return any(section in raw for section in OLMOCR_SECTIONS)


def translate_olmocr(raw: dict[str, Any]) -> Translation:
    """honing's config for an olmOCR TrainConfig, with refusals and notes."""
    t = Translation("olmOCR")
    top = t.section(raw, "")
    t.set("method", "vl_sft")
    set_hf_defaults(t)
    t.set("optim.lr", 2e-5)
    t.set("trainer.precision", "bf16")  # olmOCR loads the model in bfloat16 (model.dtype)
    t.set("model.freeze_vision", False)  # olmOCR freezes nothing; LoRA freezes the base
    translate_model(t, t.section(top.take("model"), "model"))
    translate_lora(t, top)
    hparams = t.section(top.take("hparams"), "hparams")
    translate_hparams(t, hparams)
    seed = hparams.peek("seed")
    for split, name in (("train", "train_data"), ("validation", "valid_data")):
        if top.has(name):
            translate_data(t, t.section(top.take(name), name), split, hparams_seed=seed)
        top.take(name)
    translate_save(t, t.section(top.take("save"), "save"), eval_every=hparams.peek("eval_every_steps", 100))
    translate_generate(t, t.section(top.take("generate"), "generate"))
    translate_wandb(t, top)
    translate_aws(t, t.section(top.take("aws"), "aws"))
    if top.has("format"):
        t.note("format", "unused: olmOCR's TrainConfig has no such section (the model's chat template is used)")
    top.take("format")
    top.copy("max_workers", "data.num_workers", int)
    if top.has("num_proc"):
        t.note("num_proc", "honing prepares rows with its own worker processes (honing prepare --workers)")
    top.take("num_proc")
    top.done("not an olmOCR TrainConfig section")
    return t


def translate_model(t: Translation, model: Keys) -> None:
    """``model.*``: name, dtype, attention, remote code."""
    model.copy("name_or_path", "model.name_or_path")
    model.allow("arch", ("causal",), "is not available: honing trains with transformers ('causal')")
    set_precision(t, model.key("dtype"), model.take("dtype"))
    if model.take("use_flash_attn"):
        set_attention(t, model.key("use_flash_attn"), "flash_attention_2")
    model.copy("trust_remote_code", "model.trust_remote_code", bool)
    if model.has("low_cpu_mem_usage"):
        t.note(model.key("low_cpu_mem_usage"), "honing loads weights straight into the model (no second copy)")
    model.take("low_cpu_mem_usage")
    model.allow("fast_tokenizer", (True,), "is not available: honing uses the processor's fast tokenizer")
    model.refuse("model_revision", "not available: give a local folder of that revision")
    model.done()


def translate_lora(t: Translation, top: Keys) -> None:
    """``lora.*`` as ``model.lora``; no ``lora`` section: full fine-tuning (olmOCR's ``lora: null``)."""
    if not top.has("lora"):
        top.take("lora")
        t.set("model.lora", None)
        return
    lora = t.section(top.take("lora"), "lora")
    # olmOCR's LoraConfig defaults: rank 16, alpha 16, dropout 0.05
    t.set("model.lora.rank", lora.number("rank", int, 16))
    t.set("model.lora.alpha", lora.number("alpha", float, 16.0))
    t.set("model.lora.dropout", lora.number("dropout", float, 0.05))
    lora.copy("bias", "model.lora.bias", str)
    if lora.has("task_type"):
        t.set("model.lora.task_type", str(lora.take("task_type")).upper())
    lora.take("task_type")
    targets = lora.names("target_modules") or [
        "k_proj",
        "q_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "down_proj",
        "up_proj",
    ]
    t.set("model.lora.target_modules", lora_targets(t, targets))
    lora.done()


def lora_targets(t: Translation, targets: list[str]) -> str | list[str]:
    """olmOCR's target list as peft reads it; entries written as regexes (``visual.blocks.[0-9]+.attn.qkv``) become
    one regex over full module names, so they select what they say (peft compares list entries as plain names)."""
    if not any(REGEX_CHARACTERS.search(name) for name in targets):
        return list(targets)
    t.note(
        "lora.target_modules",
        "entries with regex characters: one peft regex over module names, each entry matching a name or its end",
    )
    return r"(?:.*\.)?(?:" + "|".join(targets) + ")"


def translate_hparams(t: Translation, hparams: Keys) -> None:
    """``hparams.*``: batch, optimizer, schedule, duration, evaluation and logging intervals."""
    batch = hparams.number("batch_size", int, 8)
    accumulation = hparams.number("gradient_accumulation_steps", int, 1)
    # per device, as Hugging Face's Trainer reads them: under torchrun each process steps on this many rows
    t.set("data.micro_batch_size", batch)
    t.set("data.batch_size_per_rank", batch * accumulation)
    hparams.copy("eval_batch_size", "callbacks.evaluator.batch_size", int)
    hparams.copy("learning_rate", "optim.lr", float)
    steps = hparams.number("max_steps", int) if hparams.has("max_steps") else -1
    if steps is not None and steps <= 0:
        t.refuse(
            "hparams.max_steps",
            f"{steps!r}: olmOCR then trains 3 epochs of a data set it samples; give a number of steps",
        )
    duration(t, "hparams.max_steps", steps, "hparams.num_train_epochs", None)
    if hparams.has("pad_multiple_of"):
        t.note("hparams.pad_multiple_of", "honing pads each batch to its longest row (the same losses)")
    hparams.take("pad_multiple_of")
    hparams.copy("log_every_steps", "callbacks.console.log_interval", int)
    t.set("callbacks.evaluator.interval", hparams.number("eval_every_steps", int, 100))
    hparams.copy("weight_decay", "optim.weight_decay", float)
    set_warmup(
        t, "hparams.warmup_steps", hparams.take("warmup_steps"), "hparams.warmup_ratio", hparams.take("warmup_ratio")
    )
    set_schedule(t, "hparams.lr_scheduler", str(hparams.take("lr_scheduler", "linear")))
    if hparams.take("gradient_checkpointing"):
        t.set("parallel.activation_checkpointing", "full")
    t.set("trainer.seed", hparams.number("seed", int, DEFAULT_SEED))
    hparams.allow("reduce_loss", ("mean",), "is not available: honing averages the loss over the batch's tokens")
    clip = hparams.number("clip_grad_norm", float, 0.0)
    t.set("optim.grad_clip", clip if clip else None)
    set_optimizer(t, "hparams.optim", str(hparams.take("optim", "adamw_torch")))
    if hparams.has("find_unused_parameters"):
        t.note("hparams.find_unused_parameters", "honing's DDP / FSDP2 needs no such flag")
    hparams.take("find_unused_parameters")
    hparams.done()


def translate_data(t: Translation, data: Keys, split: str, *, hparams_seed: Any) -> None:
    """``train_data`` / ``valid_data``: OpenAI batch responses (``format: olmocr_batch``) with their page size, anchor
    text length, requests, cache, seed and the best-model metric."""
    sources = []
    items = data.take("sources", [])
    if not isinstance(items, list):
        t.refuse(data.key("sources"), f"{items!r}: expected a list of sources")
        items = []
    for index, item in enumerate(items):
        keys = t.section(item, f"{data.key('sources')}[{index}]")
        source: dict[str, Any] = {"path": keys.take("response_glob_path"), "format": "olmocr_batch"}
        name = keys.take("name")
        if name is not None and split == "validation":  # its metrics: eval/<name>/loss, as olmOCR's <name>_loss
            source["name"] = re.sub(r"[^\w.-]+", "_", str(name))
        elif name is not None:
            t.note(keys.key("name"), "a name for messages only")
        size = one_value(t, keys, "target_longest_image_dim", "size", "renders every page at one data.pdf_longest_side")
        if size is not None:
            t.set("data.pdf_longest_side", size)
        length = one_value(t, keys, "target_anchor_text_len", "length", "takes one data.pdf_pages.anchor_text_len", -1)
        if length is not None:
            t.set("data.pdf_pages.anchor_text_len", length)
            t.set("data.pdf_pages.prompt", "plain")  # olmOCR's build_finetuning_prompt: the page's text, anchored
        translate_requests(t, keys, source)
        if source["path"] is None:
            t.refuse(keys.key("response_glob_path"), "required key is missing")
        else:
            sources.append(source)
        keys.done()
    t.set(f"data.{split}", {"sources": sources})
    if data.has("cache_location"):
        t.set("data.cache_dir", data.take("cache_location"))
    data.take("cache_location")
    seed = data.number("seed", int)
    if seed is not None and hparams_seed is None:
        t.set("trainer.seed", seed)
    elif seed is not None and seed != hparams_seed:
        t.refuse(data.key("seed"), f"{seed!r} differs from hparams.seed ({hparams_seed!r}): honing has one seed")
    metric = data.take("metric_for_best_model")
    if metric is not None:
        set_best_metric(t, data.key("metric_for_best_model"), str(metric))
    data.done()


def one_value(t: Translation, keys: Keys, name: str, what: str, why: str, minimum: int = 1) -> int | None:
    """A source's ``what`` (a number or olmOCR's list of them, one drawn per example) as one number; several
    different values are refused: honing ``why``."""
    values = keys.take(name)
    if values is None:
        return None
    values = values if isinstance(values, list) else [values]
    if not values or not all(isinstance(v, int) and not isinstance(v, bool) and v >= minimum for v in values):
        t.refuse(keys.key(name), f"{values!r}: expected a whole number >= {minimum}, or a list of them")
        return None
    if len(set(values)) > 1:
        t.refuse(keys.key(name), f"{values}: olmOCR picks one {what} per example at random; honing {why}")
        return None
    return int(values[0])


def translate_requests(t: Translation, keys: Keys, source: dict[str, Any]) -> None:
    """The older sources' keys: the batch requests (prompt and image as sent), the backend and a size limit."""
    if keys.has("query_glob_path"):
        queries = t.get("data.pdf_pages.queries", [])
        t.set("data.pdf_pages.queries", [*queries, str(keys.take("query_glob_path"))])
        t.set("data.pdf_pages.prompt_first", False)  # olmOCR's requests hold the image, then the text
    keys.take("query_glob_path")
    backends = keys.names("backend")
    if backends is not None and backends != ["openai"]:
        t.refuse(keys.key("backend"), f"{backends}: honing reads OpenAI batch responses only ('openai')")
    size = keys.number("size", int)
    if size is not None:
        source["max_samples"] = size
        t.note(keys.key("size"), "the source's first N responses (max_samples)")


def set_best_metric(t: Translation, key: str, metric: str) -> None:
    """An HF metric name (``eval_loss``, ``<source name>_loss`` of one validation set) as honing's, with the best
    model loaded at the end as olmOCR's ``load_best_model_at_end`` does."""
    name = metric.removeprefix("eval_")
    if name == "loss":
        honing_name = "eval/loss"
    elif name.endswith("_loss"):
        honing_name = f"eval/{name.removesuffix('_loss')}/loss"  # per-source validation loss
    else:
        honing_name = f"eval/{name}"
    t.set("callbacks.evaluator.metric_for_best_model", honing_name)
    if schema_has("callbacks.evaluator.load_best_model_at_end"):
        t.set("callbacks.evaluator.load_best_model_at_end", True)
    else:
        t.note(key, "the best checkpoint is kept and exported to best/ (hf/ stays the last step's)")


def translate_save(t: Translation, save: Keys, *, eval_every: Any) -> None:
    """``save.*``: checkpoints every N steps, copied to ``save.path`` (local or ``s3://``)."""
    if save.has("path"):
        t.set("callbacks.upload.save_path", str(save.take("path")))
    save.take("path")
    interval = save.take("save_every_steps", eval_every)
    if isinstance(interval, str) and "eval_every_steps" in interval:
        interval = eval_every  # olmOCR's default is the interpolation "${hparams.eval_every_steps}"
    interval = read_number(t, save.key("save_every_steps"), interval, int)
    if interval is not None:
        t.set("callbacks.checkpointer.save_interval", interval)
    save.copy("limit", "callbacks.checkpointer.keep_last", int)
    save.done()


def translate_generate(t: Translation, generate: Keys) -> None:
    """``generate.max_length``: the longest training row; the sampling keys serve olmOCR's inference only."""
    generate.copy("max_length", "data.seq_len", int)
    for name in ("temperature", "top_k", "top_p", "num_beams", "truncate_prompt_tokens", "max_num_seqs"):
        generate.refuse(name, "not used in training (olmOCR's inference pipeline reads it)")
    generate.done()


def translate_wandb(t: Translation, top: Keys) -> None:
    """``wandb.*``: W&B logging (the key is a secret: never saved or printed)."""
    if not top.has("wandb"):
        top.take("wandb")
        return
    wandb = t.section(top.take("wandb"), "wandb")
    t.set("callbacks.wandb.enabled", True)
    wandb.copy("project", "callbacks.wandb.project")
    wandb.copy("entity", "callbacks.wandb.entity")
    wandb.copy("wandb_api_key", "callbacks.wandb.api_key")
    wandb.copy("api_key", "callbacks.wandb.api_key")
    wandb.copy("mode", "callbacks.wandb.mode")
    wandb.allow("watch", ("false", False), "is not available: honing logs gradient norms, not weight histograms")
    wandb.done()


def translate_aws(t: Translation, aws: Keys) -> None:
    """``aws.*``: S3 keys and region (secrets: redacted from the saved config and every printout)."""
    aws.copy("access_key_id", "storage.aws_access_key_id")
    aws.copy("secret_access_key", "storage.aws_secret_access_key")
    aws.copy("default_region", "storage.region")
    aws.refuse(
        "profile",
        "not available: honing reads keys, not profiles; set AWS_PROFILE in the environment "
        "(boto reads it) or give aws.access_key_id / secret_access_key",
    )
    aws.done()
