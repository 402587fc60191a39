"""Key paths of the schema, and ``track_reads``: what a run reads, recorded only while asked for."""

from __future__ import annotations

import threading

import pytest
from pydantic import ValidationError

from honing.config import leaf_keys, track_reads, validate
from honing.config.schema import RunConfig, Section

RAW = {
    "data": {"train": {"sources": [{"path": "a.txt"}, {"path": "b.txt"}]}},
    "model": {"config": {"model_type": "llama"}, "lora": {"rank": 4}},
    "optim": {"param_groups": [{"params": "*embed*"}]},
    "callbacks": {"custom": [{"import_path": "x:Y", "kwargs": {"a": 1}}]},
}


def test_leaf_keys_walk_sections_lists_of_sections_and_optional_sections():
    keys = leaf_keys(RunConfig)
    for key in [
        "method",
        "data.train.sources[].format",
        "data.validation.sources[].path",
        "model.lora.rank",
        "model.config",
        "model.freeze_layers",
        "callbacks.custom[].import_path",
        "callbacks.custom[].kwargs",
        "trainer.steps_to_skip[].start",
        "optim.param_groups[].params",
        "storage.work_folder",
        "trainer.load_trainer_state",
        "trainer.load_optim_state",
        "trainer.nonfinite_loss",
        "scheduler.warmup_ratio",
    ]:
        assert key in keys
    assert len(keys) == len(set(keys))
    # sections are walked into, never keys themselves
    assert not {"data", "data.train", "model.lora", "callbacks.custom", "storage.work_dir"} & set(keys)


def test_reads_are_recorded_as_key_paths():
    config = validate(RAW)
    with track_reads(config) as reads:
        assert config.trainer.seed == 0
        assert [source.path for source in config.data.train.sources] == ["a.txt", "b.txt"]
        assert config.model.lora.rank == 4
        assert config.callbacks.custom[0].kwargs == {"a": 1}
        _ = config.model.model_dump  # a method, not a key
    assert reads.keys == {
        "trainer",
        "trainer.seed",
        "data",
        "data.train",
        "data.train.sources",
        "data.train.sources[].path",
        "model",
        "model.lora",
        "model.lora.rank",
        "callbacks",
        "callbacks.custom",
        "callbacks.custom[].kwargs",
    }


def test_dumping_a_section_reads_all_of_it_but_dumping_the_config_reads_nothing():
    config = validate(RAW)
    optim, lora = config.optim, config.model.lora
    with track_reads(config) as reads:
        config.model_dump()
        config.model_dump(mode="json")
    assert reads.keys == set()
    with track_reads(config) as reads:
        optim.model_dump()
        lora.model_dump(include={"rank"})
    assert "optim.param_groups[].params" in reads.keys and "optim.lr" in reads.keys
    assert "model.lora.rank" in reads.keys and "model.lora.alpha" not in reads.keys


def test_tracking_costs_nothing_when_off():
    config = validate(RAW)
    with track_reads(config):
        assert "__getattribute__" in Section.__dict__
    # no hook is left on any section class: attribute reads are plain again
    assert "__getattribute__" not in Section.__dict__ and "model_dump" not in Section.__dict__
    assert RunConfig.__getattribute__ is object.__getattribute__
    with pytest.raises(RuntimeError):
        with track_reads(config):
            raise RuntimeError("inside")
    assert "__getattribute__" not in Section.__dict__


def test_one_tracker_at_a_time_and_reads_from_other_threads_count():
    config = validate(RAW)
    with track_reads(config) as reads:
        with pytest.raises(RuntimeError, match="already recording"):
            with track_reads(config):
                pass
        thread = threading.Thread(target=lambda: config.trainer.max_duration)
        thread.start()
        thread.join()
    assert "trainer.max_duration" in reads.keys


def test_sections_outside_the_tracked_config_are_not_recorded():
    config, other = validate(RAW), validate(RAW)
    with track_reads(config) as reads:
        _ = other.trainer.seed
    assert reads.keys == set()


def test_a_loaded_config_is_read_only_and_a_copy_takes_a_changed_setting():
    config = validate(RAW)
    with pytest.raises(ValidationError, match="frozen"):
        config.trainer.seed = 3
    with track_reads(config) as reads:
        changed = config.model_copy(update={"trainer": config.trainer.model_copy(update={"seed": 3})})
        assert changed.trainer.seed == 3 and config.trainer.seed == RAW.get("trainer", {}).get("seed", 0)
    assert "trainer.seed" in reads.keys
