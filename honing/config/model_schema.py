"""The ``model`` section: which model, in which dtype, what trains (LoRA, frozen modules) and how it is quantized."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from honing.config.section import Section

# from_pretrained arguments honing sets from its own keys -> the key to use instead (never trust_remote_code this way)
LOAD_KWARGS_REFUSED = {
    "trust_remote_code": "set model.trust_remote_code (only for a folder you trust)",
    "code_revision": "remote code is set by model.trust_remote_code alone",
    "pretrained_model_name_or_path": "set model.name_or_path",
    "config": "set model.config_overrides",
    "dtype": "set model.dtype",
    "torch_dtype": "set model.dtype",
    "attn_implementation": "set model.attn_implementation",
    "quantization_config": "set model.quantize",
    "load_in_4bit": "set model.quantize: nf4",
    "load_in_8bit": "set model.quantize: int8",
    "device_map": "honing places the model on trainer.device and shards it by parallel.*",
    "state_dict": "honing reads the weights from model.name_or_path",
    "token": "give the hub token as HF_TOKEN (never in a config)",
    "use_auth_token": "give the hub token as HF_TOKEN (never in a config)",
}


class LoraSection(Section):
    """LoRA adapters through peft (absent or null: full fine-tuning)."""

    rank: int = Field(default=8, ge=1)
    """The rank ``r`` of each adapter's two matrices."""
    alpha: float = Field(default=16, gt=0)
    """The adapters' scale numerator: their update is multiplied by ``alpha / rank``."""
    dropout: float = Field(default=0.0, ge=0, lt=1)
    """Dropout on the adapters' input during training."""
    bias: Literal["none", "all", "lora_only"] = "none"
    """Which biases train: none, all of them, or those of the adapted modules (peft's ``bias``)."""
    target_modules: str | list[str] = "all-linear"
    """The modules that get adapters: names or a regex, or ``all-linear`` (every linear layer but the output head)."""
    missing_targets: Literal["error", "skip"] = "error"
    """A ``target_modules`` name that matches no module of the model: ``error`` (a typo stops the run) or ``skip``
    (peft's rule, which the systems built on peft follow: adapters on the names that match, the others named in one
    line; an error still when none matches). ``honing convert`` writes ``skip`` for their configs."""
    target_parameters: list[str] = Field(default_factory=list)
    """Parameters that get adapters themselves, by full name or its last dotted parts (``7.mlp.experts.down_proj``):
    an MoE's experts held as one tensor, which no module wraps (peft's ``target_parameters``); beside
    ``target_modules``, which may be ``[]``. Empty: none."""
    task_type: str = "CAUSAL_LM"
    """peft's task type of the adapted model."""
    modules_to_save: list[str] | None = None
    """Modules trained in full and saved with the adapter, e.g. ``[lm_head, embed_tokens]``; None: none."""


class ModelSection(Section):
    """A Hugging Face model by name or folder, or one built from a transformers config."""

    name_or_path: str | None = None
    """A Hugging Face model folder or hub name to load (give this or ``config``)."""
    config: dict[str, Any] | None = None
    """A transformers config mapping (``model_type: llama``, ...) for a new model with random weights; its vocabulary
    size and length follow from the tokenizer and ``data.seq_len``."""
    shape: dict[str, Any] | None = None
    """The ``name_or_path`` model's ``config.json`` numbers (``model_type``, ``hidden_size``, ...), so that ``honing
    plan`` and the layout checks work where the hub cannot be reached; where the real config can be read, every
    number given must match it. None: the real config is read."""
    pretrained_weights: bool = True
    """False: the ``name_or_path`` model's architecture (its config read) with random weights, e.g. pretraining a
    known architecture from scratch (Oumi's ``load_pretrained_weights: false``)."""
    disable_dropout: bool | None = None
    """True: every dropout of the model set to 0 (TRL's ``disable_dropout``; Oumi's ``model_kwargs.disable_dropout``);
    LoRA's own dropout stays ``model.lora.dropout``. None: the method's TRL default, true for ``dpo``, ``vl_dpo``,
    ``kto``, ``orpo``, ``cpo``, ``reward`` and ``distill`` (TRL's DPO, KTO, ORPO, CPO, Reward and GKD configs), false
    for the others (shown in the ``model:`` line at the start of a run)."""
    attn_implementation: str | None = "auto"
    """Any transformers attention name (``sdpa``, ``eager``, ``flash_attention_2``, ...) or ``auto``: sdpa, or on CUDA
    with packed rows a varlen kernel (flash attention if installed, else flex_attention)."""
    trust_remote_code: bool = False
    """Run the model folder's own Python code (only for a folder you trust)."""
    config_overrides: dict[str, Any] = Field(default_factory=dict)
    """``name_or_path``'s config with these fields replaced before the model is built, e.g. ``rope_scaling:
    {rope_type: yarn, factor: 4.0, original_max_position_embeddings: 32768}`` or ``max_position_embeddings``; a field
    the config does not have is refused. The export's config carries them."""
    load_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Further keyword arguments of transformers' ``from_pretrained`` (``revision``, ``subfolder``, ``variant``,
    ``use_safetensors``, ...); one that honing sets from a key of its own (``trust_remote_code``, ``dtype``,
    ``attn_implementation``, ``config``, ...) is refused, naming that key."""
    dtype: Literal["float32", "bfloat16", "float16"] | None = None
    """The dtype the weights are held in; None: from ``trainer.precision``."""
    lora: LoraSection | None = None
    """LoRA adapters through peft; None: full fine-tuning."""
    freeze_layers: list[str] = Field(default_factory=list)
    """Module names or globs whose parameters are frozen (``vision_encoder``: the vision tower); a name this model
    lacks is frozen where transformers loads a checkpoint of that name (transformers 4's ``visual`` for Qwen2-VL:
    ``model.visual``), said in an info line, and a name matching nothing is refused, listing the model's modules."""
    freeze_missing: Literal["error", "skip"] = "error"
    """A ``freeze_layers`` entry matching no module: ``error`` (a typo stops the run) or ``skip`` (Oumi's rule: one
    warning naming it, the others frozen). ``honing convert`` writes ``skip`` for Oumi's configs."""
    chunked_loss: bool = True
    """The LM head and its loss run over chunks of the positions that carry one, so the full logits never exist
    (the same numbers)."""
    lean_forward: bool = True
    """The decoder's forward of Llama-shaped models (Llama, Mistral, Qwen2, Qwen3 and the Qwen-VL language models) and
    the Qwen-VL vision towers' attention run as honing's leaner code over the model's own modules: transformers'
    numbers bit for bit, gradients included, in fewer operators; calls it does not cover (a cache, eager or flash
    attention, hooks, sharded weights) run transformers' own. False: transformers' forwards everywhere."""
    router_aux_loss_coef: float | None = Field(default=None, ge=0)
    """Mixture-of-experts models: the weight of the router's load-balancing loss; None: the model config's own."""
    freeze_vision: bool = True
    """Vision-language SFT: keep the vision tower frozen (olmOCR's default)."""
    freeze_projector: bool = False
    """Vision-language SFT: freeze the projector from the vision tower to the language model too."""
    freeze_language: bool = False
    """Vision-language SFT: freeze the language model and its LM head (Qwen-VL's ``tune_mm_llm: false``), so only
    the vision tower and / or the projector train; refused with LoRA (its adapters sit on the language model)."""
    quantize: Literal["nf4", "fp4", "int8"] | None = None
    """QLoRA: the base's linear weights held quantized (torchao NF4 with double quantization; ``fp4``: the same
    blocks and scales with bitsandbytes' FP4 code instead of NormalFloat; or int8 weight-only), LoRA adapters trained
    on them in the compute dtype; exports are de-quantized and merged. None: not quantized."""
    quantize_skip_modules: list[str] = Field(default_factory=list)
    """Linear layers ``quantize`` leaves in full precision, by module name, its last dotted parts (``out_proj``) or a
    module above them (``model.layers.0``): transformers' ``llm_int8_skip_modules``. Empty: every decoder linear."""

    @model_validator(mode="after")
    def _skip_needs_quantize(self) -> ModelSection:
        if self.quantize_skip_modules and self.quantize is None:
            raise ValueError(
                "model.quantize_skip_modules: only with model.quantize (nf4, fp4 or int8); remove it or set one"
            )
        return self

    @model_validator(mode="after")
    def _one_source(self) -> ModelSection:
        if (self.name_or_path is None) == (self.config is None):
            raise ValueError("give exactly one of model.name_or_path and model.config")
        if not self.pretrained_weights and self.name_or_path is None:
            raise ValueError(
                "model.pretrained_weights: false names model.name_or_path's architecture; model.config "
                "already builds random weights"
            )
        if self.shape is not None and self.name_or_path is None:
            raise ValueError("model.shape describes the model.name_or_path model; model.config is its own shape")
        for key in self.load_kwargs:
            if key in LOAD_KWARGS_REFUSED:
                raise ValueError(f"model.load_kwargs.{key}: not passed through; {LOAD_KWARGS_REFUSED[key]}")
        for name in ("config_overrides", "load_kwargs"):
            if getattr(self, name) and self.name_or_path is None:
                raise ValueError(f"model.{name}: read with model.name_or_path; model.config gives a new model's fields")
        if self.load_kwargs and not self.pretrained_weights:
            raise ValueError("model.load_kwargs: read when weights are loaded; model.pretrained_weights is false")
        if self.shape is not None and not isinstance(self.shape.get("model_type"), str):
            raise ValueError("model.shape.model_type: required (the config.json's model_type, e.g. llama, qwen2)")
        return self
