"""TRL's CLI config files (``trl sft --config FILE``, ``trl dpo ...``, ``trl grpo ...``) as honing's config. Such a
file holds, at its top level, the script's arguments (``dataset_name``, ...), ``ModelConfig``'s (``model_name_or_path``,
``use_peft``, ``lora_r``, ...), the data set mixture (``datasets``), the launcher's (``num_processes``,
``accelerate_config``) and the trainer config's fields; it does not say which trainer it is for, so
``honing train FILE --from trl-dpo`` says, or the trainer is read from keys only one trainer has. The trainer's fields
go through ``trl_args.translate_trl_args``; the rest through ``trl_cli_table``'s verdicts."""

from __future__ import annotations

from typing import Any

from honing.config.errors import ConfigError
from honing.interop.configs.hf_args import set_precision
from honing.interop.configs.hf_engines import lora_numbers, translate_deepspeed_file, translate_fsdp_config
from honing.interop.configs.key_tables import key_table
from honing.interop.configs.machine_options import set_attention
from honing.interop.configs.oumi_peft import PEFT_DEFAULT_TARGETS
from honing.interop.configs.schema_table import Entry, finish
from honing.interop.configs.translation import Keys, Translation
from honing.interop.configs.trl_args import translate_trl_args
from honing.interop.configs.trl_cli_table import TABLES
from honing.interop.configs.trl_method_keys import class_default, class_fields

SOURCE, KEYS = key_table("trl_script")

# --from NAME -> TRL's config class: the `trl` CLI's commands (1.16), then ORPO / CPO / GKD, whose example scripts
# (examples/scripts/{orpo,cpo,gkd}.py) parse the same files
COMMANDS = {
    "trl-sft": "SFTConfig",
    "trl-dpo": "DPOConfig",
    "trl-kto": "KTOConfig",
    "trl-reward": "RewardConfig",
    "trl-grpo": "GRPOConfig",
    "trl-rloo": "RLOOConfig",
    "trl-orpo": "ORPOConfig",
    "trl-cpo": "CPOConfig",
    "trl-gkd": "GKDConfig",
}
CLI_COMMANDS = ("trl-sft", "trl-dpo", "trl-kto", "trl-reward", "trl-grpo", "trl-rloo")  # what `trl` itself runs
ONLINE = {"GRPOConfig": ("GRPOScriptArguments", "grpo"), "RLOOConfig": ("RLOOScriptArguments", "rloo")}
# TRL's reward names (its grpo.py / rloo.py registry): they read a `solution` column honing's rows do not carry
TRL_REWARDS = ("accuracy_reward", "reasoning_accuracy_reward", "think_format_reward", "get_soft_overlong_punishment")
# accelerate_config's profiles shipped with TRL (trl/accelerate_configs/*.yaml): ZeRO stages, FSDP, plain DDP
ZERO_PROFILES = {"zero1": 1, "zero2": 2, "zero3": 3}
LAUNCHER_KEYS = ("num_processes", "accelerate_config", "env")
SHAPE_KEYS = ("model_name_or_path", "dataset_name", "datasets")


def is_trl_cli(raw: dict[str, Any]) -> bool:
    """A TRL CLI file: ``ModelConfig``'s ``model_name_or_path`` or the script's data set at the top level (checked
    after LLaMA-Factory's, whose files have ``model_name_or_path`` too)."""
    return any(key in raw for key in SHAPE_KEYS)


def script_groups(config_class: str) -> list[str]:
    """The dataclasses TRL's script for ``config_class`` parses beside it."""
    arguments = ["ScriptArguments"] + ([ONLINE[config_class][0]] if config_class in ONLINE else [])
    return [*arguments, "ModelConfig", "DatasetMixtureConfig"]


def script_keys(config_class: str) -> dict[str, tuple[str, str]]:
    """Every script, model and mixture field: key -> (type, default)."""
    return {key: value for group in script_groups(config_class) for key, value in KEYS[group].items()}


def script_table(config_class: str) -> dict[str, Entry]:
    """Every script, model and mixture field with its verdict."""
    return {key: value for group in script_groups(config_class) for key, value in TABLES[group].items()}


def trl_command(raw: dict[str, Any], source: str) -> str:
    """The ``--from`` name for a TRL CLI file given without one: the one `trl` command whose trainer has every key of
    the file; a ConfigError naming the candidates when several do."""
    every = {key for group in KEYS.values() for key in group}
    own = [key for key in raw if key not in every and key not in LAUNCHER_KEYS]
    rewards = any(key in raw for key in KEYS["GRPOScriptArguments"])
    fits = [
        command
        for command in CLI_COMMANDS
        if all(key in class_fields(COMMANDS[command]) for key in own) and (not rewards or COMMANDS[command] in ONLINE)
    ]
    if len(fits) == 1:
        return fits[0]
    if not fits:
        raise ConfigError(
            f"{source}: a TRL CLI config whose keys fit no trainer's config ({', '.join(own)}); give the trainer "
            f"with --from ({'|'.join(COMMANDS)}) to see which key is wrong"
        )
    raise ConfigError(
        f"{source}: a TRL CLI config, which does not say its trainer (its keys fit {', '.join(fits)}); give it with "
        f"--from, e.g. honing train {source} --from {fits[0]}"
    )


def translate_trl_cli(raw: dict[str, Any], command: str) -> Translation:
    """honing's config for a TRL CLI file run by ``trl <command>`` (``command``: a ``COMMANDS`` name)."""
    config_class = COMMANDS[command]
    fields = script_keys(config_class)
    script = {key: value for key, value in raw.items() if key in fields}
    launcher = {key: value for key, value in raw.items() if key in LAUNCHER_KEYS}
    trainer = {key: value for key, value in raw.items() if key not in fields and key not in LAUNCHER_KEYS}
    weights = trainer.pop("reward_weights", None) if config_class in ONLINE else None
    processes = launcher.get("num_processes")
    t = translate_trl_args(trainer, config_class, processes if isinstance(processes, int) and processes > 0 else None)
    t.dialect = f"TRL `trl {command.removeprefix('trl-')}`"
    keys = t.section(script, "")
    eval_strategy = str(raw.get("eval_strategy") or class_default(config_class, "eval_strategy")).lower()
    translate_model(t, keys, config_class)
    translate_data(t, keys, evaluate=eval_strategy != "no")
    if config_class in ONLINE:
        translate_rewards(t, keys, ONLINE[config_class][1], weights)
    translate_launcher(t, t.section(launcher, ""))
    finish(keys, script_table(config_class), fields, f"TRL's `trl {command.removeprefix('trl-')}` ({SOURCE})")
    return t


def translate_model(t: Translation, keys: Keys, config_class: str) -> None:
    """``ModelConfig``: the model and its revision, dtype and attention; LoRA with ``use_peft``; quantization."""
    name = keys.take("model_name_or_path")
    if not isinstance(name, str) or not name:
        t.refuse("model_name_or_path", "required: a Hugging Face model name or folder")
    else:
        t.set("model.name_or_path", name)
    revision = keys.take("model_revision", "main")
    if revision != "main":  # TRL's script: model_init_kwargs (the trainer config's) win over ModelConfig's
        t.set("model.load_kwargs", {"revision": str(revision), **(t.get("model.load_kwargs") or {})})
    dtype = keys.take("dtype")
    if dtype == "auto":
        t.refuse("dtype", "'auto' is not available: give the weights' dtype (bfloat16, float16 or float32)")
    elif dtype not in (None, "float32"):  # float32: weights in fp32 under the trainer's autocast, honing's too
        set_precision(t, "dtype", str(dtype))
    attention = keys.take("attn_implementation")
    if attention is not None:
        set_attention(t, "attn_implementation", str(attention))
    translate_lora(t, keys, config_class)
    four, eight = keys.take("load_in_4bit"), keys.take("load_in_8bit")
    if four and eight:
        t.refuse("load_in_4bit", "and load_in_8bit: give one (TRL refuses both too)")
    elif eight:
        t.set("model.quantize", "int8")
    elif four:
        kind = keys.allow("bnb_4bit_quant_type", ("nf4", "fp4"), "is not available: honing's 4-bit codes are nf4, fp4")
        t.set("model.quantize", kind or "nf4")  # TRL's ModelConfig default: nf4
    if not four and keys.peek("bnb_4bit_quant_type", "nf4") != "nf4":
        t.note("bnb_4bit_quant_type", "unused without load_in_4bit (as in TRL)")
    keys.take("bnb_4bit_quant_type")


def translate_lora(t: Translation, keys: Keys, config_class: str) -> None:
    """``use_peft`` with ``lora_*`` as ``model.lora`` (TRL's defaults filled in); without it, full fine-tuning."""
    if not keys.take("use_peft"):  # TRL's get_peft_config reads none of the LoRA keys then
        unused = [key for key in KEYS["ModelConfig"] if key.startswith(("lora_", "use_rslora", "use_dora"))]
        given = [key for key in unused if keys.peek(key) not in (None, False)]
        if given:
            t.note("use_peft", f"not set, so {', '.join(given)} unused: TRL fine-tunes every weight (as here)")
        keys.taken.update(unused)
        return
    whose = "TRL's ModelConfig."
    lora = lora_numbers(keys)
    targets = keys.names("lora_target_modules")
    if targets is not None:
        lora["target_modules"] = "all-linear" if targets == ["all-linear"] else targets
    modules_to_save = keys.names("lora_modules_to_save")
    if modules_to_save:
        lora["modules_to_save"] = modules_to_save
    task_type = keys.take("lora_task_type", "CAUSAL_LM")
    if task_type != "CAUSAL_LM":  # TRL's default; honing's is the method's own (SEQ_CLS for a reward model)
        lora["task_type"] = str(task_type)
    t.set("model.lora", lora)
    for key, value, name in (("rank", 16, "lora_r"), ("alpha", 32.0, "lora_alpha"), ("dropout", 0.05, "lora_dropout")):
        if key not in lora:
            t.default(f"model.lora.{key}", value, f"{whose}{name}")
    if "target_modules" not in lora:
        t.default("model.lora.target_modules", PEFT_DEFAULT_TARGETS, "peft's default for Llama / Qwen / Mistral models")


def translate_data(t: Translation, keys: Keys, *, evaluate: bool) -> None:
    """``dataset_name`` (its train split; its test split when the run evaluates, as TRL's script) or the mixture
    ``datasets`` (which wins, as in TRL)."""
    mixture = keys.take("datasets")
    name, subset = keys.take("dataset_name"), keys.take("dataset_config")
    train_split, test_split = keys.take("dataset_train_split", "train"), keys.take("dataset_test_split", "test")
    if mixture:
        if name is not None:
            t.note("dataset_name", "unused: datasets is given (TRL's script reads datasets then)")
        translate_mixture(t, keys, mixture, evaluate=evaluate)
        return
    keys.take("test_split_size")
    if not isinstance(name, str) or not name:
        t.refuse("dataset_name", "required (or datasets): a hub data set's name or a data set folder")
        return
    for split, path in ((train_split, "data.train"), (test_split, "data.validation")):
        source: dict[str, Any] = {"path": f"{name}:{split}"}
        if subset is not None:
            source["subset"] = str(subset)
        if path == "data.train" or evaluate:
            t.set(path, {"sources": [source]})


def translate_mixture(t: Translation, keys: Keys, mixture: Any, *, evaluate: bool) -> None:
    """``datasets``: each item's path, name and split as one source; ``test_split_size`` as the held-out fraction."""
    if not isinstance(mixture, list):
        t.refuse("datasets", f"{mixture!r}: expected a list of data sets (path, name, split, ...)")
        return
    sources = []
    for index, item in enumerate(mixture):
        dataset = t.section(item, f"datasets[{index}]")
        path = dataset.take("path")
        if not isinstance(path, str) or not path:
            t.refuse(dataset.key("path"), "required: a hub data set's name or a data set folder")
            continue
        source: dict[str, Any] = {"path": f"{path}:{dataset.take('split', 'train')}"}
        if dataset.has("name"):
            source["subset"] = str(dataset.take("name"))
        sources.append(source)
        finish(dataset, TABLES["DatasetConfig"], KEYS["DatasetConfig"], f"TRL's DatasetConfig ({SOURCE})")
    if sources:
        t.set("data.train", {"sources": sources})
    size = keys.number("test_split_size", float)
    if evaluate and size is None:
        t.refuse("datasets", "with eval_strategy set, give test_split_size: TRL's script evaluates the mixture's test "
                             "split, which only test_split_size makes")  # fmt: skip
    elif evaluate and size is not None:
        t.set("data.validation_split", size)


def translate_rewards(t: Translation, keys: Keys, section: str, weights: Any) -> None:
    """``reward_model_name_or_path`` then ``reward_funcs`` (TRL's order) as ``<section>.rewards``, weighted by the
    trainer config's ``reward_weights``."""
    rewards: list[dict[str, Any]] = []
    model = keys.take("reward_model_name_or_path")
    if model is not None:
        rewards.append({"name": f"reward_model:{model}"})
    for name in keys.names("reward_funcs") or []:
        if name in TRL_REWARDS:
            why = "TRL's own reward is not in honing (it reads a `solution` column)"
            t.refuse("reward_funcs", f"{name!r}: {why}; name an import path (package.module.function)")
        elif "." in name:  # TRL imports a.b.f from the working directory; honing's a.b:f the same way
            rewards.append({"name": ":".join(name.rsplit(".", 1))})
        else:
            t.refuse("reward_funcs", f"{name!r}: expected an import path (package.module.function)")
    if weights is not None:
        if not isinstance(weights, list) or len(weights) != len(rewards):
            t.refuse("reward_weights", f"{weights!r}: expected one weight per reward ({len(rewards)})")
        else:
            for reward, weight in zip(rewards, weights):
                reward["weight"] = float(weight)
    if rewards:
        t.set(f"{section}.rewards", rewards)


def translate_launcher(t: Translation, launcher: Keys) -> None:
    """The keys TRL hands to ``accelerate launch``: processes (honing's ``--nproc``) and an accelerate profile."""
    processes = launcher.take("num_processes")
    if processes is not None:
        t.note("num_processes", f"{processes}: start the processes with `honing train FILE --nproc {processes}`")
    profile = launcher.take("accelerate_config")
    if profile in ZERO_PROFILES:
        translate_deepspeed_file(t, "accelerate_config", {"zero_optimization": {"stage": ZERO_PROFILES[profile]}}, None)
    elif profile in ("fsdp1", "fsdp2"):
        translate_fsdp_config(t, "accelerate_config", {})
    elif profile == "multi_gpu":
        t.set("parallel.strategy", "ddp")
    elif profile not in (None, "single_gpu"):
        profiles = "zero1, zero2, zero3, fsdp1, fsdp2, multi_gpu"
        why = f"an accelerate config file is not read; give honing's parallel.* keys (or a TRL profile: {profiles})"
        t.refuse("accelerate_config", f"{profile!r}: {why}")
    if launcher.has("env"):
        launcher.refuse("env", "not read: set these variables in the shell that runs honing train")
    launcher.done()
