"""Oumi's training-methods document as honing reads it: the document's own rows (a conversation with an image, a
pretraining document, a DPO pair, TRL's and verl's GRPO rows) and its own configs (SFT, vision-language SFT,
pretraining, DPO, TRL_GRPO, VERL_GRPO). Each test proves rows of docs/coming-from.md's Oumi section."""

from __future__ import annotations

import copy

from honing.config import validate
from honing.data.formats import ContentItem, Conversation, Message, PlainText, to_example
from honing.data.preference.pairs import PreferencePair, to_pair
from honing.data.prompts.prompts import to_prompt
from honing.interop.configs import translate
from honing.rl import resolve_reward

IMAGE = "https://oumi.ai/the_great_wave_off_kanagawa.jpg"
ANSWER = "The image is a traditional Japanese ukiyo-e print."
# the document's rows, as it writes them
VL_ROW = {
    "messages": [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "content": IMAGE},
                {"type": "text", "content": "What is in this image?"},
            ],
        },
        {"role": "assistant", "content": ANSWER},
    ]
}
DPO_ROW = {
    "messages": [{"role": "user", "content": "Write a story about a robot"}],
    "chosen": {"messages": [{"role": "assistant", "content": "In the year 2045, a robot named..."}]},
    "rejected": {"messages": [{"role": "assistant", "content": "There was this robot who..."}]},
}
LETTER_COUNT_ROW = {
    "prompt": [
        {"content": 'Your final answer should be an integer written as digits and formatted as "\\boxed{your_answer}".',
         "role": "system"},
        {"content": "Could you determine the count of 'l's in 'substantial'?", "role": "user"},
    ],
    "letter_count": 1,
}  # fmt: skip
COUNTDOWN_ROW = {
    "ability": "math",
    "data_source": "countdown",
    "extra_info": {"split": "train"},
    "prompt": [{"content": "Using the numbers [79, 8], create an equation that equals 87.", "role": "user"}],
    "reward_model": {"ground_truth": {"numbers": [79, 8], "target": 87}, "style": "rule"},
}
# the document's configs, as it writes them
SFT = {
    "data": {
        "train": {
            "datasets": [{"dataset_name": "text_sft", "dataset_path": "/path/to/data", "split": "train"}],
            "collator_name": "text_with_padding",
        }
    },
    "training": {"trainer_type": "TRL_SFT"},
}
VL_MODEL = "meta-llama/Llama-3.2-11B-Vision-Instruct"
VL_SFT = {
    "model": {"model_name": VL_MODEL, "chat_template": "llama3-instruct", "freeze_layers": ["vision_encoder"]},
    "data": {
        "train": {
            "collator_name": "vision_language_with_padding",
            "collator_kwargs": {},
            "datasets": [
                {
                    "dataset_name": "vl_sft_jsonl",
                    "dataset_path": "/path/to/data",
                    "trust_remote_code": False,
                    "dataset_kwargs": {"processor_name": VL_MODEL},
                }
            ],
        }
    },
    "training": {"trainer_type": "TRL_SFT"},
}
PRETRAINING = {
    "data": {
        "train": {
            "datasets": [
                {
                    "dataset_name": "text",
                    "dataset_path": "/path/to/corpus",
                    "streaming": True,
                    "pack": True,
                    "max_length": 2048,
                }
            ]
        }
    },
    "training": {"trainer_type": "OUMI"},
}
DPO = {
    "data": {
        "train": {
            "datasets": [{"dataset_name": "preference_pairs_jsonl", "dataset_path": "/path/to/data"}],
            "collator_name": "dpo_with_padding",
        }
    },
    "training": {"trainer_type": "TRL_DPO"},
}
# training.grpo.use_vllm: True left out (its row is being reworked beside this test: honing's own decoder samples)
TRL_GRPO = {
    "model": {"model_name": "Qwen/Qwen2-0.5B-Instruct"},
    "data": {"train": {"datasets": [{"dataset_name": "trl-lib/tldr", "split": "train"}]}},
    "training": {"trainer_type": "TRL_GRPO", "reward_functions": ["soft_20tokens_completions"]},
}
VERL_GRPO = {
    "model": {"model_name": "Qwen/Qwen2-0.5B-Instruct"},
    "data": {"train": {"datasets": [{"dataset_name": "Jiayi-Pan/Countdown-Tasks-3to4", "split": "train"}]}},
    "training": {
        "trainer_type": "VERL_GRPO",
        "reward_functions": ["countdown"],
        "verl_config_overrides": {"data": {"train_batch_size": 128}},
    },
}


def translated(raw, **training):
    """The translation of ``raw`` with ``training.*`` keys added (and a model where the document's snippet names
    none): no refusal, and honing's schema accepts it."""
    raw = copy.deepcopy(raw)
    raw.setdefault("model", {"model_name": "some/model"})
    raw.setdefault("training", {}).update(training)
    translation = translate(raw)
    assert translation.refused == [], translation.refused
    validate(translation.config, source="oumi")
    return translation


def noted(translation, key):
    """The note about ``key`` (exactly one)."""
    found = [note for note in translation.notes if note.startswith(f"{key}:")]
    assert len(found) == 1, (key, translation.notes)
    return found[0]


def test_the_documents_conversation_is_honings_with_the_same_classes():
    message = Message(
        role="user",
        content=[
            ContentItem(type="image_url", content=IMAGE),
            ContentItem(type="text", content="What is in this image?"),
        ],
    )
    # Oumi's Role.USER / Type.IMAGE_URL are honing's "user" / "image_url"
    assert to_example(VL_ROW, "conversation") == Conversation(
        messages=[message, Message(role="assistant", content=ANSWER)]
    )
    for kind in ("image_path", "image_base64"):
        assert ContentItem(type=kind, content="x").type == kind


def test_the_documents_pretraining_and_preference_rows():
    assert to_example({"text": "Document text for pretraining..."}, "text") == PlainText(
        text="Document text for pretraining..."
    )
    assert to_pair(DPO_ROW, "preference") == PreferencePair(
        DPO_ROW["messages"], DPO_ROW["chosen"]["messages"], DPO_ROW["rejected"]["messages"]
    )


def test_the_documents_grpo_rows_keep_their_columns_for_the_rewards():
    letters = to_prompt(LETTER_COUNT_ROW, "prompt")
    assert letters.prompt == LETTER_COUNT_ROW["prompt"] and letters.columns == {"letter_count": 1}
    countdown = to_prompt(COUNTDOWN_ROW, "prompt")
    assert set(countdown.columns) == {"ability", "data_source", "extra_info", "reward_model"}
    columns = {key: [value] for key, value in countdown.columns.items()}
    score = resolve_reward("verl:countdown")
    assert score(prompts=["p"], completions=["<answer>79 + 8</answer>"], **columns) == [1.0]
    assert score(prompts=["p"], completions=["<answer>79 - 8</answer>"], **columns) == [0.0]


def test_the_documents_sft_config():
    config = translated(SFT).config
    assert config["method"] == "sft"
    assert config["data"]["train"] == {"sources": [{"path": "/path/to/data", "format": "conversation"}]}
    assert (config["data"]["packing"], config["data"]["train_on"]) == (False, "all")  # text_with_padding


def test_the_documents_vision_language_config():
    translation = translated(VL_SFT)
    config = translation.config
    assert config["method"] == "vl_sft" and config["model"]["freeze_layers"] == ["vision_encoder"]
    assert config["model"]["name_or_path"] == VL_MODEL and config["model"]["freeze_vision"] is False
    assert config["data"]["train"] == {"sources": [{"path": "/path/to/data", "format": "conversation"}]}
    assert "processor's own template" in noted(translation, "model.chat_template")
    noted(translation, "data.train.datasets[0].trust_remote_code")
    other = copy.deepcopy(VL_SFT)
    other["data"]["train"]["datasets"][0]["dataset_kwargs"]["processor_name"] = "another/processor"
    translation = translate(other)  # Oumi builds the image rows' processor from it: so does honing
    assert translation.refused == []
    assert (translation.config["tokenizer"]["kind"], translation.config["tokenizer"]["path"]) == (
        "pretrained",
        "another/processor",
    )


def test_the_documents_pretraining_config():
    translation = translated(PRETRAINING)
    config = translation.config
    assert config["method"] == "pretrain" and config["data"]["seq_len"] == 2048  # max_length
    assert config["data"]["train"] == {"sources": [{"path": "/path/to/corpus"}]}
    assert "honing prepare" in noted(translation, "data.train.datasets[0].streaming")
    assert "data.shuffle" not in translation.defaults  # a dataset's streaming: the rows are still shuffled
    stream = copy.deepcopy(PRETRAINING)
    stream["data"]["train"]["stream"] = True  # the split's stream: the file's order, as Oumi's trainer sees it
    assert translated(stream).get("data.shuffle") is False


def test_the_documents_dpo_config():
    translation = translated(DPO)
    assert translation.config["method"] == "dpo"
    assert translation.config["data"]["train"] == {"sources": [{"path": "/path/to/data", "format": "preference"}]}
    assert "honing's DPO collate" in noted(translation, "data.train.collator_name")


def test_the_documents_grpo_configs_name_their_rewards():
    trl = translated(TRL_GRPO)
    assert trl.config["method"] == "grpo" and trl.get("grpo.rewards") == [{"name": "soft_20tokens_completions"}]
    assert trl.get("data.train.sources") == [{"path": "trl-lib/tldr:train"}]
    verl = translated(VERL_GRPO)
    assert verl.config["method"] == "grpo" and verl.get("grpo.rewards") == [{"name": "verl:countdown"}]
    assert verl.get("data.global_batch_size") == 128  # verl_config_overrides.data.train_batch_size


def test_grpo_keys():
    grpo = {"max_completion_length": 64, "num_generations": 4, "temperature": 0.7, "epsilon": 0.3,
            "max_prompt_length": 100}  # fmt: skip
    translation = translated(TRL_GRPO, grpo=grpo, per_device_train_batch_size=8, gradient_accumulation_steps=2)
    assert {key: translation.get(f"grpo.{key}") for key in grpo if key != "max_prompt_length"} == {
        "max_completion_length": 64,
        "num_generations": 4,
        "temperature": 0.7,
        "epsilon": 0.3,
    }
    assert translation.get("data.seq_len") == 100 + 64  # prompt + completion
    assert translation.get("data.batch_size_per_rank") == 8 * 2 // 4  # TRL counts completions per device: prompts


def test_verl_config_overrides_map_to_honings_keys_and_others_are_refused_by_name():
    overrides = {
        "data": {"max_response_length": 128, "max_prompt_length": 64},
        "actor_rollout_ref": {
            "rollout": {"n": 4, "temperature": 0.8, "top_p": 0.9, "top_k": -1},
            "actor": {"optim": {"lr": 1e-6}, "clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "kl_loss_coef": 0.01,
                      "loss_agg_mode": "token-mean"},
        },
        "algorithm": {"norm_adv_by_std_in_grpo": False},
        "trainer": {"total_training_steps": 30, "save_freq": 10, "default_local_dir": "runs/verl",
                    "experiment_name": "countdown", "logger": ["console", "wandb"]},
    }  # fmt: skip
    raw = copy.deepcopy(VERL_GRPO)
    raw["training"]["verl_config_overrides"] = overrides
    translation = translated(raw)
    expected = {
        "grpo.max_completion_length": 128, "data.seq_len": 64 + 128, "grpo.num_generations": 4,
        "grpo.temperature": 0.8, "grpo.top_p": 0.9, "grpo.top_k": 0, "optim.lr": 1e-6, "grpo.epsilon": 0.2,
        "grpo.epsilon_high": 0.28, "grpo.beta": 0.01, "grpo.loss_type": "dapo", "grpo.scale_rewards": "none",
        "trainer.max_duration": "30steps", "callbacks.checkpointer.save_interval": 10,
        "trainer.save_folder": "runs/verl", "run_name": "countdown", "callbacks.wandb.enabled": True,
    }  # fmt: skip
    assert {path: translation.get(path) for path in expected} == expected
    overrides["actor_rollout_ref"]["actor"]["use_kl_loss"] = False
    assert translated(raw).get("grpo.beta") == 0.0
    for key, value, why in (  # each key's row in verl_table says why, and what to give instead
        (
            "actor_rollout_ref.actor.entropy_coeff",
            0.01,
            "not available: the entropy bonus; honing's GRPO loss has none",
        ),
        ("trainer.resume_mode", "latest", "verl's modes are auto, disable and resume_path"),
        (
            "actor_rollout_ref.model.hf_config_path",
            "cfg",
            "not available: honing reads the model's config from model.path (or model.config_overrides)",
        ),
        ("algorithm.adv_estimator", "gae", "not translated (honing's GRPO has no such setting)"),
    ):
        section, *parents, last = key.split(".")
        nested = {last: value}
        for part in reversed(parents):
            nested = {part: nested}
        raw["training"]["verl_config_overrides"] = {section: nested}
        assert translate(raw).refused == [f"training.verl_config_overrides.{key}: {value!r}: {why}"]
    # a setting of verl's engine is noted; at verl's default it asks for nothing
    raw["training"]["verl_config_overrides"] = {"actor_rollout_ref": {"rollout": {"gpu_memory_utilization": 0.8}}}
    assert "inference engine" in noted(translated(raw), "training.verl_config_overrides.actor_rollout_ref.rollout."
                                       "gpu_memory_utilization")  # fmt: skip


def test_verl_train_files_in_the_overrides_are_the_splits_sources():
    """The document's advice: your own Parquet files as ``verl_config_overrides.data.train_files`` (and
    ``val_files``), over the datasets the file names; a value that is no path is refused by name."""
    raw = copy.deepcopy(VERL_GRPO)
    raw["training"]["verl_config_overrides"] = {"data": {"train_files": ["a.parquet", "b.parquet"],
                                                         "val_files": "valid.parquet"}}  # fmt: skip
    translation = translated(raw)
    assert translation.get("data.train.sources") == [{"path": "a.parquet"}, {"path": "b.parquet"}]
    assert translation.get("data.validation.sources") == [{"path": "valid.parquet"}]
    raw["training"]["verl_config_overrides"] = {"data": {"train_files": 3}}
    assert translate(raw).refused == [
        "training.verl_config_overrides.data.train_files: 3: expected a Parquet file's path or a list of them"
    ]


def test_the_oumi_fields_verl_reads_are_honings_keys():
    """The document's table of the Oumi fields Oumi hands to verl, each as honing's key."""
    raw = copy.deepcopy(VERL_GRPO)
    raw["training"]["verl_config_overrides"] = {}
    training = {"grpo": {"max_completion_length": 96, "temperature": 0.6}, "enable_gradient_checkpointing": True,
                "learning_rate": 1e-6, "max_steps": 20, "save_steps": 5, "resume_from_checkpoint": "runs/old/step5",
                "enable_wandb": True, "run_name": "countdown", "output_dir": "runs/countdown"}  # fmt: skip
    translation = translated(raw, **training)
    expected = {
        "model.name_or_path": "Qwen/Qwen2-0.5B-Instruct", "data.train.sources": [
            {"path": "Jiayi-Pan/Countdown-Tasks-3to4:train"}], "grpo.max_completion_length": 96,
        "grpo.temperature": 0.6, "parallel.activation_checkpointing": "full", "optim.lr": 1e-6,
        "trainer.max_duration": "20steps", "callbacks.checkpointer.save_interval": 5,
        "trainer.load_path": "runs/old/step5", "trainer.load_strategy": "always", "callbacks.wandb.enabled": True,
        "run_name": "countdown", "trainer.save_folder": "runs/countdown",
    }  # fmt: skip
    assert {path: translation.get(path) for path in expected} == expected
    assert translated(raw, num_train_epochs=2).get("trainer.max_duration") == "2epochs"
    assert translated(raw, try_resume_from_last_checkpoint=True).get("trainer.load_strategy") == "if_available"
