"""The run config: one typed model per section, validated by pydantic.

Pydantic rather than dataclasses: it gives type coercion from YAML, error locations as
key paths, and a JSON schema for editors, which we would otherwise write by hand.

``method`` selects which keys are used: ``honing.config.methods`` holds the per-method table
(and how to add a method), and ``RunConfig`` refuses every key the user set that its method
does not read.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from honing.config.callbacks_schema import CallbacksSection
from honing.config.custom_recipe import resolve_recipe_keys
from honing.config.evaluation import ModelCardSection
from honing.config.methods import METHODS, methods_json, refusals
from honing.config.optimizers import optimizer_key_refusals, resolve_optimizer
from honing.config.section import Section

# Mirrors honing.train.duration's parser (config may not import it): "200steps", "2epochs",
# "5e6tokens", "1chinchilla" (20 tokens per parameter, times the number given).
DURATION_PATTERN = r"^\s*\d+(\.\d+)?([eE]\d+)?\s*(steps?|epochs?|tokens?|chinchilla)\s*$"


class StepRange(Section):
    """Steps ``start <= step < stop`` whose batches are consumed but not trained on."""

    start: int = Field(ge=1)
    stop: int = Field(ge=1)


class TrainerSection(Section):
    """Where the run writes, how long it trains, and how it resumes."""

    save_folder: str = "runs/honing"
    load_path: str | None = None
    load_strategy: Literal["if_available", "always", "never"] = "if_available"
    max_duration: str = "100steps"
    hard_stop: str | None = None
    seed: int = 0
    precision: Literal["fp32", "bf16-mixed", "bf16"] = "fp32"
    device: Literal["auto", "cpu", "cuda"] = "auto"
    num_threads: int | None = Field(default=None, ge=1)
    metrics_collect_interval: int = Field(default=10, ge=1)
    # SIGTERM / Ctrl-C is exchanged between ranks asynchronously every N steps: at 1, one more step at most
    cancel_check_interval: int = Field(default=1, ge=1)
    steps_to_skip: list[StepRange] = Field(default_factory=list)
    save_overwrite: bool = False
    # warm start: load_path's weights without its step and data position (false) or its optimizer (false)
    load_trainer_state: bool = True
    load_optim_state: bool | None = None  # None: the optimizer is loaded when the trainer state is
    # bf16 asked for on a CPU that only emulates it (~10x slower): warn with the measured factor, or train in fp32
    emulated_bf16: Literal["warn", "fp32"] = "warn"
    nonfinite_loss: Literal["stop", "skip"] = "stop"  # a NaN / inf loss stops the run, or its step is skipped

    @field_validator("max_duration", "hard_stop")
    @classmethod
    def _is_duration(cls, value: str | None) -> str | None:
        if value is not None and not re.match(DURATION_PATTERN, str(value)):
            raise ValueError(
                f"expected a duration like '200steps', '2epochs', '5e6tokens' or '1chinchilla', got {value!r}"
            )
        return value


class SourceSection(Section):
    """One data source: a file, folder, glob, saved or hub ``datasets`` name (local or any fsspec URL),
    or ``generated:TASK`` for a task the project generates (see ``honing.data.generated.tasks``)."""

    path: str
    # pretraining reads text / jsonl; fine-tuning reads conversation / alpaca / sharegpt /
    # prompt_completion / text (others are refused per method); auto detects from the file name or the first row.
    format: Literal[
        "auto",
        "text",
        "jsonl",
        "conversation",
        "alpaca",
        "sharegpt",
        "prompt_completion",
        "prompt",
        # preference pairs (DPO): honing.data.preference.pairs
        "preference",
        "preference_prompt",
        "preference_sharegpt",
        "preference_transcript",
        # image conversations with <image> placeholders (LLaMA-Factory's files; vl_sft)
        "mllm",
        # a folder written by `honing prepare` (pretraining): memory-mapped token shards
        "tokens",
    ] = "auto"
    weight: float = 1.0
    text_field: str = "text"
    max_samples: int | None = Field(default=None, ge=1)
    # a validation source's name in its own metrics (eval/<name>/loss) when there are several validation sources;
    # default: its file's stem
    name: str | None = Field(default=None, pattern=r"^[\w.-]+$")


class SplitSection(Section):
    """A set of sources for one split (train or validation)."""

    sources: list[SourceSection] = Field(min_length=1)


class DataSection(Section):
    """What the model reads and how it is batched."""

    train: SplitSection
    validation: SplitSection | None = None
    validation_split: float = Field(default=0.0, ge=0.0, lt=1.0)
    seq_len: int = Field(default=256, ge=2)
    global_batch_size: int = Field(default=16, ge=1)
    micro_batch_size: int | None = Field(default=None, ge=1)
    shuffle: bool = True
    cache_dir: str | None = None
    # pretraining only: position_ids restart at each document, so no token attends across documents
    document_masking: bool = False
    # pretraining only: what splits a text file into documents, e.g. "\n\n" (a blank line); None: each file is one.
    # `honing prepare` and training from raw text split the same way (honing.data.text.pieces)
    text_document_separator: str | None = Field(default=None, min_length=1)
    # worker processes that read and collate whole batches ahead of training (0: in the training process); the
    # batches, their order and a resume's position are the same for any number
    num_workers: int = Field(default=0, ge=0)
    # fine-tuning only (refused for pretraining: honing.config.methods.FINETUNE_ONLY)
    chat_template: str | None = None
    train_on: Literal["assistant", "all"] = "assistant"
    packing: bool = True
    group_by_length: bool = True
    overlong: Literal["truncate", "drop"] = "truncate"
    # fine-tuning: tokenized rows are prepared once into cache_dir (worker processes, one rank per node) and read
    # from there by every rank and every later run with the same inputs; false: each rank tokenizes in memory
    cache_rows: bool = True
    # vision-language SFT: the image processor's resize bounds (Qwen-VL's names); None: the processor's own
    min_pixels: int | None = Field(default=None, ge=1)
    max_pixels: int | None = Field(default=None, ge=1)
    # PDF pages render with this longest side in pixels (olmOCR renders 1024-1288); None: 72 dpi, a pixel a point
    pdf_longest_side: int | None = Field(default=None, ge=1)
    bad_rows: Literal["fail", "skip"] = "fail"

    @model_validator(mode="after")
    def _micro_divides_global(self) -> DataSection:
        if self.micro_batch_size is not None and self.global_batch_size % self.micro_batch_size:
            raise ValueError(
                f"data.micro_batch_size ({self.micro_batch_size}) must divide "
                f"data.global_batch_size ({self.global_batch_size})"
            )
        return self


class TokenizerSection(Section):
    """Which tokenizer: byte-level, character, BPE trained here, or a pretrained one
    (``auto``: the model's own when ``model.name_or_path`` is set, else byte-level)."""

    kind: Literal["auto", "byte", "char", "bpe", "pretrained"] = "auto"
    vocab_size: int = Field(default=4096, ge=300)
    path: str | None = None
    trust_remote_code: bool = False

    @model_validator(mode="after")
    def _pretrained_needs_path(self) -> TokenizerSection:
        if self.kind == "pretrained" and not self.path:
            raise ValueError("tokenizer.path is required when tokenizer.kind is 'pretrained'")
        return self


class LoraSection(Section):
    """LoRA adapters through peft (absent or null: full fine-tuning)."""

    rank: int = Field(default=8, ge=1)
    alpha: float = Field(default=16, gt=0)
    dropout: float = Field(default=0.0, ge=0, lt=1)
    bias: Literal["none", "all", "lora_only"] = "none"
    target_modules: str | list[str] = "all-linear"
    task_type: str = "CAUSAL_LM"
    modules_to_save: list[str] | None = None


class ModelSection(Section):
    """A Hugging Face model by name or folder, or one built from a transformers config."""

    name_or_path: str | None = None
    config: dict[str, Any] | None = None
    # auto: sdpa, or on CUDA with packed rows a varlen kernel (flash attention if installed, else flex_attention)
    attn_implementation: str | None = "auto"
    trust_remote_code: bool = False
    dtype: Literal["float32", "bfloat16", "float16"] | None = None  # None: from trainer.precision
    lora: LoraSection | None = None
    freeze_layers: list[str] = Field(default_factory=list)  # module names (vision_encoder: the vision tower) or globs
    # the LM head and its loss over chunks of the positions that carry one, so the full logits never exist (exact)
    chunked_loss: bool = True
    # mixture-of-experts models: the weight of the router's load-balancing loss (None: the model config's own)
    router_aux_loss_coef: float | None = Field(default=None, ge=0)
    # vision-language SFT: the vision tower is frozen by default (olmOCR); the projector trains unless frozen
    freeze_vision: bool = True
    freeze_projector: bool = False
    # QLoRA: the base's linear weights held quantized (torchao NF4 with double quantization, or int8 weight-only),
    # LoRA adapters trained on them in the compute dtype; exports are de-quantized and merged
    quantize: Literal["nf4", "int8"] | None = None

    @model_validator(mode="after")
    def _one_source(self) -> ModelSection:
        if (self.name_or_path is None) == (self.config is None):
            raise ValueError("give exactly one of model.name_or_path and model.config")
        return self


class ParamGroupSection(Section):
    """Parameters matching ``params`` (name patterns) trained with their own LR / weight decay."""

    params: str | list[str]
    lr: float | None = Field(default=None, gt=0)
    weight_decay: float | None = Field(default=None, ge=0)


class OptimSection(Section):
    """The optimizer (``name``: adamw, sgd, adafactor, muon, or a Hugging Face alias such as adamw_torch_fused);
    weight decay skips biases, norms and embeddings. Keys the chosen optimizer does not read are refused."""

    name: str = "adamw"  # honing.config.optimizers: the names, aliases and which keys each reads
    momentum: float | None = Field(default=None, ge=0)  # sgd (None: 0.9) and muon (None: 0.95)
    lr: float = Field(default=3e-4, gt=0)
    weight_decay: float = Field(default=0.1, ge=0)
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = Field(default=1e-8, gt=0)
    grad_clip: float | None = Field(default=1.0, gt=0)
    fused: bool | None = None
    param_groups: list[ParamGroupSection] = Field(default_factory=list)
    vision_lr: float | None = Field(default=None, gt=0)  # vision-language SFT: the vision tower's own LR
    # int8: AdamW's two moments held in 8 bits (torchao's AdamW8bit, blockwise scales); None: the parameters' dtype
    state_dtype: Literal["int8"] | None = None
    bf16_stochastic_round: bool = False  # state_dtype int8 with bf16 weights: round updates stochastically

    @model_validator(mode="after")
    def _rounding_needs_int8(self) -> OptimSection:
        if self.bf16_stochastic_round and self.state_dtype != "int8":
            raise ValueError(
                "optim.bf16_stochastic_round: used only with optim.state_dtype: int8 (torchao's AdamW8bit); "
                "set optim.state_dtype: int8 or remove it"
            )
        return self

    @field_validator("name")
    @classmethod
    def _known_optimizer(cls, value: str) -> str:
        resolve_optimizer(value)  # its ValueError names the choices
        return value


class SchedulerSection(Section):
    """Learning-rate schedule with linear warmup."""

    name: Literal["constant", "linear", "cosine", "wsd"] = "cosine"
    warmup_steps: int = Field(default=0, ge=0)
    warmup_ratio: float | None = Field(default=None, ge=0, lt=1)  # warmup steps = ratio x total steps
    min_lr_ratio: float = Field(default=0.1, ge=0, le=1)
    decay_fraction: float = Field(default=0.2, gt=0, le=1)

    @model_validator(mode="after")
    def _one_warmup(self) -> SchedulerSection:
        if self.warmup_ratio is not None and "warmup_steps" in self.model_fields_set:
            raise ValueError("give scheduler.warmup_steps or scheduler.warmup_ratio, not both")
        return self


class ParallelSection(Section):
    """How several processes share the training (``torchrun`` or ``honing train --nproc N``)."""

    strategy: Literal["auto", "ddp", "fsdp", "none"] = "auto"  # auto: fsdp with several processes
    # One device mesh (honing.parallel_dims): dp_replicate × dp_shard × ep × cp × tp = the number of processes.
    dp_replicate: int = Field(default=1, ge=1)  # whole copies (DDP; with dp_shard > 1, HSDP's replicas)
    dp_shard: int = Field(default=-1, ge=-1)  # FSDP2 shards; -1: whatever the other dimensions leave
    tp: int = Field(default=1, ge=1)  # tensor parallelism from the model family's own plan
    cp: int = Field(default=1, ge=1)  # sequence (context) parallelism, Ulysses all-to-all attention
    ep: int = Field(default=1, ge=1)  # experts of MoE models sharded over ranks
    reshard_after_forward: bool = True  # FSDP2: free gathered weights after forward (less memory, more traffic)
    activation_checkpointing: Literal["none", "full", "every_n"] = "none"
    activation_checkpointing_every: int = Field(default=2, ge=1)  # every_n: the N-th, 2N-th, ... block
    compile: bool = False  # torch.compile each block
    mixed_precision: Literal["auto", "none", "bf16"] = "auto"  # auto: bf16 FSDP2 params for bf16-mixed on CUDA
    timeout_seconds: float = Field(default=600, gt=0)  # a collective waiting longer fails the run
    # CUDA only: optimizer: AdamW's states and update on the host (honing.optim.host_offload); params: FSDP2's
    # CPUOffloadPolicy, weights, gradients and optimizer on the host (pinned), gathered to the GPU per block
    offload: Literal["none", "optimizer", "params"] = "none"
    activation_offload: bool = False  # CUDA only: activations saved for backward wait in pinned host memory


class StorageSection(Section):
    """Remote storage for ``s3://`` paths (save folder, load path, data, uploads). Unset values come from
    ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY`` and ``AWS_DEFAULT_REGION``;
    the keys are redacted from the saved config and never logged."""

    endpoint_url: str | None = None  # an S3-compatible server (MinIO, R2, moto ...)
    aws_access_key_id: str | None = None
    aws_secret_access_key: str | None = None
    region: str | None = None
    work_folder: str | None = None  # local copies of a remote save folder; None: $HONING_CACHE_DIR/work
    retry_initial_seconds: float = Field(default=1.0, gt=0)  # upload retries back off from here ...
    retry_max_seconds: float = Field(default=60.0, gt=0)  # ... doubling up to here
    upload_wait_seconds: float = Field(default=600.0, ge=0)  # the end of training waits this long for uploads


class GRPORewardSection(Section):
    """One reward: a built-in name (``honing.rl.builtin_rewards``) or ``package.module:function``, and its weight."""

    name: str
    weight: float = 1.0


class GRPOSection(Section):
    """GRPO (``method: grpo``): G completions per prompt, scored by the rewards, trained on with TRL's
    group-relative clipped policy-gradient loss. Defaults are TRL's GRPOConfig's."""

    num_generations: int = Field(default=8, ge=2)  # G completions per prompt (a group)
    max_completion_length: int = Field(default=256, ge=1)
    temperature: float = Field(default=1.0, gt=0)
    top_p: float = Field(default=1.0, gt=0, le=1)
    top_k: int = Field(default=0, ge=0)  # 0: no top-k filtering
    beta: float = Field(default=0.0, ge=0)  # KL weight; 0: no reference model
    epsilon: float = Field(default=0.2, ge=0)
    epsilon_high: float | None = Field(default=None, ge=0)  # None: epsilon
    loss_type: Literal["grpo", "bnpo", "dr_grpo", "dapo"] = "dapo"
    scale_rewards: Literal["group", "batch", "none"] = "group"
    num_iterations: int = Field(default=1, ge=1)  # optimizer steps per rollout batch
    rewards: list[GRPORewardSection] = Field(default_factory=list)  # at least one (checked by the recipe)
    sample_interval: int | None = Field(default=10, ge=1)  # completions to samples.jsonl / W&B every N steps


class DPOSection(Section):
    """DPO (``method: dpo``): preference pairs trained with TRL's DPO losses against a frozen reference
    (``copy``: a frozen copy; ``adapters_off``: the LoRA model with its adapters disabled; ``precompute``: the
    reference's log-probs computed once before training and cached on disk). Defaults are TRL's DPOConfig's."""

    loss_type: Literal["sigmoid", "hinge", "ipo", "robust", "apo_zero"] = "sigmoid"
    beta: float = Field(default=0.1, gt=0)
    label_smoothing: float = Field(default=0.0, ge=0, lt=0.5)  # robust only: the share of flipped labels
    reference: Literal["copy", "adapters_off", "precompute"] = "copy"
    rpo_alpha: float | None = Field(default=None, ge=0)  # + rpo_alpha x the chosen completions' NLL (RPO)
    # a micro-batch's pairs in one row without padding, attended pair by pair (sdpa / eager attention; not
    # under parallel.compile); false: one right-padded row per pair under a dense 4D mask
    packed_pairs: bool = True

    @model_validator(mode="after")
    def _smoothing_is_robust(self) -> DPOSection:
        if self.label_smoothing and self.loss_type != "robust":
            raise ValueError(
                f"dpo.label_smoothing is used by loss_type 'robust' only (TRL's {self.loss_type!r} ignores it); "
                "set dpo.loss_type: robust or remove it"
            )
        return self


MethodName = Literal[tuple(METHODS)]  # type: ignore[valid-type]  # one entry per method in the table


class RunConfig(Section):
    """The whole run: what to train, on what data, for how long, and what to record."""

    model_config = ConfigDict(json_schema_extra={"x-honing-methods": methods_json()})

    method: MethodName = "pretrain"  # selects the recipe, and which keys are used (honing.config.methods)
    # your own recipe class, a subclass of the method's (honing.config.custom_recipe); ``method: pkg:Class`` too
    recipe: str | None = None
    run_name: str | None = None
    trainer: TrainerSection = Field(default_factory=TrainerSection)
    data: DataSection
    tokenizer: TokenizerSection = Field(default_factory=TokenizerSection)
    model: ModelSection
    optim: OptimSection = Field(default_factory=OptimSection)
    scheduler: SchedulerSection = Field(default_factory=SchedulerSection)
    callbacks: CallbacksSection = Field(default_factory=CallbacksSection)
    parallel: ParallelSection = Field(default_factory=ParallelSection)
    storage: StorageSection = Field(default_factory=StorageSection)
    grpo: GRPOSection | None = None  # method: grpo only
    dpo: DPOSection | None = None  # method: dpo only (absent: the defaults)
    model_card: ModelCardSection = Field(default_factory=ModelCardSection)  # README.md of every export

    @model_validator(mode="before")
    @classmethod
    def _recipe_class(cls, raw: Any) -> Any:
        return resolve_recipe_keys(raw)

    @model_validator(mode="after")
    def _keys_used_by_method(self) -> RunConfig:
        lines = refusals(self, self.method) + optimizer_key_refusals(self.optim)
        if lines:
            raise ValueError("; ".join(lines))
        return self
