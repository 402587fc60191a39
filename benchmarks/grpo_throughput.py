"""GRPO throughput: honing's GRPO train module against TRL's GRPOTrainer (no vLLM: transformers' ``generate``) on
the same model, tokenizer, prompts, reward and settings; prints completions/s, generation and training time per
step of each, and the ratios.

The same for every system:
- model: a random Llama (hidden 128 x 4 layers, the SFT example's shape, seed 0), fp32, sdpa attention;
- tokenizer: honing's byte-level one with the ChatML tokens and template;
- prompts: the generated ``reverse`` task's questions (``Reverse the letters: ...``) as chat prompts, in order
  (no shuffling), rendered with the template's generation prompt;
- rollouts: ``--prompts`` prompts per step x G = ``--generations`` completions, sampled at temperature 1.0
  (no top-k, no top-p) for at most ``--new-tokens`` tokens, stopping at end of text or ``<|im_end|>`` (a random
  model almost never ends a whole group early, so every step decodes the full length);
- reward: Oumi's ``soft_10tokens_completions`` (honing's built-in function, handed to TRL as is);
- update: one optimizer step per rollout batch (``num_iterations`` 1), ``loss_type`` dapo, ``scale_rewards``
  group, ``beta`` 0 (no reference model), all completions of a step in one forward/backward pass, fused AdamW with
  the same LR and a constant schedule, gradient clipping at 1.0.

The metric: completions over the wall time from the end of warm-up step W to the end of step W+N (each trainer's
step-end callback). Generation time is the time spent in the call that samples the completions (honing's
``sample_completions``, TRL's ``_generate_single_turn``: one call per step in both), summed over the timed steps;
training time is the rest of the step (decoding the text, rewards, advantages, log-probs, loss, backward, optimizer
step, bookkeeping). Each measurement is a fresh subprocess run alone (2 cores: never two timings at once); the
systems alternate order round by round and the median of the rounds is reported.

    .venv/bin/python benchmarks/grpo_throughput.py [--rounds 3] [--steps 10] [--warmup 2] [--threads 2]

``--estimators`` measures honing's variants of the step instead, against honing's GRPO (the same settings):
GSPO (``importance_sampling_level: sequence``, ``loss_type: grpo``), RLOO (``method: rloo``, beta 0 as GRPO's),
DAPO's dynamic sampling (``filter_groups``, 4 rounds at most) with the same reward (no group is ever all equal
here: the filter's own cost), and with a reward that is 0 for half the prompts (``DAPO refills``: their groups
are dropped and refilled). Its figure is completions generated per second (refills included), so a ratio to
GRPO's is the cost per completion. Beside wall time it reports completions per CPU second of the process, which
holds still while other processes share the cores (with ``--threads 1`` it is the work per completion).

    .venv/bin/python benchmarks/grpo_throughput.py --estimators [--rounds 3] [--steps 10] [--warmup 2]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from typing import Any

import common  # benchmarks/common.py: this folder is on sys.path when a script runs

SEED = 0
LR = 1e-5
MODEL = dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4, intermediate_size=512)
REWARD = "soft_10tokens_completions"
# set from the command line in each measuring subprocess
PROMPTS_PER_STEP, GENERATIONS, NEW_TOKENS = 2, 4, 64


# --- shared assets ------------------------------------------------------------------------------------------
def build_tokenizer() -> Any:
    """honing's byte-level tokenizer with the ChatML tokens and template."""
    from honing.data.chat.conversation import ensure_special_tokens
    from honing.data.chat.templates import NAMED_TEMPLATES
    from honing.data.tokenizer import build_tokenizer as honing_tokenizer

    tokenizer = honing_tokenizer("byte")
    ensure_special_tokens(tokenizer, "chatml")
    tokenizer.chat_template = NAMED_TEMPLATES["chatml"]
    return tokenizer


def stop_token_ids(tokenizer: Any) -> list[int]:
    """End of text and ChatML's end of turn: where both systems stop a completion."""
    from honing.models.generation import end_of_turn_ids

    return sorted({int(tokenizer.eos_token_id), *end_of_turn_ids(tokenizer)})


def build_model(tokenizer: Any) -> Any:
    """The shared random Llama (seed 0, fp32, sdpa), its generation config stopping at ``stop_token_ids``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    config = LlamaConfig(
        **MODEL,
        vocab_size=len(tokenizer),
        max_position_embeddings=256,
        attn_implementation="sdpa",
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = stop_token_ids(tokenizer)  # TRL stops at these (and the tokenizer's eos)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def prompts(count: int) -> list[list[dict[str, str]]]:
    """``count`` chat prompts of the generated reverse task (the user's question only)."""
    from honing.data.generated.tasks import generate_rows

    return [row["messages"][:1] for row in generate_rows("reverse", samples=count, seed=SEED)]


def reward_function() -> Any:
    """The reward both systems score with: honing's built-in, called with TRL's arguments."""
    from honing.rl.rewards import resolve_reward

    return resolve_reward(REWARD)


class GenerationTimer:
    """Wraps the function that samples a step's completions and records how long each call takes, in order."""

    def __init__(self, function: Any):
        self.function = function
        self.seconds: list[float] = []
        self.completion_tokens: list[int] = []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        out = self.function(*args, **kwargs)
        self.seconds.append(time.perf_counter() - start)
        return out

    def timed(self, warmup: int, steps: int) -> float:
        """Seconds of the calls of steps warmup+1 .. warmup+steps (one call per step)."""
        if len(self.seconds) < warmup + steps:
            raise RuntimeError(f"only {len(self.seconds)} generation calls were made, expected {warmup + steps}")
        return sum(self.seconds[warmup : warmup + steps])


def result(times: dict[int, float], timer: GenerationTimer, warmup: int, steps: int, lengths: list[float]):
    """What one measurement reports."""
    seconds = times[warmup + steps] - times[warmup]
    generation = timer.timed(warmup, steps)
    return {
        "completions_per_s": steps * PROMPTS_PER_STEP * GENERATIONS / seconds,
        "step_s": seconds / steps,
        "generation_s": generation / steps,
        "training_s": (seconds - generation) / steps,
        "mean_completion_length": statistics.mean(lengths[warmup : warmup + steps]) if lengths else float("nan"),
    }


# --- honing -------------------------------------------------------------------------------------------------
#: honing's estimators (``--estimators``): the train module's settings beside GRPO's
ESTIMATORS: dict[str, dict[str, Any]] = {
    "GRPO": {},
    "GSPO": {"importance_sampling_level": "sequence", "loss_type": "grpo"},
    "RLOO": {"rloo": True},
    "DAPO": {"filter_groups": {"enable": True, "max_num_gen_batches": 4}},
    "DAPO refills": {"filter_groups": {"enable": True, "max_num_gen_batches": 4}, "reward": "half_flat"},
}


def half_flat(prompts: list[Any], completions: list[Any], **columns: Any) -> list[float]:
    """``soft_10tokens_completions`` for prompts of even length, 0 for the others (their groups are all equal)."""
    scores = reward_function()(prompts, completions, **columns)
    return [0.0 if len(str(prompt)) % 2 else score for prompt, score in zip(prompts, scores)]


def run_honing(warmup: int, steps: int, estimator: str = "GRPO") -> dict[str, float]:
    """honing's GRPOTrainModule in its Trainer with its default bookkeeping callbacks (metrics file, speed
    monitor, GC), as ``method: grpo`` builds it (``estimator``: one of ``ESTIMATORS``)."""
    import tempfile

    import honing.methods.grpo as grpo_module
    import honing.methods.grpo_rollouts as rollouts_module
    from honing.config.grpo_schema import GRPOSection
    from honing.config.rloo_schema import RLOOSection
    from honing.data.loader import DataLoader
    from honing.data.prompts.prompts import Prompt, PromptCollator, PromptDataset
    from honing.interop.olmo_core import TrainerConfig
    from honing.methods.grpo_settings import RolloutParts
    from honing.optim.param_groups import build_adamw
    from honing.rl.rewards import RewardScorer
    from honing.train import Callback
    from honing.train.callbacks.gc import GarbageCollectorCallback
    from honing.train.callbacks.metrics_file import MetricsFileCallback
    from honing.train.callbacks.speed_monitor import SpeedMonitorCallback

    times: dict[int, float] = {}
    lengths: list[float] = []

    generated: dict[int, int] = {}  # step → completions sampled (refill rounds included)
    cpu: dict[int, float] = {}  # the process's CPU seconds: the work done, whatever else the machine runs
    calls: list[tuple[int, float]] = []  # (step, seconds) of each sampling call

    class Timer(Callback):
        def on_step_begin(self):
            generated[self.step] = 0

        def on_step_end(self):
            if self.step in (warmup, warmup + steps):
                times[self.step] = time.perf_counter()
                cpu[self.step] = time.process_time()

    timer = GenerationTimer(rollouts_module.sample_completions)

    def counting(*args: Any, **kwargs: Any) -> Any:
        ids, mask = timer(*args, **kwargs)
        step = max(generated)
        calls.append((step, timer.seconds[-1]))
        generated[step] += len(ids)
        if len(lengths) < step:  # the step's first round, as before
            lengths.append(float(mask.sum(1).float().mean()))
        return ids, mask

    rollouts_module.sample_completions = counting  # the name the group sampler calls
    tokenizer = build_tokenizer()
    items = [Prompt(messages) for messages in prompts(PROMPTS_PER_STEP * (warmup + steps))]
    token_ids = [
        tokenizer(
            tokenizer.apply_chat_template(p.prompt, tokenize=False, add_generation_prompt=True),
            add_special_tokens=False,  # as the GRPO recipe tokenizes (the template writes every special token)
        )["input_ids"]
        for p in items
    ]
    collator = PromptCollator(tokenizer.pad_token_id)
    loader = DataLoader(
        PromptDataset(items, token_ids),
        global_batch_size=PROMPTS_PER_STEP,
        collate_fn=collator,
        seed=SEED,
        shuffle=False,
    )
    model = build_model(tokenizer)
    optimizer = build_adamw(model, lr=LR, weight_decay=0.0, betas=(0.9, 0.999), eps=1e-8)
    settings = dict(ESTIMATORS[estimator])
    train_module, section_class = grpo_module.GRPOTrainModule, GRPOSection
    if settings.pop("rloo", False):
        from honing.methods.rloo import RLOOTrainModule as train_module

        section_class = RLOOSection
    reward = REWARD
    if settings.pop("reward", None) == "half_flat":
        reward = "grpo_throughput:half_flat"  # importable: this folder is on sys.path
    refill = None
    if "filter_groups" in settings:
        from honing.methods.grpo_sampling import RefillPrompts

        refill = RefillPrompts(loader.dataset, collator, seed=SEED)
    # no KL term (RLOO's section defaults to TRL's beta 0.05)
    section = section_class(
        num_generations=GENERATIONS, max_completion_length=NEW_TOKENS, beta=0.0, sample_interval=None, **settings
    )
    parts = RolloutParts(
        tokenizer=tokenizer,
        scorer=RewardScorer([(reward, 1.0)]),
        stop_token_ids=stop_token_ids(tokenizer),
        seed=SEED,
        refill_prompts=refill,
    )
    module = train_module(
        model,
        optimizer,
        section,
        parts,
        micro_batch_size=PROMPTS_PER_STEP,  # prompts: every completion of the step in one pass
        grad_clip=1.0,
        precision="fp32",
        scheduler={"name": "constant"},
        collator=collator,
    )
    with tempfile.TemporaryDirectory() as folder:
        TrainerConfig(
            save_folder=folder,
            max_duration=f"{warmup + steps}steps",
            metrics_collect_interval=10,
            callbacks={
                "metrics_file": MetricsFileCallback(),
                "timer": Timer(),
                "speed_monitor": SpeedMonitorCallback(seq_len=max(map(len, token_ids)) + NEW_TOKENS, precision="fp32"),
                "gc": GarbageCollectorCallback(interval=100),
            },
        ).build(module, loader).fit()
    timed = range(warmup + 1, warmup + steps + 1)
    timer.seconds = [sum(seconds for step, seconds in calls if step == s) for s in range(1, warmup + steps + 1)]
    measured = result(times, timer, warmup, steps, lengths)
    completions = sum(generated[s] for s in timed)
    measured["generated_per_s"] = completions / (times[warmup + steps] - times[warmup])
    measured["generated_per_cpu_s"] = completions / (cpu[warmup + steps] - cpu[warmup])
    return measured


# --- TRL ----------------------------------------------------------------------------------------------------
def run_trl(warmup: int, steps: int) -> dict[str, float]:
    """TRL's GRPOTrainer (transformers ``generate``, no vLLM) on a conversational prompt dataset; no eval, no saves,
    no completion logging."""
    import tempfile

    import datasets
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    datasets.disable_progress_bars()
    times: dict[int, float] = {}
    lengths: list[float] = []

    class Timer(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step in (warmup, warmup + steps):
                times[state.global_step] = time.perf_counter()

    tokenizer = build_tokenizer()
    dataset = datasets.Dataset.from_list([{"prompt": p} for p in prompts(PROMPTS_PER_STEP * (warmup + steps))])
    model = build_model(tokenizer)
    reward = reward_function()

    def soft_10tokens_completions(prompts, completions, **kwargs):  # TRL names the metric after the function
        return reward(prompts, completions, **kwargs)

    with tempfile.TemporaryDirectory() as folder:
        args = GRPOConfig(
            output_dir=folder,
            per_device_train_batch_size=PROMPTS_PER_STEP * GENERATIONS,  # completions per step
            gradient_accumulation_steps=1,
            num_generations=GENERATIONS,
            max_completion_length=NEW_TOKENS,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            num_iterations=1,
            beta=0.0,
            loss_type="dapo",
            scale_rewards="group",
            max_steps=warmup + steps,
            learning_rate=LR,
            weight_decay=0.0,
            adam_beta1=0.9,
            adam_beta2=0.999,
            adam_epsilon=1e-8,
            max_grad_norm=1.0,
            lr_scheduler_type="constant",
            optim="adamw_torch_fused",
            shuffle_dataset=False,
            bf16=False,
            fp16=False,
            use_cpu=True,
            logging_steps=10,
            save_strategy="no",
            eval_strategy="no",
            report_to=[],
            dataloader_num_workers=0,
            seed=SEED,
            disable_tqdm=True,
        )
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=[soft_10tokens_completions],
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=[Timer()],
        )
        timer = GenerationTimer(trainer._generate_single_turn)

        def counting(*call_args: Any, **call_kwargs: Any) -> Any:
            completion_ids, logprobs = timer(*call_args, **call_kwargs)
            lengths.append(statistics.mean(len(ids) for ids in completion_ids))
            return completion_ids, logprobs

        trainer._generate_single_turn = counting
        trainer.train()
    return result(times, timer, warmup, steps, lengths)


SYSTEMS = {"honing": run_honing, "TRL GRPOTrainer": run_trl}


# --- driver -------------------------------------------------------------------------------------------------
def measure_in_subprocess(system: str, args: argparse.Namespace) -> dict[str, float]:
    """Run one system in a fresh interpreter with the benchmark's thread count; return its measurement."""
    call = f"b.SYSTEMS[{system!r}]({args.warmup}, {args.steps})"
    if args.estimators:  # "honing GSPO" → honing's GSPO
        call = f"b.run_honing({args.warmup}, {args.steps}, {system.removeprefix('honing ')!r})"
    return common.measure_in_subprocess(
        "grpo_throughput",
        call,
        threads=args.threads,
        setup=(
            f"b.PROMPTS_PER_STEP, b.GENERATIONS, b.NEW_TOKENS = {args.prompts}, {args.generations}, {args.new_tokens}"
        ),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=2, help="prompts per step")
    parser.add_argument("--generations", type=int, default=4, help="G: completions per prompt")
    parser.add_argument("--new-tokens", type=int, default=64, help="max_completion_length")
    parser.add_argument("--estimators", action="store_true", help="honing's GSPO / RLOO / DAPO against its GRPO")
    args = parser.parse_args()
    systems = [f"honing {name}" for name in ESTIMATORS] if args.estimators else list(SYSTEMS)

    results: dict[str, list[dict[str, float]]] = {name: [] for name in systems}
    failures: dict[str, str] = {}
    started = time.perf_counter()
    for round_index in range(args.rounds):
        order = systems if round_index % 2 == 0 else systems[::-1]
        for system in order:
            if system in failures:
                continue
            try:
                measured = measure_in_subprocess(system, args)
            except RuntimeError as error:
                failures[system] = str(error)
                print(f"round {round_index + 1} {system:16s} FAILED: {error}", flush=True)
                continue
            results[system].append(measured)
            print(
                f"round {round_index + 1} {system:16s} {measured['completions_per_s']:7.2f} completions/s, "
                f"{measured['step_s']:.3f} s/step (generation {measured['generation_s']:.3f} s, training "
                f"{measured['training_s']:.3f} s), mean completion length {measured['mean_completion_length']:.1f}"
                + (
                    f", {measured['generated_per_s']:.2f} generated/s, {measured['generated_per_cpu_s']:.2f} per CPU s"
                    if args.estimators
                    else ""
                ),
                flush=True,
            )

    keys = ("completions_per_s", "step_s", "generation_s", "training_s", "mean_completion_length")
    keys += ("generated_per_s", "generated_per_cpu_s") if args.estimators else ()
    median = {
        name: {key: statistics.median(r[key] for r in runs) for key in keys} for name, runs in results.items() if runs
    }
    print(
        f"\n{platform.processor() or platform.machine()}, {args.threads} threads, fp32, hidden "
        f"{MODEL['hidden_size']} x {MODEL['num_hidden_layers']} layers, byte tokenizer, {args.prompts} prompts x "
        f"G = {args.generations} per step, up to {args.new_tokens} new tokens, {args.steps} timed steps after "
        f"{args.warmup} warm-up, median of {args.rounds} rounds ({time.perf_counter() - started:.0f} s in all)"
    )
    for name in systems:
        if name in median:
            m = median[name]
            print(
                f"{name:16s} {m['completions_per_s']:7.2f} completions/s | per step {m['step_s']:.3f} s: generation "
                f"{m['generation_s']:.3f} s, training {m['training_s']:.3f} s"
            )
        else:
            print(f"{name:16s} failed: {failures[name]}")
    ratios = {}
    if args.estimators and "honing GRPO" in median:  # per completion generated, refills included
        grpo = median["honing GRPO"]
        for name in systems[1:]:
            if name in median:
                ratios[f"{name} / GRPO, generated/s"] = median[name]["generated_per_s"] / grpo["generated_per_s"]
                ratios[f"{name} / GRPO, generated/CPU s"] = (
                    median[name]["generated_per_cpu_s"] / grpo["generated_per_cpu_s"]
                )
                ratios[f"{name} / GRPO, training s/step"] = median[name]["training_s"] / grpo["training_s"]
        for name, value in ratios.items():
            print(f"{name:44s} = {value:.3f}")
    elif len(median) == len(SYSTEMS):
        ours, theirs = median["honing"], median["TRL GRPOTrainer"]
        ratios = {
            "completions/s honing / TRL": ours["completions_per_s"] / theirs["completions_per_s"],
            "generation time TRL / honing": theirs["generation_s"] / ours["generation_s"],
            "training time TRL / honing": theirs["training_s"] / ours["training_s"],
        }
        for name, value in ratios.items():
            print(f"{name:32s} = {value:.3f}")
    print(json.dumps({"median": median, "ratios": ratios, "failures": failures, "args": vars(args)}))


if __name__ == "__main__":
    main()
