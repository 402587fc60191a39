"""verl's model, tokenizer, LoRA, optimizer, schedule, checkpoint and seed keys (``actor_rollout_ref.model.*``,
``actor_rollout_ref.actor.optim.*``, ``trainer.resume_*``, ...) as honing's, with verl's own semantics: its optimizer
is ``getattr(optimizer_impl, optimizer)(lr, weight_decay, betas)`` (verl.workers.config.optimizer.build_optimizer)
and its schedule transformers' constant / cosine with warmup from 0 (verl.utils.torch_functional), stepped once per
rollout batch as honing's."""

from __future__ import annotations

from typing import Any

from honing.interop.configs.translation import Translation, read_number

MODEL = "actor_rollout_ref.model"
OPTIM = "actor_rollout_ref.actor.optim"
# verl keys whose value is a mapping: their dotted entries are read back as one value
MAPPING_KEYS = (f"{MODEL}.override_config", f"{OPTIM}.override_optimizer_config")
# verl key -> (honing key, conversion): one value each
SIMPLE: dict[str, tuple[str, Any]] = {
    f"{MODEL}.path": ("model.name_or_path", str),
    f"{MODEL}.trust_remote_code": ("model.trust_remote_code", bool),
    "data.trust_remote_code": ("model.trust_remote_code", bool),  # verl's tokenizer / processor; honing has one flag
    f"{MODEL}.custom_chat_template": ("data.chat_template", str),
    f"{OPTIM}.weight_decay": ("optim.weight_decay", float),
    f"{OPTIM}.clip_grad": ("optim.grad_clip", float),
    "trainer.max_actor_ckpt_to_keep": ("callbacks.checkpointer.keep_last", int),
    "data.seed": ("trainer.seed", int),  # the data order's seed; honing's one seed
    "data.shuffle": ("data.shuffle", bool),
}
TOKENIZER_KEYS = ("data.tokenizer", f"{MODEL}.tokenizer_path")
LORA_KEYS = {f"{MODEL}.lora_rank": "rank", f"{MODEL}.lora_alpha": "alpha", f"{MODEL}.target_modules": "target_modules"}
SCHEDULE_KEYS = tuple(
    f"{OPTIM}.{name}"
    for name in ("lr_scheduler_type", "warmup_style", "min_lr_ratio", "num_cycles", "lr_warmup_steps",
                 "lr_warmup_steps_ratio")
)  # fmt: skip
RESUME_KEYS = ("trainer.resume_mode", "trainer.resume_from_path")
# verl's optimizer classes honing has (torch.optim's): verl passes lr, weight_decay and (Adam*) betas only
OPTIMIZERS = {"adamw": "adamw", "sgd": "sgd"}
OVERRIDE_OPTIMIZER_KEYS = {
    "eps": ("optim.eps", float),
    "betas": ("optim.betas", list),
    "weight_decay": ("optim.weight_decay", float),
    "momentum": ("optim.momentum", float),
}
HANDLED = (*SIMPLE, *TOKENIZER_KEYS, *LORA_KEYS, *SCHEDULE_KEYS, *RESUME_KEYS, *MAPPING_KEYS,
           f"{OPTIM}.optimizer", f"{OPTIM}.betas", "actor_rollout_ref.actor.grad_clip",
           "actor_rollout_ref.actor.freeze_vision_tower")  # fmt: skip


def regroup(flat: dict[str, Any]) -> dict[str, Any]:
    """``flat`` with the dotted entries of a mapping-valued key (``override_config.attention_dropout``) as one
    mapping under that key."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        parent = next((name for name in MAPPING_KEYS if key.startswith(f"{name}.")), None)
        if parent is None:
            out[key] = value
        else:
            out.setdefault(parent, {})[key[len(parent) + 1 :]] = value
    return out


def take_model_optim(flat: dict[str, Any]) -> dict[str, Any]:
    """The keys of ``HANDLED`` that ``flat`` (verl's dotted keys) holds, popped from it."""
    return {key: flat.pop(key) for key in HANDLED if key in flat}


def translate_model_optim(t: Translation, prefix: str, given: dict[str, Any]) -> None:
    """The keys ``take_model_optim`` took, as honing's (after the run's duration is set: verl's warmup ratio)."""
    for key, value in given.items():
        if key in SIMPLE and value is not None:
            path, convert = SIMPLE[key]
            number = convert in (int, float)
            converted = read_number(t, f"{prefix}.{key}", value, convert) if number else convert(value)
            if converted is not None:
                t.set(path, converted)
    for key in TOKENIZER_KEYS:
        if given.get(key):
            t.set("tokenizer.kind", "pretrained")
            t.set("tokenizer.path", str(given[key]))
    override = given.get(f"{MODEL}.override_config")
    if override:
        t.set("model.config_overrides", dict(override))
    if given.get("actor_rollout_ref.actor.freeze_vision_tower") is not None:
        freeze = bool(given["actor_rollout_ref.actor.freeze_vision_tower"])
        if t.get("method") == "vl_grpo":
            t.set("model.freeze_vision", freeze)
        else:
            t.note(f"{prefix}.actor_rollout_ref.actor.freeze_vision_tower", "unused: text prompts, no vision tower")
    translate_lora(t, prefix, given)
    translate_optimizer(t, prefix, given)
    translate_schedule(t, prefix, given)
    translate_resume(t, prefix, given)


def translate_lora(t: Translation, prefix: str, given: dict[str, Any]) -> None:
    """``lora_rank`` > 0: LoRA of that rank, ``lora_alpha`` (verl's 16) on ``target_modules`` (verl's all-linear)."""
    rank = given.get(f"{MODEL}.lora_rank")
    rank = read_number(t, f"{prefix}.{MODEL}.lora_rank", rank, int, 0) if rank is not None else 0
    if not rank:
        for key in (f"{MODEL}.lora_alpha", f"{MODEL}.target_modules"):
            if key in given:
                t.note(f"{prefix}.{key}", "unused: lora_rank is 0 (verl's default: every weight trained)")
        return
    lora: dict[str, Any] = {"rank": rank, "alpha": 16.0, "target_modules": "all-linear", "dropout": 0.0}
    alpha = given.get(f"{MODEL}.lora_alpha")
    if alpha is not None:
        lora["alpha"] = read_number(t, f"{prefix}.{MODEL}.lora_alpha", alpha, float, 16.0)
    if given.get(f"{MODEL}.target_modules"):
        lora["target_modules"] = given[f"{MODEL}.target_modules"]
    t.set("model.lora", lora)


def translate_optimizer(t: Translation, prefix: str, given: dict[str, Any]) -> None:
    """verl's optimizer class (torch.optim's AdamW or SGD), its betas, gradient clipping and extra arguments."""
    name = given.get(f"{OPTIM}.optimizer")
    if name is not None:
        if str(name).lower() not in OPTIMIZERS:
            t.refuse(f"{prefix}.{OPTIM}.optimizer", f"{name!r}: honing builds torch.optim's AdamW or SGD here")
        else:
            t.set("optim.name", OPTIMIZERS[str(name).lower()])
            if OPTIMIZERS[str(name).lower()] == "sgd":
                t.set("optim.momentum", 0.0)  # verl passes no momentum: torch's SGD default 0
    betas = given.get(f"{OPTIM}.betas")
    if betas is not None:
        if not isinstance(betas, (list, tuple)) or len(betas) != 2:
            t.refuse(f"{prefix}.{OPTIM}.betas", f"{betas!r}: expected two numbers, as [0.9, 0.999]")
        else:
            t.set("optim.betas", [float(beta) for beta in betas])
    clip = given.get("actor_rollout_ref.actor.grad_clip")  # verl's deprecated name wins over clip_grad, as in verl
    if clip is not None:
        clip = read_number(t, f"{prefix}.actor_rollout_ref.actor.grad_clip", clip, float)
        if clip is not None:
            t.set("optim.grad_clip", clip)
    extra = given.get(f"{OPTIM}.override_optimizer_config")
    for name, value in (extra or {}).items():
        if name not in OVERRIDE_OPTIMIZER_KEYS:
            t.refuse(
                f"{prefix}.{OPTIM}.override_optimizer_config.{name}",
                f"{value!r}: honing's optimizer takes {', '.join(OVERRIDE_OPTIMIZER_KEYS)} here",
            )
        else:
            path, convert = OVERRIDE_OPTIMIZER_KEYS[name]
            t.set(path, convert(value))


def translate_schedule(t: Translation, prefix: str, given: dict[str, Any]) -> None:
    """verl's schedule: constant or cosine (to ``min_lr_ratio``, ``num_cycles``) after a warmup from 0 of
    ``lr_warmup_steps`` (< 0: int(``lr_warmup_steps_ratio`` x the steps)): transformers' own schedules."""
    if not any(key in given for key in SCHEDULE_KEYS):
        return
    kind = given.get(f"{OPTIM}.warmup_style") or given.get(f"{OPTIM}.lr_scheduler_type") or "constant"
    if kind not in ("constant", "cosine"):
        t.refuse(f"{prefix}.{OPTIM}.lr_scheduler_type", f"{kind!r}: verl's schedules are 'constant' and 'cosine'")
        return
    t.set("scheduler.semantics", "transformers")
    min_lr = float(given.get(f"{OPTIM}.min_lr_ratio") or 0.0)
    cycles = float(given.get(f"{OPTIM}.num_cycles", 0.5))
    if kind == "constant":
        t.set("scheduler.name", "constant_with_warmup")
        for key in (f"{OPTIM}.min_lr_ratio", f"{OPTIM}.num_cycles"):
            if key in given:
                t.note(f"{prefix}.{key}", "unused: verl reads it for lr_scheduler_type cosine only")
    elif min_lr:  # verl: max(m, m + (1 - m) * 0.5 * (1 + cos)), transformers' cosine_with_min_lr
        t.set("scheduler.name", "cosine_with_min_lr")
        t.set("scheduler.kwargs", {"num_cycles": cycles, "min_lr_rate": min_lr})
    else:
        t.set("scheduler.name", "cosine")
        t.set("scheduler.kwargs", {"num_cycles": cycles})
    steps = int(given.get(f"{OPTIM}.lr_warmup_steps", -1) or 0)
    ratio = float(given.get(f"{OPTIM}.lr_warmup_steps_ratio") or 0.0)
    duration = str(t.get("trainer.max_duration", ""))
    if steps >= 0:
        t.set("scheduler.warmup_steps", steps)
    elif ratio and duration.endswith("steps"):
        t.set("scheduler.warmup_steps", int(ratio * int(duration.removesuffix("steps"))))  # verl rounds down
    elif ratio:
        t.set("scheduler.warmup_ratio", ratio)
        t.note(
            f"{prefix}.{OPTIM}.lr_warmup_steps_ratio",
            "scheduler.warmup_ratio: honing rounds ratio x steps up where verl rounds down (at most one step more)",
        )


def translate_resume(t: Translation, prefix: str, given: dict[str, Any]) -> None:
    """``resume_mode``: auto (honing's default: the save folder's newest checkpoint), disable (never), or
    resume_path (``resume_from_path``)."""
    mode = given.get("trainer.resume_mode", "auto")
    path = given.get("trainer.resume_from_path")
    if mode == "disable":
        t.set("trainer.load_strategy", "never")
    elif mode == "resume_path" and path:
        t.set("trainer.load_path", str(path))
        t.set("trainer.load_strategy", "always")
    elif mode == "resume_path":
        t.refuse(f"{prefix}.trainer.resume_mode", "'resume_path' needs trainer.resume_from_path")
    elif mode != "auto":
        t.refuse(f"{prefix}.trainer.resume_mode", f"{mode!r}: verl's modes are auto, disable and resume_path")
    if path and mode != "resume_path":
        t.note(
            f"{prefix}.trainer.resume_from_path", f"unused: verl reads it with resume_mode resume_path, not {mode!r}"
        )
