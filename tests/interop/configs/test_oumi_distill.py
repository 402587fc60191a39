"""Oumi's TRL_GKD and TRL_GOLD configs as ``method: distill`` (TRL's keys under the same names), and GOLD's
cross-tokenizer alignment refused by name."""

import copy

from honing.config import validate
from honing.interop.configs import translate

GKD = {
    "model": {"model_name": "HuggingFaceTB/SmolLM2-135M-Instruct", "torch_dtype_str": "bfloat16"},
    "data": {
        "train": {
            "datasets": [
                {
                    "dataset_name": "yahma/alpaca-cleaned",
                    "dataset_kwargs": {"return_conversations": True, "return_conversations_format": "dict"},
                }
            ]
        }
    },
    "training": {
        "trainer_type": "TRL_GKD",
        "max_steps": 10,
        "gkd": {
            "teacher_model_name_or_path": "HuggingFaceTB/SmolLM2-360M-Instruct",
            "teacher_model_init_kwargs": {"dtype": "bfloat16"},
            "temperature": 0.7,
            "max_new_tokens": 64,
            "lmbda": 0.25,
            "beta": 0.1,
            "disable_dropout": False,
            "seq_kd": True,
        },
    },
}


def gold(**keys):
    raw = copy.deepcopy(GKD)
    section = raw["training"].pop("gkd")
    section["max_completion_length"] = section.pop("max_new_tokens")
    raw["training"].update(trainer_type="TRL_GOLD", gold={**section, **keys})
    return raw


def test_gkd_translates_to_distill_with_trls_keys():
    translation = translate(copy.deepcopy(GKD))
    assert translation.refused == []
    config = validate(translation.config, source="oumi")
    assert config.method == "distill"
    section = config.distill
    assert section.teacher_model_name_or_path == "HuggingFaceTB/SmolLM2-360M-Instruct"
    assert section.teacher_model_init_kwargs == {"dtype": "bfloat16"}
    assert (section.lmbda, section.beta, section.temperature, section.max_new_tokens) == (0.25, 0.1, 0.7, 64)
    assert section.seq_kd is True and config.model.disable_dropout is False


def test_gkd_disables_dropout_by_default_as_trl():
    raw = copy.deepcopy(GKD)
    del raw["training"]["gkd"]["disable_dropout"]
    assert translate(raw).get("model.disable_dropout") is True


def test_gold_without_its_cross_tokenizer_loss_translates_with_gold_sampling():
    translation = translate(gold(top_k=20, use_vllm=False, uld_crossentropy_weight=0.0))
    assert translation.refused == []
    config = validate(translation.config, source="oumi")
    assert config.method == "distill" and config.distill.max_new_tokens == 64
    assert config.distill.top_p == 0.95 and config.distill.top_k == 20  # Oumi's GoldParams default top_p
    assert any(note.startswith("training.gold.uld_crossentropy_weight: unused") for note in translation.notes)


def test_gold_with_a_cross_tokenizer_teacher_is_refused_by_name():
    translation = translate(gold(use_uld_loss=True, teacher_tokenizer_name_or_path="meta-llama/Llama-3.2-1B"))
    assert [line.split(":")[0] for line in translation.refused] == [
        "training.gold.use_uld_loss",
        "training.gold.teacher_tokenizer_name_or_path",
    ]
    assert all("cross-tokenizer alignment (ULD) is not built" in line for line in translation.refused)


def test_a_distillation_section_of_another_trainer_is_refused():
    raw = copy.deepcopy(GKD)
    raw["training"]["trainer_type"] = "TRL_SFT"
    translation = translate(raw)
    assert "training.gkd: used by trainer_type TRL_GKD only" in translation.refused
