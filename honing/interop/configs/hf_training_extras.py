"""transformers' ``TrainingArguments`` keys read by both TRL's and LLaMA-Factory's translators beside the batch, the
schedule and the outputs (``llamafactory.translate_training`` / ``translate_outputs``): the activation checkpointing
kwargs, accelerate's ``parallelism_config`` (honing's mesh), the compile backend and mode, ``eval_on_start`` and
``optim_args`` (SGD's momentum, as transformers' ``_get_sgd`` reads them)."""

from __future__ import annotations

from collections.abc import Mapping

from honing.config.optimizers import resolve_optimizer
from honing.interop.configs.translation import Keys, Translation

NON_REENTRANT = "not needed: honing's activation checkpointing is always non-reentrant"
# accelerate's ParallelismConfig sizes -> honing's mesh (parallel.*)
MESH = {"dp_replicate_size": "parallel.dp_replicate", "dp_shard_size": "parallel.dp_shard", "tp_size": "parallel.tp",
        "cp_size": "parallel.cp"}  # fmt: skip
# what parallel.compile runs: torch.compile's default backend and mode (honing.models.compile_choice)
COMPILE = {"torch_compile_backend": ("inductor",), "torch_compile_mode": ("default",)}


def translate_training_extras(t: Translation, top: Keys) -> None:
    """The keys above, each to honing's own key, or refused in one line naming the value."""
    for name in ("activation_checkpointing_kwargs", "gradient_checkpointing_kwargs"):  # the second: transformers 5's
        translate_checkpointing_kwargs(t, t.section(top.take(name), name))  # deprecated alias of the first
    translate_parallelism(t, t.section(parallelism_values(top.take("parallelism_config")), "parallelism_config"))
    for name, values in COMPILE.items():
        value = top.allow(name, values, f"is not available: honing compiles with {values[0]!r} (parallel.compile)")
        if value in values:  # transformers: a backend or a mode turns torch_compile on
            t.set("parallel.compile", True)
    if top.take("eval_on_start"):
        t.set("callbacks.evaluator.before_training", True)
    translate_optim_args(t, top)


def translate_optim_args(t: Translation, top: Keys) -> None:
    """``optim_args`` (``"momentum=0.9,nesterov=False"``) as transformers reads it for ``optim`` (run after
    ``translate_training`` set ``optim.name``): SGD's ``momentum`` / ``weight_decay`` as ``optim.*`` (and SGD's own
    momentum 0 filled in, torch's, where honing's default is 0.9); AdamW and Adafactor read none (a note)."""
    text = top.take("optim_args")
    name = str(t.get("optim.name") or "adamw")
    try:
        family = resolve_optimizer(name)[0]
    except ValueError:
        return  # optim is refused already
    values = parse_optim_args(t, text)
    if family not in ("adamw", "muon") and "optim.betas" in t.defaults:
        t.unset("optim.betas")  # the class's Adam betas, filled in for an optimizer that reads none
    if family == "sgd":
        if "momentum" in values:
            t.set("optim.momentum", float(values.pop("momentum")))
        else:  # transformers' SGD: torch's momentum 0 unless optim_args says
            t.default("optim.momentum", 0.0, f"transformers' {name} (torch's SGD: momentum 0)")
        if "weight_decay" in values:
            t.set("optim.weight_decay", float(values.pop("weight_decay")))
        for key, value in values.items():
            if not (key == "dampening" and float(value) == 0 or key == "nesterov" and value.lower() in ("false", "0")):
                t.refuse("optim_args", f"{key}={value}: not available: honing's SGD reads momentum and weight_decay")
    elif values and family in ("adamw", "adafactor"):
        t.note("optim_args", f"not needed: transformers' {name} reads no optim_args (as here)")
    elif values:
        t.refuse("optim_args", f"not available for optim {name!r}: honing reads optim_args for SGD only")


def parse_optim_args(t: Translation, text: object) -> dict[str, str]:
    """transformers' ``"key=value,key=value"`` (spaces dropped, as ``_parse_optim_args``); refused when not so."""
    if text is None or text == "":
        return {}
    pairs = [item.split("=", 1) for item in str(text).replace(" ", "").split(",") if item]
    if not all(len(pair) == 2 for pair in pairs):
        t.refuse("optim_args", f"{text!r}: expected key=value pairs separated by commas")
        return {}
    values = dict(pairs)
    for key, value in values.items():
        if key != "nesterov":
            try:
                float(value)
            except ValueError:
                t.refuse("optim_args", f"{key}={value}: expected a number")
                return {}
    return values


def translate_checkpointing_kwargs(t: Translation, kwargs: Keys) -> None:
    """``activation_checkpointing_enable()``'s kwargs: ``every_n_layers`` (1: every block) and ``offload``."""
    every = kwargs.number("every_n_layers", int)
    if every is not None and every > 1:
        t.set("parallel.activation_checkpointing", "every_n")
        t.set("parallel.activation_checkpointing_every", every)
    elif every is not None and every < 1:
        t.refuse(kwargs.key("every_n_layers"), f"{every}: expected 1 or more (1: every block)")
    if kwargs.take("offload"):
        t.set("parallel.activation_offload", True)
    kwargs.note("use_reentrant", NON_REENTRANT)
    kwargs.done("honing checkpoints whole blocks, non-reentrant (every_n_layers and offload are read)")


def parallelism_values(value: object) -> object:
    """accelerate's ``ParallelismConfig`` as a mapping: the object's fields, or the mapping a YAML file gives."""
    if value is None or isinstance(value, Mapping):
        return value
    fields = getattr(value, "__dataclass_fields__", None)
    return {name: getattr(value, name) for name in fields} if fields else value


def translate_parallelism(t: Translation, sizes: Keys) -> None:
    """accelerate's sizes as honing's mesh; ``sp_size`` > 1 (DeepSpeed's Ulysses) is refused: honing's sequence
    parallelism is context parallelism (``cp_size``)."""
    for name, path in MESH.items():
        size = sizes.number(name, int)
        if size is not None and (size >= 1 or (name == "dp_shard_size" and size == -1)):
            t.set(path, size)
        elif size is not None:
            t.refuse(sizes.key(name), f"{size}: expected a size of 1 or more")
    sizes.allow("cp_backend", ("torch",), "is not available: honing's context parallelism is torch's (FSDP2)")
    if sizes.number("sp_size", int, 1) > 1:
        sizes.translation.refuse(sizes.key("sp_size"), "not available: give cp_size (honing's context parallelism)")
    sizes.note("sp_backend", "unused without sp_size")
    for name in ("tp_handler", "cp_handler", "sp_handler"):
        sizes.note(name, "not needed: honing applies its own tensor- and context-parallel plans (parallel.tp, cp)")
    sizes.done("accelerate's sizes dp_replicate_size, dp_shard_size, tp_size and cp_size are read")
