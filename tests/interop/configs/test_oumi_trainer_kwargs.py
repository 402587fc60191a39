"""Oumi's ``training.trainer_kwargs`` read as the TRL config class Oumi hands them to (honing's TRL tables), and
OmegaConf's ``${...}`` references in an Oumi file resolved as Oumi's loader resolves them."""

from honing.config import validate
from honing.interop.configs import translate
from honing.interop.configs.interpolations import resolve_interpolations
from tests.interop.configs.test_oumi_options import with_changes


def test_trl_keys_in_trainer_kwargs_are_read_as_trls_config_class_reads_them():
    kwargs = {"max_seq_length": 384, "packing": False, "dataset_text_field": "text"}
    translation = translate(with_changes(**{"training.trainer_kwargs": kwargs}))
    assert translation.refused == []
    assert translation.config["data"]["seq_len"] == 384 and translation.config["data"]["packing"] is False
    renamed = [note for note in translation.notes if note.startswith("training.trainer_kwargs.max_seq_length:")]
    assert renamed == ["training.trainer_kwargs.max_seq_length: TRL's former name of max_length (Oumi's pinned "
                       "TRL): read as max_length"]  # fmt: skip
    validate(translation.config, source="oumi")


def test_a_key_trls_class_lacks_is_refused_by_its_name_under_trainer_kwargs():
    translation = translate(with_changes(**{"training.trainer_kwargs": {"not_a_trl_key": 1}}))
    assert len(translation.refused) == 1
    assert translation.refused[0].startswith("training.trainer_kwargs.not_a_trl_key: not a field of SFTConfig")


def test_references_take_the_referenced_value_with_its_type_or_its_text_inside_a_string():
    raw = {
        "model": {"model_max_length": 2048, "name": "m"},
        "training": {
            "output_dir": "out/x",
            "logging_dir": "${training.output_dir}/runs",
            "n": "${model.model_max_length}",
        },
        "env": "${oc.env:HOME}",  # a resolver: as written
        "missing": "${nowhere.key}",  # no such key: as written, for its reader to refuse
        "cycle": {"a": "${cycle.b}", "b": "${cycle.a}"},
        "listed": ["${model.name}", {"deep": "${training.logging_dir}"}],
    }
    resolved = resolve_interpolations(raw)
    assert resolved["training"]["n"] == 2048 and resolved["training"]["logging_dir"] == "out/x/runs"
    assert resolved["env"] == "${oc.env:HOME}" and resolved["missing"] == "${nowhere.key}"
    assert resolved["listed"] == ["m", {"deep": "out/x/runs"}]
    assert resolved["cycle"]["a"].startswith("${")  # a cycle ends as written, never a recursion error
    assert raw["training"]["n"] == "${model.model_max_length}"  # the caller's mapping is untouched


def test_an_oumi_file_whose_trainer_kwargs_reference_the_model_translates():
    kwargs = {"max_seq_length": "${model.model_max_length}"}
    raw = with_changes(**{"model.model_max_length": 1024, "training.trainer_kwargs": kwargs})
    translation = translate(raw)
    assert translation.refused == [] and translation.config["data"]["seq_len"] == 1024
