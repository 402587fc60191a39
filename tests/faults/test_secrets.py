"""Credentials never reach a file: fake AWS, W&B and HF tokens in the environment and in the config, a short
training with every tracker on (W&B offline, TensorBoard, console, metrics file), then every file the run wrote
(binary ones too, W&B's and the cache's included) and its console output are searched for them: none found."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]

ENV_SECRETS = {
    "AWS_ACCESS_KEY_ID": "AKIAFAKEENVKEY0000001",
    "AWS_SECRET_ACCESS_KEY": "fake-env-aws-secret-7f3a9c",
    "WANDB_API_KEY": "fakeenvwandbkey0123456789abcdef01234567",
    "HF_TOKEN": "hf_fakeEnvToken9b8c7d6e5f",
    "HUGGING_FACE_HUB_TOKEN": "hf_fakeEnvHubToken1a2b3c4d",
}
CONFIG_SECRETS = {
    "storage.aws_access_key_id": "AKIAFAKECONFIGKEY0002",
    "storage.aws_secret_access_key": "fake-config-aws-secret-4e2b8d",
    "callbacks.wandb.api_key": "fakeconfigwandbkey89abcdef0123456789abcd",
}

CONFIG = """
method: pretrain
trainer: {{save_folder: {save_folder}, max_duration: 4steps, num_threads: 1, metrics_collect_interval: 1}}
data:
  train: {{sources: [{{path: {corpus}}}]}}
  validation_split: 0.25
  seq_len: 16
  global_batch_size: 2
tokenizer: {{kind: byte}}
model:
  config: {{model_type: llama, hidden_size: 16, num_hidden_layers: 1, num_attention_heads: 2,
           num_key_value_heads: 2, intermediate_size: 32}}
storage: {{aws_access_key_id: {aws_key}, aws_secret_access_key: {aws_secret}}}
callbacks:
  checkpointer: {{save_interval: 2}}
  evaluator: {{interval: 2, max_batches: 1}}
  sample: {{prompts: ["the "], max_new_tokens: 4, interval: 2}}
  console: {{plain: true, log_interval: 1}}
  wandb: {{enabled: true, mode: offline, project: secrets-test, api_key: {wandb_key}}}
  tensorboard: {{enabled: true}}
"""


def files_under(folder: Path):
    for parent, _, names in os.walk(folder):
        for name in names:
            path = Path(parent) / name
            if path.is_file() and not path.is_symlink():
                yield path


def test_no_credential_reaches_any_file_or_log(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog. " * 50)
    config = tmp_path / "run.yaml"
    config.write_text(
        CONFIG.format(
            save_folder=tmp_path / "run",
            corpus=corpus,
            aws_key=CONFIG_SECRETS["storage.aws_access_key_id"],
            aws_secret=CONFIG_SECRETS["storage.aws_secret_access_key"],
            wandb_key=CONFIG_SECRETS["callbacks.wandb.api_key"],
        )
    )
    home = tmp_path / "home"
    home.mkdir()
    env = {
        **os.environ,
        **ENV_SECRETS,
        "HOME": str(home),  # anything a library writes to ~ lands where it is searched too
        "HONING_CACHE_DIR": str(tmp_path / "cache"),
        "WANDB_DIR": str(tmp_path / "wandb"),
        "WANDB_CACHE_DIR": str(tmp_path / "wandb-cache"),
        "WANDB_CONFIG_DIR": str(tmp_path / "wandb-config"),
        "WANDB_DATA_DIR": str(tmp_path / "wandb-data"),
        "WANDB_MODE": "offline",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(REPO),
    }
    result = subprocess.run(
        [sys.executable, "-m", "honing", "train", str(config)],
        capture_output=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")[-3000:]
    run = tmp_path / "run"
    assert (run / "config.yaml").exists() and (run / "metrics.jsonl").exists() and (run / "step4").is_dir()
    assert any("tfevents" in path.name for path in files_under(run)), "TensorBoard wrote nothing"
    assert any(path.suffix == ".wandb" for path in files_under(tmp_path)), "W&B wrote no offline run"
    assert "***" in (run / "config.yaml").read_text()  # the config's secrets were there, and redacted

    secrets = [*ENV_SECRETS.values(), *CONFIG_SECRETS.values()]
    outputs = {"stdout": result.stdout, "stderr": result.stderr}
    written = list(files_under(tmp_path))
    assert len(written) > 20
    for path in written:
        if path not in (config,):  # the user's own config holds them, by design
            outputs[str(path.relative_to(tmp_path))] = path.read_bytes()
    found = [
        f"{name}: {secret[:8]}..." for name, data in outputs.items() for secret in secrets if secret.encode() in data
    ]
    assert not found, found
