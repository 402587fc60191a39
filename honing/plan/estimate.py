"""The memory of one training step per rank, as pure arithmetic over a model's shape and the run's settings.

The parts are those that hold memory at the step's peak: weights (quantized or not, a rank's FSDP2 shard), the
gradients of what trains, the optimizer's states, the activations saved for backward at the micro-batch (all of
them, or the block inputs under activation checkpointing), the loss head's logits (a chunk with the chunked loss),
the transients of the moment (a de-quantized weight in QLoRA's forward, the fp32 copies of torchao's 8-bit
update), and the runtime (interpreter and libraries on the host; CUDA context on a GPU). The peak is the larger of
two moments: forward-backward (activations, logits, the first gradients) and the optimizer step (every gradient
and the update's temporaries); the states and weights are alive in both.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

NF4_BYTES_PER_WEIGHT = 0.5 + 1 / 64 + 4 / (64 * 256)  # 4-bit codes, int8 block scales, fp32 factor per 256 scales
INT8_STATE_BYTES = 1 + 4 / 256  # torchao's AdamW8bit: a code per value, an fp32 scale per block of 256
INT8_STATE_MIN_NUMEL = 4096  # smaller tensors keep states in the parameter's dtype (as bitsandbytes)
EIGHT_BIT_EAGER_BYTES = 24  # per value: fp32 and int64 temporaries of torchao's update run eagerly (small tensors)
EIGHT_BIT_COMPILE_MIN_NUMEL = 1 << 22  # honing.optim.low_bit.COMPILE_MIN_NUMEL: from here the update is fused
CHUNK_BYTES = 128 * 2**20  # honing.chunked_ce: the fp32 logits of one chunk
CUDA_CHUNK_BYTES = 1024 * 2**20  # honing.chunked_ce: the same on a GPU
OPTIONAL_PARTS = ("reference model", "generation (rollouts)")  # printed only where the method has them


@dataclass(frozen=True)
class Tensors:
    """Parameter tensors by role, as numel lists (one entry per tensor)."""

    quantizable: list[int] = field(default_factory=list)  # the decoder's linear weights (frozen base under LoRA)
    other: list[int] = field(default_factory=list)  # embeddings, head, norms, biases, vision tower, ...
    lora: list[int] = field(default_factory=list)  # the adapters (LoRA runs)
    lora_copies: list[int] = field(default_factory=list)  # modules_to_save: trainable copies beside the originals


@dataclass(frozen=True)
class PlanInputs:
    """A model's shape and a run's settings: everything the estimate reads."""

    tensors: Tensors
    layers: int
    hidden: int
    vocab: int
    activation_bytes_per_token_layer: float  # saved for backward by one block, per token, at the compute dtype
    tokens: int  # per micro-batch on one rank (DPO: both completions; GRPO: every completion of its prompts)
    activation_bytes_per_layer: float = 0.0  # saved by one block whatever the tokens (autocast's bf16 weight copies)
    param_bytes: int = 4  # 4: fp32 weights (fp32, bf16-mixed); 2: bf16
    compute_bytes: int = 4  # activations: 2 under bf16 autocast or bf16 weights
    lora: bool = False
    quantize: str | None = None
    state_dtype: str | None = None  # int8: 8-bit AdamW moments
    activation_checkpointing: str = "none"
    checkpointing_every: int = 2
    chunked_loss: bool = True
    chunk_bytes: int = CHUNK_BYTES  # the fp32 logits of one chunk of the chunked loss (CUDA_CHUNK_BYTES on a GPU)
    shards: int = 1  # FSDP2 ranks the weights, gradients and states are split over
    offload: str = "none"  # params: weights, gradients and states on the host (a GPU budget leaves them out)
    runtime_bytes: int = 0
    quantized_while_loading: bool = False  # a pretrained base: each weight quantized as it is read
    reference_copy: bool = False  # a frozen copy of the weights beside them (DPO's reference: copy; GRPO's with KL)
    # GRPO's rollouts: the rank's completions sampled at once, the KV cache of their prompts and completions
    generation_rows: int = 0
    prompt_tokens: int = 0  # per row
    generated_tokens: int = 0  # per row
    kv_bytes_per_token_layer: int = 0  # keys and values of one token in one block


@dataclass(frozen=True)
class MemoryEstimate:
    """One rank's peak memory of a training step, by part (bytes)."""

    weights: int
    gradients: int
    optimizer: int
    activations: int
    logits: int
    transients: int
    runtime: int
    peak: int
    offloaded: int = 0  # what parallel.offload keeps on the host instead (not in ``peak``)
    reference: int = 0  # the frozen reference model's weights
    generation: int = 0  # GRPO's rollouts: KV cache, one block's prefill and the sampling logits
    # a quantized run's model as built: from model.config, all of it in the weights' dtype before its weights are
    # quantized (on CPU, where the host is the device, a QLoRA run needs this much before training starts); from a
    # checkpoint, the quantized weights and the one weight being read
    build: int = 0

    def parts(self) -> dict[str, int]:
        """The named parts, in the order they are printed (the reference and rollouts where the method has them)."""
        parts = {"weights": self.weights, "reference model": self.reference, "gradients": self.gradients}
        parts |= {"optimizer state": self.optimizer, "activations": self.activations}
        parts |= {"logits (loss head)": self.logits, "generation (rollouts)": self.generation}
        parts |= {"transients": self.transients, "runtime": self.runtime}
        return {name: value for name, value in parts.items() if value or name not in OPTIONAL_PARTS}


def estimate(plan: PlanInputs) -> MemoryEstimate:
    """The estimated peak of one training step (the second: the optimizer's states exist) on one rank."""
    t = plan.tensors
    frozen_base = plan.lora or plan.quantize is not None
    adapters = (t.lora + t.lora_copies) if frozen_base else []
    trainable = adapters if frozen_base else (t.quantizable + t.other)
    # int8 weight-only: a byte a weight (its per-row scales are negligible)
    bytes_per_kind = {"nf4": NF4_BYTES_PER_WEIGHT, "fp4": NF4_BYTES_PER_WEIGHT, "int8": 1.0}  # fp4: NF4's layout
    quantized_weight_bytes = bytes_per_kind.get(plan.quantize or "", plan.param_bytes)
    base_weight_bytes = sum(t.quantizable) * quantized_weight_bytes + sum(t.other) * plan.param_bytes
    weights = base_weight_bytes + sum(adapters) * plan.param_bytes
    gradients = sum(trainable) * plan.param_bytes
    optimizer = sum(state_bytes(numel, plan) for numel in trainable)
    weights, gradients, optimizer = (int(part / plan.shards) for part in (weights, gradients, optimizer))

    per_layer = plan.activation_bytes_per_token_layer * plan.tokens + plan.activation_bytes_per_layer
    block_inputs = plan.hidden * plan.compute_bytes * plan.tokens
    if plan.activation_checkpointing == "full":
        activations = plan.layers * block_inputs + per_layer  # the inputs, and one block recomputed in backward
    elif plan.activation_checkpointing == "every_n":
        checkpointed = plan.layers // max(plan.checkpointing_every, 1)
        activations = checkpointed * block_inputs + (plan.layers - checkpointed) * per_layer + per_layer
    else:
        activations = plan.layers * per_layer
    if plan.chunked_loss:
        logits = 2 * min(plan.tokens * plan.vocab * 4, plan.chunk_bytes) + plan.tokens * plan.hidden * 4
    else:  # the logits in the compute dtype, their fp32 log-softmax and its gradient
        logits = plan.tokens * plan.vocab * (plan.compute_bytes + 8)

    largest_trainable = max(trainable, default=0)
    dequantized = 0
    if plan.quantize is not None and t.quantizable:  # one linear's weight de-quantized at a time, forward or backward
        dequantized = 2 * max(t.quantizable) * plan.compute_bytes
    update = 0
    if plan.state_dtype == "int8" and largest_trainable < EIGHT_BIT_COMPILE_MIN_NUMEL:
        update = EIGHT_BIT_EAGER_BYTES * int(largest_trainable / plan.shards)
    forward_backward = activations + logits + int(largest_trainable * plan.param_bytes / plan.shards) + dequantized
    optimizer_step = gradients + update
    reference = int(base_weight_bytes / plan.shards) if plan.reference_copy else 0
    generation = generation_bytes(plan)
    offloaded = 0
    if plan.offload == "params":  # FSDP2's CPUOffloadPolicy: shards, gradients and states on the host
        offloaded = weights + gradients + optimizer
        weights, gradients, optimizer = 0, 0, 0
        optimizer_step = 0
    elif plan.offload == "optimizer":  # HostOffloadAdamW: the moments, and a buffer for each weight and gradient
        offloaded = optimizer + weights + gradients
        optimizer = 0
    # the rollouts come before the step's forward-backward: the previous step's gradients are gone by then
    peak = plan.runtime_bytes + weights + reference + optimizer + max(forward_backward, optimizer_step, generation)
    build = plan.runtime_bytes + sum(t.quantizable + t.other + adapters) * plan.param_bytes
    if plan.quantized_while_loading and plan.quantize is not None:  # the quantized base, and one weight in flight
        in_flight = max(t.quantizable, default=0) * plan.param_bytes
        build += sum(t.quantizable) * (quantized_weight_bytes - plan.param_bytes) + in_flight
    return MemoryEstimate(
        weights=int(weights),
        gradients=int(gradients),
        optimizer=int(optimizer),
        activations=int(activations),
        logits=int(logits),
        transients=int(max(dequantized + int(largest_trainable * plan.param_bytes / plan.shards), update)),
        runtime=int(plan.runtime_bytes),
        peak=int(peak),
        offloaded=int(offloaded),
        build=int(build),
        reference=reference,
        generation=generation,
    )


def generation_bytes(plan: PlanInputs) -> int:
    """GRPO's rollouts on one rank: every row's keys and values at full length, the widest moment of the prompts'
    prefill (one block's activations over all prompt tokens, as saved for backward: an upper bound), and the
    sampling's fp32 logits and probabilities of one step."""
    if not plan.generation_rows:
        return 0
    rows = plan.generation_rows
    kv_cache = rows * (plan.prompt_tokens + plan.generated_tokens) * plan.layers * plan.kv_bytes_per_token_layer
    prefill = plan.activation_bytes_per_token_layer * rows * plan.prompt_tokens + plan.activation_bytes_per_layer
    sampling = rows * plan.vocab * 8
    return int(kv_cache + prefill + sampling)


def state_bytes(numel: int, plan: PlanInputs) -> float:
    """AdamW's two moments of one tensor: 8-bit codes and scales, or the parameter's dtype (torch's AdamW)."""
    if plan.state_dtype == "int8" and numel >= INT8_STATE_MIN_NUMEL and numel % 256 == 0:
        return 2 * numel * INT8_STATE_BYTES
    return 2 * numel * plan.param_bytes


def largest_micro_batch(plan: PlanInputs, budget: int, *, seq_len: int, rows_per_example: int = 1) -> int:
    """The most rows of ``seq_len`` tokens per micro-batch whose estimated peak fits ``budget`` bytes (0: none)."""
    best, rows = 0, 1
    while rows <= 1 << 16:
        if estimate(replace(plan, tokens=rows * seq_len * rows_per_example)).peak > budget:
            break
        best, rows = rows, rows * 2
    low, high = best, rows  # the answer lies in [low, high)
    while high - low > 1:
        middle = (low + high) // 2
        if estimate(replace(plan, tokens=middle * seq_len * rows_per_example)).peak <= budget:
            low = middle
        else:
            high = middle
    return low


def format_bytes(value: float) -> str:
    """``1.23 GiB`` / ``456 MiB``."""
    if abs(value) >= 2**30:
        return f"{value / 2**30:.2f} GiB"
    return f"{value / 2**20:.0f} MiB"


def parse_bytes(text: str) -> int:
    """``20GiB``, ``20GB``, ``512MiB``, ``1.5T`` or a number of bytes; ValueError otherwise."""
    units = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
    cleaned = text.strip().lower().replace("ib", "").replace("b", "")
    number = cleaned.rstrip("kmgt")
    unit = cleaned[len(number) :]
    try:
        return int(float(number) * units[unit])
    except (KeyError, ValueError):
        raise ValueError(f"expected a size such as 20GiB or 512MiB, got {text!r}") from None
