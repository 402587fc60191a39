"""Loading a pretrained model by folder or hub id: a missing folder is one line that says how to create it."""

from __future__ import annotations

import pytest
import torch

from honing.errors import ConfigError
from honing.models.loading import load_pretrained_model
from tests.helpers import tiny_llama


def test_a_saved_folder_loads_with_its_weights(tmp_path):
    model = tiny_llama()
    model.save_pretrained(tmp_path / "hf")
    loaded = load_pretrained_model(str(tmp_path / "hf"))
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name


def test_the_quickstarts_missing_export_names_the_quickstart_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # configs/sft-lora.yaml before the quickstart: no runs/quickstart/hf here
    with pytest.raises(ConfigError) as raised:
        load_pretrained_model("runs/quickstart/hf")
    # outside this folder: named as the CLI finds it from any folder, by the example's name
    assert str(raised.value) == (
        "model.name_or_path: runs/quickstart/hf does not exist: it is the output of quickstart; "
        "run `honing train quickstart` first"
    )


@pytest.mark.parametrize("name_or_path", ["./models/missing", "runs/sft/hf", "runs/hf", "{tmp}/absent"])
def test_a_missing_folder_is_one_line_naming_the_key(tmp_path, monkeypatch, name_or_path):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    name_or_path = name_or_path.format(tmp=tmp_path)
    with pytest.raises(ConfigError) as raised:
        load_pretrained_model(name_or_path)
    assert str(raised.value) == f"model.name_or_path: {name_or_path} does not exist and is not a hub name"


def test_a_file_is_not_a_model_folder(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(
        ConfigError,
        match=r"^model.name_or_path: .*model.safetensors is a file; expected a model "
        r"folder \(with config.json\) or a Hugging Face hub id$",
    ):
        load_pretrained_model(str(tmp_path / "model.safetensors"))
