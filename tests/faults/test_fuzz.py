"""Fuzzing with hypothesis: the config loader (random YAML, random key=value overrides) and every data reader
(random JSON, truncated files, wrong types, huge numbers, non-UTF-8 bytes) never show a traceback: each input
loads or raises honing's own error, which the CLI prints as one line with exit code 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from honing.data.preference.pairs import load_pairs
from honing.data.prompts.prompts import load_prompts
from honing.data.row_reader import load_examples
from honing.data.text.documents import load_documents
from honing.errors import HoningError
from honing.interop.configs import load_any_config

REPO = Path(__file__).resolve().parents[2]
FUZZ = settings(
    max_examples=int(os.environ.get("HONING_FUZZ_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    database=None,
)
FOLDER = Path(tempfile.mkdtemp(prefix="honing-fuzz-"))

# Key names the readers and the config look for, so random rows and configs reach past the first check.
CONFIG_KEYS = [
    "method", "trainer", "data", "model", "tokenizer", "optim", "scheduler", "callbacks", "train", "sources",
    "path", "format", "weight", "max_duration", "seq_len", "global_batch_size", "lr", "kind", "config",
    "checkpointer", "save_interval", "steps_to_skip", "start", "stop", "lora", "rank", "dpo", "grpo", "rewards",
]  # fmt: skip
ROW_KEYS = [
    "text", "messages", "role", "content", "type", "image", "images", "prompt", "chosen", "rejected", "completion",
    "conversations", "from", "value", "system", "instruction", "input", "output", "question", "answer", "user",
    "assistant", "human", "gpt", "tools", "image_url", "url", "path",
]  # fmt: skip
BASE_CONFIG = """
method: pretrain
trainer: {save_folder: /tmp/honing-fuzz-run, max_duration: 2steps}
data: {train: {sources: [{path: corpus.txt}]}, seq_len: 16, global_batch_size: 2}
model: {config: {model_type: llama, hidden_size: 16, num_hidden_layers: 1, num_attention_heads: 2}}
"""

huge_numbers = st.one_of(
    st.integers(min_value=-(10**40), max_value=10**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([2**63, -(2**63) - 1, 10**400 // 10**390, 1e308, -1e-320]),
)
scalars = st.one_of(st.none(), st.booleans(), huge_numbers, st.text(max_size=20), st.sampled_from(ROW_KEYS))


def nested(keys: list[str]) -> st.SearchStrategy:
    """JSON-like values whose mappings mostly use ``keys``, so they look almost valid."""
    key = st.one_of(st.sampled_from(keys), st.text(max_size=8))
    return st.recursive(
        scalars,
        lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(key, children, max_size=5)),
        max_leaves=20,
    )


def _json_line(value) -> bytes:
    return json.dumps(value, allow_nan=True).encode()


rows = st.one_of(st.dictionaries(st.sampled_from(ROW_KEYS), nested(ROW_KEYS), max_size=5), nested(ROW_KEYS))


@st.composite
def data_files(draw) -> tuple[str, bytes]:
    """A file name (its extension picks the reader) and contents: JSON rows, then perhaps truncated, with
    bytes flipped into invalid UTF-8, or just random bytes."""
    extension = draw(st.sampled_from([".jsonl", ".json", ".txt", ".parquet", ".jsonl.gz"]))
    kind = draw(st.sampled_from(["jsonl", "array", "bytes"]))
    values = draw(st.lists(rows, min_size=1, max_size=5))
    if kind == "jsonl":
        data = b"\n".join(_json_line(v) for v in values)
    elif kind == "array":
        data = _json_line(values)
    else:
        data = draw(st.binary(max_size=200))
    if draw(st.booleans()):  # truncated
        data = data[: draw(st.integers(0, len(data)))]
    if draw(st.booleans()) and data:  # non-UTF-8 bytes somewhere
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x00\xfe"])) + data[at:]
    return extension, data


def write(extension: str, data: bytes) -> str:
    handle, path = tempfile.mkstemp(suffix=extension, dir=FOLDER)
    with os.fdopen(handle, "wb") as file:
        file.write(data)
    return path


def loads_or_honing_error(load) -> None:
    """The input loads, or fails with honing's own error; anything else is a bug the fuzzer found."""
    try:
        load()
    except HoningError as error:
        assert str(error).strip(), "an error without a message"


# --- the config loader ----------------------------------------------------------------------------------------
@FUZZ
@given(text=st.one_of(st.text(max_size=200), nested(CONFIG_KEYS).map(lambda v: yaml.safe_dump(v))))
def test_random_yaml_loads_or_raises_a_config_error(text):
    path = write(".yaml", text.encode("utf-8", "surrogatepass"))
    loads_or_honing_error(lambda: load_any_config(path))


@FUZZ
@given(
    section=nested(CONFIG_KEYS).filter(lambda v: isinstance(v, dict)),
    extra=st.lists(st.sampled_from(CONFIG_KEYS), max_size=3),
)
def test_almost_valid_configs_load_or_raise_a_config_error(section, extra):
    raw = yaml.safe_load(BASE_CONFIG)
    target = raw
    for key in extra:  # descend into (or create) a random section and put random values there
        child = target.get(key)
        target = child if isinstance(child, dict) else target.setdefault(key, {}) if key not in target else target
    target.update(section)
    path = write(".yaml", yaml.safe_dump(raw).encode())
    loads_or_honing_error(lambda: load_any_config(path))


overrides = st.one_of(
    st.text(max_size=40),
    st.builds(
        lambda keys, value: ".".join(keys) + "=" + value,
        st.lists(st.sampled_from(CONFIG_KEYS), min_size=1, max_size=4),
        st.one_of(st.text(max_size=20), nested(CONFIG_KEYS).map(lambda v: json.dumps(v))),
    ),
)


@FUZZ
@given(items=st.lists(overrides, max_size=4))
def test_random_overrides_load_or_raise_a_config_error(items):
    path = FOLDER / "base.yaml"
    path.write_text(BASE_CONFIG)
    loads_or_honing_error(lambda: load_any_config(str(path), items))


# --- the data readers -----------------------------------------------------------------------------------------
source_extras = st.fixed_dictionaries(
    {},
    optional={
        "weight": st.one_of(huge_numbers, st.text(max_size=5), st.none()),
        "text_field": st.one_of(st.sampled_from(ROW_KEYS), st.integers(), st.none()),
        "max_samples": st.one_of(st.integers(-3, 10**20), st.none(), st.text(max_size=3)),
    },
)


def source(path: str, format: str, extras: dict) -> dict:
    return {"path": path, "format": format, "weight": 1.0, "text_field": "text", "max_samples": None, **extras}


@FUZZ
@given(
    file=data_files(),
    format=st.sampled_from(["auto", "conversation", "alpaca", "sharegpt", "text", "nonsense"]),
    bad_rows=st.sampled_from(["fail", "skip"]),
    extras=source_extras,
)
def test_row_reader_loads_or_raises_a_data_error(file, format, bad_rows, extras):
    path = write(*file)
    loads_or_honing_error(lambda: load_examples([source(path, format, extras)], bad_rows=bad_rows))


@FUZZ
@given(file=data_files(), format=st.sampled_from(["auto", "text", "jsonl", "parquet"]), extras=source_extras)
def test_pretrain_text_loads_or_raises_a_data_error(file, format, extras):
    path = write(*file)
    loads_or_honing_error(lambda: load_documents([source(path, format, extras)]))


@FUZZ
@given(
    file=data_files(),
    format=st.sampled_from(["auto", "preference", "conversation"]),
    bad_rows=st.sampled_from(["fail", "skip"]),
    extras=source_extras,
)
def test_preference_pairs_load_or_raise_a_data_error(file, format, bad_rows, extras):
    path = write(*file)
    loads_or_honing_error(lambda: load_pairs([source(path, format, extras)], bad_rows=bad_rows))


@FUZZ
@given(file=data_files(), format=st.sampled_from(["auto", "prompt", "conversation"]), extras=source_extras)
def test_prompts_load_or_raise_a_data_error(file, format, extras):
    path = write(*file)
    loads_or_honing_error(lambda: load_prompts([source(path, format, extras)]))


# --- the CLI turns them into one line, exit 2 -----------------------------------------------------------------
@pytest.mark.slow
def test_the_cli_prints_a_bad_data_file_as_one_line_with_exit_code_2(tmp_path):
    data = tmp_path / "rows.jsonl"
    data.write_bytes(b'{"text": "fine"}\n{"text": "caf\xe9 \xff"}\n')
    config = tmp_path / "run.yaml"
    config.write_text(BASE_CONFIG.replace("corpus.txt", str(data)).replace("/tmp/honing-fuzz-run", str(tmp_path / "r")))
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "honing", "train", str(config), "tokenizer.kind=byte"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("honing: error:")]
    assert len(errors) == 1 and f"{data}:2: not valid UTF-8" in errors[0], result.stderr[-2000:]
    assert "Traceback" not in result.stderr
