"""Oumi's ``model`` section as honing's model, tokenizer, dtype, attention and chat-template keys."""

from __future__ import annotations

from honing.config.model_schema import LOAD_KWARGS_REFUSED
from honing.interop.configs.hf_args import set_precision
from honing.interop.configs.machine_options import set_attention
from honing.interop.configs.translation import Keys, Translation

# AutoConfig.from_pretrained's own arguments among model_kwargs (where the config is read), not config fields
HUB_ARGUMENTS = ("revision", "subfolder", "cache_dir", "local_files_only", "force_download")
# Oumi's chat template names (read lowercased, as Oumi finds its template files) -> honing's named templates
CHAT_TEMPLATES = {
    "llama3-instruct": "llama3",
    "chat_ml": "chatml",
    "chatml": "chatml",
    "zephyr": "zephyr",
    "default": "plain_roles",
    "default_gen": "plain_roles",
    "gpt2": "eos_separated",
}
OUMI_DTYPE_ALIASES = {"f32": "float32", "f16": "float16"}
# Oumi's templates for one model family -> words of that family's model names: for a model of the family the
# tokenizer carries the family's template as its own (Oumi ships no file for qwen2-instruct at all)
FAMILY_TEMPLATES: dict[str, tuple[str, ...]] = {
    "qwen2-instruct": ("qwen",),
    "phi3-instruct": ("phi-3", "phi3"),
    "gemma2-it": ("gemma",),
    "llava": ("llava",),
    "molmo": ("molmo",),
    "internvl3": ("internvl",),
    "qwen2-vl-instruct": ("qwen2-vl", "qwen2.5-vl"),
    "qwen3-vl-instruct": ("qwen3-vl",),
}

PAD_TOKEN_NOTE = (
    "honing masks padding by position, not by token id, so the pad token changes no loss and the end-of-sequence "
    "token stays trained (the reason to set one); padding uses the tokenizer's pad token, or its eos"
)
PADDING_SIDE_NOTE = (
    "honing pads as each use needs (training rows on the right, generation prompts on the left); the side changes no "
    "loss, as padding is masked"
)
LIGER_NOTE = (
    "liger's fused linear cross-entropy: honing's chunked loss (model.chunked_loss, on by default) never holds the "
    "full logits either; liger's fused norm / RoPE / SwiGLU kernels are not used (the same numbers up to rounding)"
)
# model_revision values that name a training method rather than a snapshot
REVISION_METHODS = {
    "prequantized": "Falcon-E's BitNet (ternary 1.58-bit) fine-tuning through onebitllms, which replaces every "
    "linear layer; honing has no BitNet layers",
}


def translate_model(t: Translation, model: Keys, method: str) -> None:
    """``model.*``: the model, its tokenizer, dtype, attention, template and frozen layers."""
    model.copy("model_name", "model.name_or_path")
    if model.has("tokenizer_name") and model.peek("tokenizer_name") != model.peek("model_name"):
        t.set("tokenizer.kind", "pretrained")
        model.copy("tokenizer_name", "tokenizer.path")
    model.take("tokenizer_name")
    model.copy("model_max_length", "data.seq_len", int)
    model.copy("trust_remote_code", "model.trust_remote_code", bool)
    dtype = model.take("torch_dtype_str")
    if dtype is None or str(dtype).lower() == "auto":
        t.note(
            model.key("torch_dtype_str"),
            f"{dtype or 'unset'}: Oumi holds the checkpoint's own dtype; honing holds trainer.precision's "
            "(float32 here; set trainer.precision: bf16 for a bfloat16 checkpoint)",
        )
    else:  # Oumi's get_torch_dtype also reads the short names f32 / f16
        set_precision(t, model.key("torch_dtype_str"), OUMI_DTYPE_ALIASES.get(str(dtype).lower(), dtype))
    attention = model.take("attn_implementation")
    if attention is not None:
        set_attention(t, model.key("attn_implementation"), str(attention))
    model.copy("compile", "parallel.compile", bool)
    if model.peek("freeze_layers"):  # Oumi warns about a name the model lacks and freezes the others
        t.default("model.freeze_missing", "skip", "Oumi's freeze_model_layers (a missing name is a warning)")
    model.copy("freeze_layers", "model.freeze_layers", list)
    translate_chat_template(t, model, method)
    if model.take("load_pretrained_weights") is False:  # the named model's architecture with random weights
        t.set("model.pretrained_weights", False)
    if model.take("enable_liger_kernel"):
        t.note(model.key("enable_liger_kernel"), LIGER_NOTE)
    model.allow("device_map", ("auto",), "is not available: honing places the model itself (parallel.*)")
    model.note("tokenizer_pad_token", PAD_TOKEN_NOTE)
    translate_kwargs(t, model, method)
    model.refuse("adapter_model", "not available: load a merged model (honing merge) or give model.lora")
    revision = model.take("model_revision")
    if str(revision) in REVISION_METHODS:
        t.refuse(model.key("model_revision"), f"{revision!r}: {REVISION_METHODS[str(revision)]}")
    elif revision is not None:  # Oumi loads the model (and its tokenizer) at this revision of the hub repository
        t.set("model.load_kwargs.revision", str(revision))
        t.note(model.key("model_revision"), "the model's weights and config at that revision; the tokenizer at the "
               "repository's default one")  # fmt: skip
    model.note("chat_template_kwargs", "unused by Oumi's training, as here (Oumi's vLLM inference reads it)")
    model.note("shard_for_eval", "not needed: honing evaluates the model as it trains it (sharded alike)")
    model.note("tool_call_parser", "not needed for training: it parses tool calls at inference")
    model.done()


def translate_chat_template(t: Translation, model: Keys, method: str) -> None:
    """``model.chat_template``: honing's named template, the tokenizer's own (``auto``, or a family's template for
    a model of that family), or for images the processor's own; unset, Oumi's rule: a gpt2 model's template, else
    the tokenizer's own, else ``plain_roles`` (``data.chat_template_fallback``)."""
    key = model.key("chat_template")
    template = model.take("chat_template")
    name = str(model.peek("model_name", "")).lower()
    text_chat = method != "pretrain" and not method.startswith("vl_")
    if template is None and text_chat:  # Oumi's build_tokenizer: its model-type template, else the tokenizer's own
        if "gpt2" in name:  # Oumi's internal config for model_type gpt2 names its gpt2 template
            t.set("data.chat_template", "eos_separated")
            t.note(key, "unset: Oumi renders gpt2 models with its gpt2 template (honing's eos_separated)")
        else:  # ... and its 'default' for a tokenizer without one
            t.default("data.chat_template_fallback", "plain_roles", "Oumi's build_tokenizer, whose 'default' it is")
        return
    if template is None or template == "auto":
        return  # the tokenizer's own: honing's default
    if not isinstance(template, str):
        t.refuse(key, f"{template!r}: expected a template name")
        return
    if method == "pretrain":
        t.note(key, f"{template!r}: unused, pretraining reads documents, not conversations")
    elif method in ("vl_sft", "vl_grpo", "vl_dpo"):
        # a named text template cannot place images: the processor renders image conversations
        t.note(key, f"{template!r}: image conversations use the processor's own template")
    elif template.lower() in CHAT_TEMPLATES:
        t.set("data.chat_template", CHAT_TEMPLATES[template.lower()])
    elif any(word in name for word in FAMILY_TEMPLATES.get(template, ())):
        t.note(key, f"{template!r}: the tokenizer's own template (the {template} family's, which the model carries)")
    else:
        choices = ", ".join([*CHAT_TEMPLATES, "auto"])
        t.refuse(
            key,
            f"{template!r} is not available for this model; expected one of: {choices}, a family template for a model "
            "of that family, or the template's Jinja text as data.chat_template",
        )


# from_pretrained's quantization switches are no config fields: Oumi's AutoConfig.from_pretrained(**model_kwargs,
# return_unused_kwargs=True) returns them unused (Oumi logs "Unused kwargs") and loads the model unquantized
_UNQUANTIZED = "unused, as in Oumi (its AutoConfig call leaves it out and the model loads unquantized); for QLoRA set "
UNUSED_BY_AUTOCONFIG = {
    "load_in_4bit": _UNQUANTIZED + "peft.q_lora (honing's model.quantize: nf4)",
    "load_in_8bit": _UNQUANTIZED + "model.quantize: int8",
}


def translate_kwargs(t: Translation, model: Keys, method: str) -> None:
    """``tokenizer_kwargs`` / ``processor_kwargs`` / ``model_kwargs``: the ones honing has a key or a reason for."""
    tokenizer_kwargs = t.section(model.take("tokenizer_kwargs"), model.key("tokenizer_kwargs"))
    translate_tokenizer_kwargs(tokenizer_kwargs)
    processor_kwargs = t.section(model.take("processor_kwargs"), model.key("processor_kwargs"))
    translate_pixels(t, processor_kwargs, method)
    processor_kwargs.done("honing passes no extra keyword arguments to the processor")
    model_kwargs = t.section(model.take("model_kwargs"), model.key("model_kwargs"))
    quantization = model_kwargs.peek("quantization_config")
    if isinstance(quantization, dict) and set(quantization) == {"quant_method"} and quantization["quant_method"]:
        model_kwargs.note(
            "quantization_config",
            f"{quantization['quant_method']!r}: the checkpoint's own quantization, which its config.json names and "
            "transformers applies on loading (de-quantized where its kernels cannot run)",
        )
    model_kwargs.copy("disable_dropout", "model.disable_dropout", bool)
    translate_model_kwargs(t, model_kwargs)
    model_kwargs.done("honing sets it from a key of its own")


def translate_tokenizer_kwargs(kwargs: Keys) -> None:
    """``tokenizer_kwargs``, which Oumi hands to ``AutoTokenizer.from_pretrained``: the ones that change nothing
    honing trains are notes; a slow tokenizer or a cut from the left, which honing has not, are refused."""
    kwargs.note("pad_token", PAD_TOKEN_NOTE)
    kwargs.note("padding_side", PADDING_SIDE_NOTE)
    for name, allowed, note in (
        ("use_fast", True, "honing loads the fast tokenizer (its assistant-only labels need one)"),
        ("truncation_side", "right", "honing cuts an overlong row at its end (data.overlong: truncate)"),
    ):
        value = kwargs.peek(name)
        if value is None or value == allowed:
            kwargs.note(name, note)
        else:
            kwargs.refuse(name, f"{value!r} is not available: {note}")
    kwargs.note("model_max_length", "the tokenizer's own limit: honing cuts rows at data.seq_len (model_max_length)")
    revision = kwargs.peek("revision")
    if revision is not None:
        kwargs.refuse("revision", f"{revision!r}: honing reads the tokenizer at its default revision")
    kwargs.done("honing passes no extra keyword arguments to the tokenizer")


def translate_model_kwargs(t: Translation, kwargs: Keys) -> None:
    """The rest of ``model_kwargs``, which Oumi hands to ``AutoConfig.from_pretrained``: config fields (YaRN's
    ``rope_scaling``, ``max_position_embeddings``) as ``model.config_overrides`` (checked against the model's config
    when it is loaded), the hub's own arguments as ``model.load_kwargs``; one honing sets itself is refused, naming
    honing's key."""
    for name in [name for name in kwargs.values if name not in kwargs.taken]:
        if name == "quantization_config":  # a checkpoint's own quantization is noted above; others are refused
            continue
        if name in UNUSED_BY_AUTOCONFIG:
            kwargs.note(name, UNUSED_BY_AUTOCONFIG[name])
            continue
        if name in LOAD_KWARGS_REFUSED:
            kwargs.refuse(name, f"not passed through; {LOAD_KWARGS_REFUSED[name]}")
            continue
        path = "model.load_kwargs" if name in HUB_ARGUMENTS else "model.config_overrides"
        t.set(f"{path}.{name}", kwargs.take(name))


def translate_pixels(t: Translation, kwargs: Keys, method: str) -> None:
    """A processor's ``min_pixels`` / ``max_pixels`` (Qwen-VL's resize bounds) as ``data.*`` for images."""
    for name in ("min_pixels", "max_pixels"):
        if not kwargs.has(name):
            continue
        if method in ("vl_sft", "vl_grpo", "vl_dpo"):
            kwargs.copy(name, f"data.{name}", int)
        else:
            kwargs.refuse(name, f"used by image models only, not method {method!r}")
