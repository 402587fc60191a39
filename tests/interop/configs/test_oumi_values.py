"""Values Oumi's schema accepts for a key honing already reads (its template files, dtype names, tokenizer arguments,
logging strategies, transformers' optimizer names, the test split): each one honoured, noted, or refused in one line
that names it, found by walking the values Oumi's own code takes rather than the configs we were shown."""

import pytest

from tests.interop.configs.test_oumi_options import noted, refusals, translated


@pytest.mark.parametrize(
    "oumi,honing",
    [
        ("zephyr", "zephyr"),
        ("Zephyr", "zephyr"),  # Oumi lowercases the name to find its template file
        ("default", "plain_roles"),
        ("default_gen", "plain_roles"),
        ("gpt2", "eos_separated"),
        ("llama3-instruct", "llama3"),
    ],
)
def test_oumis_model_agnostic_templates_are_honings_named_ones(oumi, honing):
    translation = translated(**{"model.chat_template": oumi})
    assert translation.config["data"]["chat_template"] == honing


def test_a_family_template_for_another_model_is_still_refused_by_name():
    (line,) = refusals(**{"model.chat_template": "phi3-instruct"})
    assert line.startswith("model.chat_template: 'phi3-instruct' is not available for this model")
    assert "zephyr, default" in line


@pytest.mark.parametrize("short,precision", [("f32", "fp32"), ("F32", "fp32"), ("bf16", "bf16")])
def test_oumis_short_dtype_names_are_read_as_oumi_reads_them(short, precision):
    translation = translated(**{"model.torch_dtype_str": short})
    assert translation.config["trainer"]["precision"] == precision
    translation = translated(**{"model.torch_dtype_str": "f16"})
    assert translation.config["model"]["dtype"] == "float16"


def test_a_dtype_honing_cannot_train_in_is_refused_by_name():
    assert refusals(**{"model.torch_dtype_str": "f64"}) == [
        "model.torch_dtype_str: 'f64' is not available; honing trains in float32, float16, bf16-mixed or bf16"
    ]


def test_tokenizer_arguments_that_change_no_step_are_notes():
    kwargs = {"padding_side": "left", "use_fast": True, "truncation_side": "right", "model_max_length": 4096}
    translation = translated(**{"model.tokenizer_kwargs": kwargs})
    assert "training rows on the right" in noted(translation, "model.tokenizer_kwargs.padding_side")
    assert "fast tokenizer" in noted(translation, "model.tokenizer_kwargs.use_fast")
    assert "data.overlong: truncate" in noted(translation, "model.tokenizer_kwargs.truncation_side")
    assert "data.seq_len" in noted(translation, "model.tokenizer_kwargs.model_max_length")


@pytest.mark.parametrize(
    "kwargs,line",
    [
        ({"use_fast": False}, "model.tokenizer_kwargs.use_fast: False is not available: honing loads the fast"),
        ({"truncation_side": "left"}, "model.tokenizer_kwargs.truncation_side: 'left' is not available: honing cuts"),
        ({"revision": "abc"}, "model.tokenizer_kwargs.revision: 'abc': honing reads the tokenizer at its default"),
        ({"legacy": False}, "model.tokenizer_kwargs.legacy: not translated: honing passes no extra keyword"),
    ],
)
def test_tokenizer_arguments_honing_has_not_are_refused_in_one_line(kwargs, line):
    (refused,) = refusals(**{"model.tokenizer_kwargs": kwargs})
    assert refused.startswith(line)


def test_a_model_revision_is_the_revision_the_weights_load_at():
    translation = translated(**{"model.model_revision": "4e1f0c2"})
    assert translation.config["model"]["load_kwargs"] == {"revision": "4e1f0c2"}
    assert "tokenizer at the repository's default" in noted(translation, "model.model_revision")
    (line,) = refusals(**{"model.model_revision": "prequantized"})
    assert line.startswith("model.model_revision: 'prequantized': Falcon-E's BitNet")


def test_template_kwargs_and_the_test_split_are_unused_by_oumi_train_as_here():
    translation = translated(
        **{
            "model.chat_template_kwargs": {"enable_thinking": False},
            "data.test": {"datasets": [{"dataset_name": "yahma/alpaca-cleaned"}]},
        }
    )
    assert "vLLM inference" in noted(translation, "model.chat_template_kwargs")
    assert "train and validation splits" in noted(translation, "data.test")
    assert "test" not in translation.config["data"]


@pytest.mark.parametrize("strategy,words", [("no", "still records the metrics"), ("epoch", "not once an epoch")])
def test_logging_strategies_other_than_steps_are_notes(strategy, words):
    translation = translated(**{"training.logging_strategy": strategy})
    assert words in noted(translation, "training.logging_strategy")
    assert refusals(**{"training.logging_strategy": "sometimes"}) == [
        "training.logging_strategy: 'sometimes' is not one of transformers' 'no', 'steps', 'epoch'"
    ]


def test_device_kernel_adamw_names_are_torchs_adamw_and_transformers_others_are_named():
    translation = translated(**{"training.optimizer": "adamw_torch_xla"})
    assert translation.config["optim"]["name"] == "adamw"
    assert "XLA" in noted(translation, "training.optimizer")
    (line,) = refusals(**{"training.optimizer": "galore_adamw"})
    assert line.startswith(
        "training.optimizer: 'galore_adamw' is one of transformers' optimizers honing has not built; expected one of"
    )
    (line,) = refusals(**{"training.optimizer": "adamw_typo"})
    assert line.startswith("training.optimizer: unknown optimizer 'adamw_typo'")


def test_the_collators_default_ignore_index_is_honings_and_another_is_refused():
    split = {"datasets": [{"dataset_name": "yahma/alpaca-cleaned"}], "collator_name": "text_with_padding"}
    translated(**{"data.train": {**split, "collator_kwargs": {"ignore_index": -100}}})
    (line,) = refusals(**{"data.train": {**split, "collator_kwargs": {"ignore_index": -1}}})
    assert line == (
        "data.train.collator_kwargs.ignore_index: -1 is not available: honing marks positions without loss as -100"
    )


def test_keys_of_older_oumi_releases_are_read_as_those_releases_did():
    # walked from Oumi's tags: the params fields a later release dropped (v0.1-alpha ... v0.1.10)
    translation = translated(
        **{
            "data.train.experimental_use_async_dataset": True,
            "data.train.datasets.0.preprocessing_function_name": None,
            "data.train.datasets.0.preprocessing_function_kwargs": {},
        }
    )
    assert "packs documents in its own loader" in noted(translation, "data.train.experimental_use_async_dataset")
    (line,) = refusals(**{"data.train.datasets.0.preprocessing_function_name": "my_fn"})
    assert line.startswith("data.train.datasets[0].preprocessing_function_name: not available: Oumi 0.1's")
    grpo = translated(
        **{
            "training.trainer_type": "TRL_GRPO",
            "training.reward_functions": ["countdown"],
            "data.train.datasets.0.dataset_name": "d1shs0ap/countdown",
            "training.grpo": {"vllm_device": "auto", "vllm_dtype": "bfloat16", "vllm_max_model_len": 2048},
        }
    )
    assert "vLLM engine setting" in noted(grpo, "training.grpo.vllm_device")


def test_freeze_layers_follow_oumis_rule_for_a_name_the_model_lacks():
    # Oumi's freeze_model_layers warns about a missing name and freezes the rest: honing's freeze_missing: skip
    translation = translated(**{"model.freeze_layers": ["model.vision_embed_tokens"]})
    assert translation.config["model"]["freeze_missing"] == "skip"
    assert "model.freeze_missing" in translation.defaults
    assert "freeze_missing" not in translated().config["model"]


def test_an_unset_template_is_oumis_fallback_and_gpt2_gets_oumis_gpt2_template():
    # Oumi's build_tokenizer: its model type's template (gpt2's), else the tokenizer's own, else its 'default'
    translation = translated()
    assert translation.config["data"]["chat_template_fallback"] == "plain_roles"
    assert "chat_template" not in translation.config["data"]
    gpt2 = translated(**{"model.model_name": "openai-community/gpt2"})
    assert gpt2.config["data"]["chat_template"] == "eos_separated"
    assert "chat_template_fallback" not in translated(**{"model.chat_template": "auto"}).config["data"]
