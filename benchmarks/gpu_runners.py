"""The systems ``gpu.py`` compares, each one training step loop on the same model, rows, batch and optimizer:
honing (its defaults, or with switches), the transformers ``Trainer``, TRL's ``SFTTrainer`` and a hand-written
FSDP2 loop. Each runner calls ``clock.step_end(step)`` after every step and ``losses.record(step, loss)`` at every
logged step (every ``LOG_EVERY``), so that the runs' loss curves can be compared (fp8 against bf16).

The rows: by default the Python standard library's own source read as bytes (one token per byte, ids 0-255 of the
model's vocabulary), a real corpus on every machine whose loss falls as the model learns, so that two precisions'
curves say something; ``random``: seeded uniform tokens (a flat loss at ln(vocab)).
"""

from __future__ import annotations

import contextlib
import pathlib
import sysconfig
from typing import Any

from timed_steps import StepClock, force_fsdp_on_one_process
from trainer_overhead import Rows  # {"input_ids", "labels"} rows that both trainers accept

SEED = 0
LR, WEIGHT_DECAY, BETAS, EPS = 3e-4, 0.1, (0.9, 0.95), 1e-8
LOG_EVERY = 10  # the loss is read (a device sync) every this many steps by every system, as honing's default


class Losses:
    """The loss at each logged step of one run: ``[[step, loss], ...]``."""

    def __init__(self) -> None:
        self.points: list[list[float]] = []

    def record(self, step: int, loss: float) -> None:
        """Keep the loss logged at ``step``."""
        self.points.append([step, float(loss)])


def model_config(settings: dict[str, Any]) -> Any:
    """The benchmark's ``LlamaConfig`` for ``settings``' shape, vocabulary and sequence length."""
    from transformers import LlamaConfig

    shape = settings["shape"]
    return LlamaConfig(
        hidden_size=shape["hidden"],
        num_hidden_layers=shape["layers"],
        num_attention_heads=shape["heads"],
        num_key_value_heads=shape["kv_heads"],
        intermediate_size=shape["mlp"],
        tie_word_embeddings=True,
        vocab_size=settings["vocab"],
        max_position_embeddings=settings["seq_len"],
        attn_implementation="sdpa",
    )


def stdlib_bytes(count: int) -> bytes:
    """The first ``count`` bytes of the standard library's ``.py`` files, in sorted path order (repeated if short)."""
    folder = pathlib.Path(sysconfig.get_paths()["stdlib"])
    chunks, total = [], 0
    for path in sorted(folder.rglob("*.py")):
        if "site-packages" in path.parts:
            continue
        data = path.read_bytes()
        chunks.append(data)
        total += len(data)
        if total >= count:
            break
    corpus = b"".join(chunks)
    return (corpus * (count // max(len(corpus), 1) + 1))[:count]


def token_rows(settings: dict[str, Any]) -> Any:
    """``total_steps x batch`` rows of ``seq_len`` tokens: every step a fresh batch."""
    import torch

    rows = settings["batch"] * settings["total_steps"]
    if settings["data"] == "random":
        generator = torch.Generator().manual_seed(SEED)
        return torch.randint(0, settings["vocab"], (rows, settings["seq_len"]), generator=generator)
    raw = stdlib_bytes(rows * settings["seq_len"])
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).to(torch.long).view(rows, settings["seq_len"])


def build(settings: dict[str, Any], device: Any) -> tuple[Any, Any]:
    """The random model (seed 0) on ``device`` (bf16 weights for ``bf16``, else fp32) and the token rows."""
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(SEED)
    with torch.device(device):  # initialised in place: a 1.5B model built on the host first takes seconds more
        model = LlamaForCausalLM(model_config(settings))
    if settings["precision"] == "bf16":
        model = model.to(torch.bfloat16)
    return model, token_rows(settings)


def run_honing(settings: dict[str, Any], device: Any, clock: StepClock, losses: Losses, **switches: Any) -> dict:
    """honing's LMTrainModule and Trainer (metrics file, speed monitor, GC callbacks; no checkpoints) on FSDP2, at
    the defaults a user's config gets (``parallel.*``, ``model.chunked_loss``; ``parallel.compile: auto`` resolved
    for this device) unless ``switches`` set one (``compile``, ``activation_checkpointing``, ``chunked_loss``,
    ``liger``, ``precision``)."""
    import tempfile

    import honing.chunked_ce
    from honing.config.model_schema import ModelSection
    from honing.config.parallel_schema import ParallelSection
    from honing.data.loader import DataLoader
    from honing.interop.olmo_core import TrainerConfig
    from honing.methods.lm import LMTrainModule
    from honing.models import parallel
    from honing.models.compile_choice import allow_eager_fallback, choose_compile
    from honing.models.float8 import FP8, check_fp8_device, convert_linears_to_float8, precompute_scales_after_steps
    from honing.optim.param_groups import build_adamw
    from honing.parallel_dims import ParallelDims
    from honing.train import Callback
    from honing.train.callbacks.gc import GarbageCollectorCallback
    from honing.train.callbacks.metrics_file import MetricsFileCallback
    from honing.train.callbacks.speed_monitor import SpeedMonitorCallback

    class Timer(Callback):
        def on_step_end(self):
            clock.step_end(self.step)

        def on_log(self, step, metrics):
            if "train/loss" in metrics:
                losses.record(step, metrics["train/loss"])

    defaults = ParallelSection()
    precision = switches.pop("precision", settings["precision"])
    # fp8 on one GPU: honing resolves fsdp to none there, so its weights are not gathered in float8 (fp8_all_gather
    # False, the default variant); several GPUs gather them in float8 with one scale pass after each step
    float8_all_gather = switches.pop("fp8_all_gather", False)
    chunked_loss = switches.pop("chunked_loss", ModelSection.model_fields["chunked_loss"].default)
    if not switches.pop("liger", True):  # the compiled-chunks path a machine without liger-kernel takes
        honing.chunked_ce.liger_available = lambda device: False
    compile_choice = choose_compile(switches.pop("compile", defaults.compile), device)
    if compile_choice.enabled and compile_choice.automatic:
        allow_eager_fallback()
    # parallel.activation_checkpointing: auto plans the run's memory in the recipe (honing.plan.auto_checkpointing);
    # this loop builds no recipe: auto is taken as none, and the result says whether the measured peak fits the 90%
    # auto would demand (it picks none exactly then)
    checkpointing = defaults.activation_checkpointing
    options = dict(
        reshard_after_forward=defaults.reshard_after_forward,
        activation_checkpointing="none" if checkpointing == "auto" else checkpointing,
        mixed_precision=defaults.mixed_precision,
        compile=compile_choice.enabled,
    )
    options.update(switches)
    model, data = build(settings, device)
    if precision == FP8:
        check_fp8_device(device) if device.type == "cuda" else None  # the CPU smoke run takes the CPU stand-in
        convert_linears_to_float8(model, fsdp_float8_all_gather=float8_all_gather)
    force_fsdp_on_one_process()
    dims = ParallelDims(world_size=1)
    dims.build_mesh(device.type)
    model = parallel.parallelize(model, strategy="fsdp", dims=dims, device=device, precision=precision, **options)
    optimizer = build_adamw(model, lr=LR, weight_decay=WEIGHT_DECAY, betas=BETAS, eps=EPS)
    if precision == FP8:
        precompute_scales_after_steps(model, optimizer)
    module = LMTrainModule(
        model,
        optimizer,
        micro_batch_size=settings["batch"],
        grad_clip=1.0,
        precision=precision,
        device=device,
        scheduler={"name": "constant", "warmup_steps": settings["lr_warmup"]},
        chunked_loss=chunked_loss,
    )
    loader = DataLoader(Rows(data), global_batch_size=settings["batch"], seed=SEED, shuffle=False)
    with tempfile.TemporaryDirectory() as folder:
        TrainerConfig(
            save_folder=folder,
            max_duration=f"{settings['total_steps']}steps",
            metrics_collect_interval=LOG_EVERY,
            no_checkpoints=True,
            no_evals=True,
            callbacks={
                "metrics_file": MetricsFileCallback(),
                "timer": Timer(),
                "speed_monitor": SpeedMonitorCallback(seq_len=settings["seq_len"], precision=precision, device=device),
                "gc": GarbageCollectorCallback(interval=100),
            },
        ).build(module, loader).fit()
    liger = chunked_loss and honing.chunked_ce.liger_available(device)
    facts = {"fsdp2": parallel.is_fsdp(model), "compile": compile_choice.line, "liger": liger, **dynamo_facts()}
    if checkpointing == "auto" and "activation_checkpointing" not in switches and device.type == "cuda":
        import torch

        total = torch.cuda.get_device_properties(device).total_memory
        fits = torch.cuda.max_memory_allocated(device) <= 0.9 * total
        facts["activation_checkpointing"] = "auto: none (the peak fits 90% of the GPU)" if fits else "auto: NOT none"
    return facts


def dynamo_facts() -> dict[str, int]:
    """How many graphs torch.compile made and how often it broke a graph or fell back to eager: a variant whose
    compile failed (``auto`` runs such a graph eagerly) is told apart from a slow compiled one."""
    from torch._dynamo.utils import counters

    return {
        "compiled_graphs": int(counters["stats"].get("unique_graphs", 0)),
        "graph_breaks": int(sum(counters["graph_break"].values())),
        "frames_not_compiled": int(counters["frames"].get("total", 0) - counters["frames"].get("ok", 0)),
    }


def training_arguments(settings: dict[str, Any], device: Any, folder: str, arguments_class: Any, **extra: Any) -> Any:
    """The Trainer's (or TRL's config's) arguments for the shared settings; FSDP2 through accelerate on CUDA."""
    cuda = device.type == "cuda"
    # accelerate shards only on accelerators (FSDP is no distributed type for CPU processes)
    sharding = dict(fsdp=True, fsdp_config={"version": 2, "reshard_after_forward": True}) if cuda else {}
    return arguments_class(
        output_dir=folder,
        per_device_train_batch_size=settings["batch"],
        max_steps=settings["total_steps"],
        learning_rate=LR,
        weight_decay=WEIGHT_DECAY,
        adam_beta1=BETAS[0],
        adam_beta2=BETAS[1],
        adam_epsilon=EPS,
        optim="adamw_torch_fused",
        max_grad_norm=1.0,
        lr_scheduler_type="constant_with_warmup",
        warmup_steps=settings["lr_warmup"],
        logging_steps=LOG_EVERY,
        save_strategy="no",
        report_to=[],
        use_cpu=not cuda,
        bf16=settings["precision"] == "bf16-mixed",
        dataloader_num_workers=0,
        seed=SEED,
        disable_tqdm=True,
        **sharding,
        **extra,
    )


def hf_callback(clock: StepClock, losses: Losses) -> Any:
    """A ``TrainerCallback`` that times each step and keeps the logged losses."""
    from transformers import TrainerCallback

    class Timer(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            clock.step_end(state.global_step)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "loss" in logs:
                losses.record(state.global_step, logs["loss"])

    return Timer()


def is_sharded(model: Any) -> bool:
    """True when FSDP2 wrapped any of ``model``'s modules."""
    from torch.distributed.fsdp import FSDPModule

    return any(isinstance(module, FSDPModule) for module in model.modules())


def run_trainer(settings: dict[str, Any], device: Any, clock: StepClock, losses: Losses) -> dict:
    """transformers.Trainer with the same model, data, batch and optimizer."""
    import tempfile

    from transformers import Trainer, TrainingArguments

    model, data = build(settings, device)
    with tempfile.TemporaryDirectory() as folder:
        args = training_arguments(settings, device, folder, TrainingArguments)
        trainer = Trainer(model=model, args=args, train_dataset=Rows(data), callbacks=[hf_callback(clock, losses)])
        trainer.train()
    return {"fsdp2": is_sharded(trainer.model)}


def byte_tokenizer() -> Any:
    """A byte-level fast tokenizer built in-process (TRL's collator needs a pad token; no download)."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {f"<{i}>": i for i in range(256)} | {"<pad>": 256}
    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="<pad>")), pad_token="<pad>"
    )


def run_trl(settings: dict[str, Any], device: Any, clock: StepClock, losses: Losses) -> dict:
    """TRL's SFTTrainer at its defaults (no packing, its own collator and metrics) on the same token rows."""
    import tempfile

    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    model, data = build(settings, device)
    dataset = Dataset.from_dict({"input_ids": data.tolist()})  # tokenized rows: TRL skips its own tokenizing
    with tempfile.TemporaryDirectory() as folder:
        args = training_arguments(settings, device, folder, SFTConfig, max_length=settings["seq_len"])
        trainer = SFTTrainer(
            model=model,
            args=args,
            train_dataset=dataset,
            processing_class=byte_tokenizer(),
            callbacks=[hf_callback(clock, losses)],
        )
        trainer.train()
    return {"fsdp2": is_sharded(trainer.model)}


def run_hand(settings: dict[str, Any], device: Any, clock: StepClock, losses: Losses) -> dict:
    """The minimal FSDP2 loop (torchtitan's wrapping): forward, full-logits loss, backward, clip, fused AdamW."""
    import torch
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    model, data = build(settings, device)
    mixed = settings["precision"] == "bf16-mixed"
    policy = MixedPrecisionPolicy()
    if mixed and device.type == "cuda":
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    mesh = init_device_mesh(device.type, (1,))
    layers = model.model.layers
    for index, layer in enumerate(layers):
        # the last layer stays gathered after forward: backward starts with it
        fully_shard(layer, mesh=mesh, mp_policy=policy, reshard_after_forward=index < len(layers) - 1)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY, betas=BETAS, eps=EPS, fused=True
    )
    warmup = max(settings["lr_warmup"], 1)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if mixed else contextlib.nullcontext()
    model.train()
    batch_size = settings["batch"]
    for step in range(1, settings["total_steps"] + 1):
        batch = data[(step - 1) * batch_size : step * batch_size].to(device, non_blocking=True)
        with autocast:
            logits = model(input_ids=batch, use_cache=False).logits
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), batch[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        if step % LOG_EVERY == 0:  # a loop that never looks at its loss is not a realistic baseline
            losses.record(step, loss.item())
        clock.step_end(step)
    return {"fsdp2": True}


RUNNERS = {"honing": run_honing, "trainer": run_trainer, "trl": run_trl, "hand": run_hand}
