"""Oumi's data and model options as honing's keys (or one note where honing's own engine makes them moot), and one
refusal line by name for what honing cannot do."""

import copy
import re

import pytest

from honing.config import validate
from honing.interop.configs import translate

BASE = {
    "model": {"model_name": "Qwen/Qwen2.5-0.5B-Instruct", "torch_dtype_str": "bfloat16"},
    "data": {"train": {"datasets": [{"dataset_name": "yahma/alpaca-cleaned"}]}},
    "training": {"trainer_type": "TRL_SFT", "use_peft": True},
    "peft": {"lora_r": 8, "lora_target_modules": ["q_proj", "v_proj"]},
}


def with_changes(**changes):
    """``BASE`` with dotted keys set (``data.train.datasets.0.split``: list items by index)."""
    raw = copy.deepcopy(BASE)
    for path, value in changes.items():
        *parents, last = path.split(".")
        node = raw
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
        node[int(last) if isinstance(node, list) else last] = value
    return raw


def translated(**changes):
    """The translation of ``BASE`` with ``changes``, checked to have no refusal and to validate."""
    translation = translate(with_changes(**changes))
    assert translation.refused == []
    validate(translation.config, source="oumi")
    return translation


def noted(translation, key):
    """The note about ``key`` (exactly one)."""
    found = [note for note in translation.notes if note.startswith(f"{key}:")]
    assert len(found) == 1, (key, translation.notes)
    return found[0]


def refusals(**changes):
    """The refusal lines of ``BASE`` with ``changes``."""
    return translate(with_changes(**changes)).refused


def test_hub_split_slices_and_dataset_limits_become_max_samples():
    translation = translated(
        **{"data.train.datasets.0.split": "train[:1000]", "data.train.datasets.0.sample_count": 50}
    )
    assert translation.config["data"]["train"]["sources"] == [{"path": "yahma/alpaca-cleaned:train", "max_samples": 50}]
    translation = translated(**{"data.train.datasets.0.split": "validation[:512]"})
    assert translation.config["data"]["train"]["sources"][0] == {
        "path": "yahma/alpaca-cleaned:validation",
        "max_samples": 512,
    }
    # any other slice datasets reads stays in the path (tests/data/test_split_slices.py reads it as datasets does)
    translation = translated(**{"data.train.datasets.0.split": "train[10%:]"})
    assert translation.config["data"]["train"]["sources"][0] == {"path": "yahma/alpaca-cleaned:train[10%:]"}
    assert refusals(**{"data.train.datasets.0.split": "train[1:2:3]"})[0].startswith(
        "data.train.datasets[0].split: 'train[1:2:3]' is no split slice datasets reads"
    )


def test_data_options_honing_has_or_makes_moot():
    dataset = {
        "dataset_name": "yahma/alpaca-cleaned",
        "shuffle": True,
        "seed": 42,
        "trust_remote_code": True,
        "transform_num_workers": "auto",
        "mixture_proportion": 1.0,
        "dataset_kwargs": {"return_tensors": True, "limit": 64},
    }
    translation = translated(**{"data.train.datasets": [dataset], "data.train.use_torchdata": True})
    assert translation.config["data"]["train"]["sources"] == [{"path": "yahma/alpaca-cleaned:train", "max_samples": 64}]
    assert "data.shuffle" not in str(translation.config)  # the loader shuffles, as the trainer's sampler does
    for key in ("shuffle", "seed", "trust_remote_code", "transform_num_workers", "dataset_kwargs.return_tensors"):
        noted(translation, f"data.train.datasets[0].{key}")
    noted(translation, "data.train.use_torchdata")


def test_a_mixture_needs_every_proportion():
    two = [{"dataset_name": "a/b", "mixture_proportion": 0.5}, {"dataset_name": "c/d", "mixture_proportion": 0.5}]
    two[1].pop("mixture_proportion")
    assert refusals(**{"data.train.datasets": two})[0].startswith(
        "data.train.datasets[0].mixture_proportion: given for some datasets only"
    )


def test_what_honing_cannot_read_is_refused_by_name():
    assert refusals(**{"data.train.datasets.0.subset": 3})[0].startswith(
        "data.train.datasets[0].subset: 3: expected a dataset configuration's name"
    )
    assert refusals(**{"data.train.datasets.0.dataset_kwargs": {"made_up": 1}}) == [
        "data.train.datasets[0].dataset_kwargs.made_up: not translated: not an argument honing's readers take"
    ]


def test_collators_and_kwargs_say_which_tokens_train():
    completions = translated(**{"data.train.collator_name": "text_completions_only_with_padding"})
    assert completions.get("data.train_on") == "assistant" and completions.get("data.packing") is False
    assert translated(**{"data.train.datasets.0.dataset_kwargs": {"assistant_only": True}}).get("data.train_on") == (
        "assistant"
    )
    padding = translated(**{"data.train.collator_name": "text_with_padding"})
    assert padding.get("data.train_on") == "all"
    kwargs = {"response_template": "<|assistant|>", "instruction_template": "<|user|>"}
    translation = translated(
        **{"data.train.collator_name": "text_completions_only_with_padding", "data.train.collator_kwargs": kwargs}
    )
    noted(translation, "data.train.collator_kwargs.response_template")
    assert refusals(**{"data.train.train_target": "final_assistant_turn"})[0].startswith(
        "data.train.train_target: 'final_assistant_turn' is not available"
    )


@pytest.mark.parametrize(
    ("model_name", "template", "expected"),
    [
        ("Qwen/Qwen2.5-0.5B-Instruct", "auto", None),
        ("Qwen/Qwen2.5-0.5B-Instruct", "qwen2-instruct", None),  # the tokenizer's own: Qwen's template
        ("microsoft/Phi-3-mini-4k-instruct", "phi3-instruct", None),
        ("meta-llama/Llama-3.2-1B-Instruct", "llama3-instruct", "llama3"),
        ("HuggingFaceTB/SmolLM2-135M-Instruct", "chat_ml", "chatml"),
    ],
)
def test_oumi_chat_template_names(model_name, template, expected):
    translation = translated(**{"model.model_name": model_name, "model.chat_template": template})
    assert translation.get("data.chat_template") == expected


def test_a_family_template_for_another_family_is_refused():
    assert refusals(**{"model.model_name": "meta-llama/Llama-3.2-1B", "model.chat_template": "phi3-instruct"})[
        0
    ].startswith("model.chat_template: 'phi3-instruct' is not available for this model")


def test_model_options():
    translation = translated(
        **{
            "model.tokenizer_pad_token": "<|endoftext|>",
            "model.tokenizer_kwargs": {"pad_token": "<|pad|>"},
            "model.enable_liger_kernel": True,
            "model.model_kwargs": {"quantization_config": {"quant_method": "mxfp4"}},
        }
    )
    for key in ("tokenizer_pad_token", "tokenizer_kwargs.pad_token", "enable_liger_kernel"):
        noted(translation, f"model.{key}")
    assert "chunked_loss" in noted(translation, "model.enable_liger_kernel")
    assert translation.get("trainer.precision") == "bf16"
    fp16 = translated(**{"model.torch_dtype_str": "float16"})
    assert fp16.get("model.dtype") == "float16" and fp16.get("trainer.precision") is None
    assert "checkpoint's own dtype" in noted(translated(**{"model.torch_dtype_str": "auto"}), "model.torch_dtype_str")
    assert translated(**{"model.load_pretrained_weights": False}).get("model.pretrained_weights") is False
    assert refusals(**{"model.model_revision": "prequantized"})[0].startswith(
        "model.model_revision: 'prequantized': Falcon-E's BitNet"
    )


def test_qlora_keys_map_to_model_quantize():
    peft = {"q_lora": True, "q_lora_bits": 4, "bnb_4bit_quant_type": "nf4", "bnb_4bit_compute_dtype": "bfloat16",
            "bnb_4bit_quant_storage": "bfloat16", "use_bnb_nested_quant": True, "lora_r": 16}  # fmt: skip
    translation = translated(**{"peft": peft})
    assert translation.get("model.quantize") == "nf4" and translation.get("model.lora.rank") == 16
    for key in ("bnb_4bit_compute_dtype", "bnb_4bit_quant_storage", "use_bnb_nested_quant"):
        noted(translation, f"peft.{key}")
    assert refusals(**{"peft": {**peft, "bnb_4bit_compute_dtype": "float16"}})[0].startswith(
        "peft.bnb_4bit_compute_dtype: 'float16': honing's QLoRA computes in the run's dtype (bfloat16"
    )
    unused = translated(**{"peft": {"bnb_4bit_quant_type": "nf4", "q_lora": False}})
    assert translation.get("model.quantize") and unused.get("model.quantize") is None
    noted(unused, "peft")
    # Falcon-H1's QLoRA DPO recipe keeps its mamba out_proj unquantized; without q_lora Oumi ignores the list
    skipping = translated(**{"peft": {**peft, "llm_int8_skip_modules": ["out_proj"]}})
    assert skipping.get("model.quantize_skip_modules") == ["out_proj"]
    unquantized = translated(**{"peft": {"q_lora": False, "llm_int8_skip_modules": ["out_proj"]}})
    assert unquantized.get("model.quantize_skip_modules") is None
    assert "llm_int8_skip_modules" in noted(unquantized, "peft")


def test_lora_exclude_modules_leave_the_towers_out_as_oumis_joined_regex_does():
    translation = translated(**{"peft.lora_exclude_modules": [".*vision_tower.*", ".*audio_tower.*"]})
    pattern = translation.get("model.lora.target_modules")
    adapted = [name for name in (
        "model.language_model.layers.0.self_attn.q_proj", "model.language_model.layers.0.self_attn.v_proj",
        "model.language_model.layers.0.self_attn.k_proj", "model.vision_tower.encoder.layers.0.self_attn.q_proj",
        "model.audio_tower.layers.1.self_attn.v_proj", "q_proj",
    ) if re.fullmatch(pattern, name)]  # fmt: skip
    # peft fully matches a string target against each module's name
    assert adapted == [
        "model.language_model.layers.0.self_attn.q_proj",
        "model.language_model.layers.0.self_attn.v_proj",
        "q_proj",
    ]
    experts = ["7.mlp.experts.gate_up_proj", "7.mlp.experts.down_proj"]  # gpt-oss's recipe
    assert translated(**{"peft.lora_target_parameters": experts}).get("model.lora.target_parameters") == experts
    assert translated(**{"peft.lora_target_modules": ["all-linear"]}).get("model.lora.target_modules") == "all-linear"


def test_optimizers_keep_only_their_own_settings():
    sgd = translated(**{"training.optimizer": "sgd", "training.adam_beta1": 0.8})
    assert sgd.get("optim.name") == "sgd" and sgd.get("optim.momentum") == 0.0  # Oumi's sgd_momentum default
    assert sgd.get("optim.betas") is None and sgd.get("optim.eps") is None
    noted(sgd, "training.adam_beta1")
    paged = translated(**{"training.optimizer": "paged_adamw_8bit"})
    assert paged.get("optim.name") == "adamw" and paged.get("optim.state_dtype") == "int8"
    assert refusals(**{"training.optimizer": "lion_8bit"})[0].startswith("training.optimizer: 'lion_8bit'")


def test_moot_training_keys_are_notes_and_trainer_kwargs_map():
    training = {
        "trainer_type": "TRL_SFT",
        "empty_device_cache_steps": 50,
        "dataloader_main_process_only": True,
        "gradient_checkpointing_kwargs": {"use_reentrant": False},
        "enable_gradient_checkpointing": True,
        "lr_scheduler_type": "cosine",
        "lr_scheduler_kwargs": {"num_cycles": 0.5},
        "trainer_kwargs": {"max_length": 2048},
        "save_final_model": False,
    }
    translation = translated(**{"training": training})
    moot = ("empty_device_cache_steps", "dataloader_main_process_only", "gradient_checkpointing_kwargs.use_reentrant")
    for key in (*moot, "save_final_model"):
        noted(translation, f"training.{key}")
    assert translation.get("data.seq_len") == 2048 and translation.get("parallel.activation_checkpointing") == "full"
    dpo = {"trainer_type": "TRL_DPO", "trainer_kwargs": {"beta": 0.2, "max_length": 512}}
    translation = translate(with_changes(training=dpo, **{"data.train.datasets.0.dataset_name": "mlabonne/orpo"}))
    assert translation.get("dpo.beta") == 0.2 and translation.get("data.seq_len") == 512


@pytest.mark.parametrize(
    ("changes", "method", "refused"),
    [
        ({"training.trainer_type": "TRL_KTO"}, "kto", None),
        ({"training.trainer_type": "TRL_GKD"}, "distill", None),
        ({"training.trainer_type": "TRL_DPO", "data.train.datasets.0.dataset_name": "openbmb/RLAIF-V-Dataset"},
         "vl_dpo", None),
        ({"training.trainer_type": "TRL_SFT", "data.train.datasets.0.dataset_name": "HuggingFaceFW/fineweb-edu"},
         "pretrain", None),
        ({"training.trainer_type": "TRL_SFT", "data.train.pack": True}, "pretrain", None),
        ({"data.train.datasets.0.dataset_kwargs": {"processor_name": BASE["model"]["model_name"]}}, "vl_sft", None),
    ],
)  # fmt: skip
def test_the_method_follows_trainer_and_data_and_a_missing_method_is_refused_by_name(changes, method, refused):
    translation = translate(with_changes(**changes))
    if refused:
        assert translation.refused[0].startswith(refused)
    else:
        assert translation.config["method"] == method


def test_shuffle_with_sample_count_is_the_sources_seeded_subset():
    keys = {"data.train.datasets.0.shuffle": True, "data.train.datasets.0.sample_count": 5}
    seeded = translated(**keys, **{"data.train.datasets.0.seed": 11})
    assert seeded.refused == []
    source = seeded.get("data.train.sources")[0]
    assert source["max_samples"] == 5 and source["sample_seed"] == 11
    unseeded = translated(**keys)  # Oumi's seed None: another subset each run; honing fixes one
    assert unseeded.get("data.train.sources")[0]["sample_seed"] == 0
    noted(unseeded, "data.train.datasets[0].seed")
    head = translated(**{"data.train.datasets.0.sample_count": 5})
    assert "sample_seed" not in head.get("data.train.sources")[0]
    noted(head, "data.train.datasets[0].sample_count")
