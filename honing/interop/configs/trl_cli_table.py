"""The verdicts of the fields TRL's CLI reads beside a trainer's config (``key_table("trl_script")``): the script's
arguments (the data set, GRPO's and RLOO's rewards), ``ModelConfig`` (the model, LoRA, quantization) and the data set
mixture. ``trl_cli.py`` reads the honoured ones; the launcher's own keys (``num_processes``, ``accelerate_config``)
are read there too."""

from __future__ import annotations

from honing.interop.configs.schema_table import Entry, honoured, moot, refused

STREAMING = (
    "honing reads sources whole (the same rows); for a corpus larger than memory, `honing prepare` streams it into "
    "token shards first"
)
REWARDS = (
    "<section>.rewards: an import path (a.b.f → a.b:f) or a reward model (reward_model:PATH, weight from "
    "reward_weights); TRL's own reward names are refused (honing's built-ins read other columns)"
)

SCRIPT: dict[str, Entry] = {
    **honoured("data.train.sources[].path (NAME:SPLIT)", "dataset_name", "dataset_train_split"),
    **honoured("data.train.sources[].subset", "dataset_config"),
    **honoured(
        "data.validation.sources[].path (NAME:SPLIT) when eval_strategy is not 'no', as TRL's script",
        "dataset_test_split",
    ),  # fmt: skip
    **moot(STREAMING, "dataset_streaming"),
    **moot(
        "not needed: a fix for DDP's broadcast of bias buffers; honing's FSDP2 / DDP wrap no such buffers",
        "ignore_bias_buffers",
    ),  # fmt: skip
}
REWARD_SCRIPT: dict[str, Entry] = honoured(REWARDS, "reward_funcs", "reward_model_name_or_path")
MODEL: dict[str, Entry] = {
    **honoured("model.name_or_path (required)", "model_name_or_path"),
    **honoured("model.load_kwargs.revision", "model_revision"),
    **honoured("model.dtype (float32: the weights stay float32 under trainer.precision, as TRL's)", "dtype"),
    **honoured("model.attn_implementation", "attn_implementation"),
    **honoured("model.lora (unset: full fine-tuning, as TRL's)", "use_peft"),
    **honoured(
        "model.lora.rank / alpha / dropout (TRL's 16 / 32 / 0.05 filled in)", "lora_r", "lora_alpha", "lora_dropout"
    ),  # fmt: skip
    **honoured(
        "model.lora.target_modules (unset: peft's default for Llama / Qwen, q_proj and v_proj)", "lora_target_modules"
    ),  # fmt: skip
    **honoured("model.lora.modules_to_save", "lora_modules_to_save"),
    **honoured("model.lora.task_type", "lora_task_type"),
    **refused(
        "not available: LoRA on parameters (peft's target_parameters); honing adapts modules "
        "(model.lora.target_modules)",
        "lora_target_parameters",
    ),  # fmt: skip
    **refused("not available: honing's LoRA scales by alpha / rank (no rank-stabilised LoRA)", "use_rslora"),
    **refused("not available: honing's LoRA has no DoRA magnitude vector", "use_dora"),
    **honoured("model.quantize: int8", "load_in_8bit"),
    **honoured("model.quantize: nf4 / fp4", "load_in_4bit", "bnb_4bit_quant_type"),
    **moot(
        "honing's 4-bit weights always quantize their scales too (torchao's double quantization)",
        "use_bnb_nested_quant",
    ),
    **moot(
        "not needed: the dtype bitsandbytes packs 4-bit weights in for FSDP1; honing's 4-bit weights shard as they are",
        "bnb_4bit_quant_storage",
    ),  # fmt: skip
}
MIXTURE: dict[str, Entry] = {
    **honoured(
        "data.train.sources (each item's path, name, split; dataset_name is then unused, as in TRL)", "datasets"
    ),  # fmt: skip
    **moot(STREAMING, "streaming"),
    **honoured("data.validation_split (a fraction; when eval_strategy is not 'no')", "test_split_size"),
}
DATASET: dict[str, Entry] = {
    **honoured("data.train.sources[].path (PATH:SPLIT)", "path", "split"),
    **honoured("data.train.sources[].subset", "name"),
    **refused(
        "not available: honing reads a hub data set, a file or a folder (give its path)", "data_dir", "data_files"
    ),  # fmt: skip
    **refused("not available: honing reads the columns a row's format names; drop others before", "columns"),
    **refused("not available: give data.train.sources[].weight (a multiple of the source's own rows)", "fraction"),
}
TABLES: dict[str, dict[str, Entry]] = {
    "ScriptArguments": SCRIPT,
    "GRPOScriptArguments": REWARD_SCRIPT,
    "RLOOScriptArguments": REWARD_SCRIPT,
    "ModelConfig": MODEL,
    "DatasetMixtureConfig": MIXTURE,
    "DatasetConfig": DATASET,
}
