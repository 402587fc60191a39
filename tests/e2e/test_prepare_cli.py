"""``honing prepare CONFIG --out DIR``: two worker processes write the shards, a re-run is a no-op, and a
config that cannot be prepared fails with one line and exit code 2."""

import json

import yaml

from honing.cli import main
from tests.e2e.test_cli import honing


def write_config(tmp_path, **data):
    config = {
        "method": "pretrain",
        "trainer": {"save_folder": str(tmp_path / "run")},
        "data": {"train": {"sources": [{"path": "{stdlib}/json/*.py"}]}, "seq_len": 64, **data},
        "tokenizer": {"kind": "byte"},
        "model": {"config": {"model_type": "llama", "hidden_size": 32, "num_hidden_layers": 1}},
    }
    path = tmp_path / "pretrain.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def test_prepare_with_two_workers_then_rerun_is_a_no_op(tmp_path, capsys):
    config, out = write_config(tmp_path), tmp_path / "tokens"
    result = honing("prepare", config, "--out", str(out), "--workers", "2", "--shard-mb", "0.02", "data.seq_len=32")
    assert result.returncode == 0, result.stderr
    index = json.loads((out / "index.json").read_text())
    assert len(index["shards"]) > 2 and index["dtype"] == "uint16" and index["num_documents"] >= 4
    assert f"wrote {len(index['shards'])} shard(s)" in result.stdout and "format: tokens" in result.stdout
    assert (out / "tokenizer" / "tokenizer.json").exists()

    assert main(["prepare", config, "--out", str(out), "--shard-mb", "0.02"]) == 0  # in-process: no second start-up
    assert "up to date" in capsys.readouterr().out


def test_a_config_that_cannot_be_prepared_exits_2_with_one_line(tmp_path, capsys):
    config = write_config(tmp_path, train={"sources": [{"path": "{stdlib}/json/*.py", "max_samples": 3}]})
    assert main(["prepare", config, "--out", str(tmp_path / "tokens")]) == 2
    error = capsys.readouterr().err.strip()
    assert error == (
        "honing: error: data.train.sources[0].max_samples: prepare writes every document of a source; remove "
        "max_samples (mix prepared folders with weight instead)"
    )
