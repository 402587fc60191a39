"""Hide secrets before a config is written to disk or a log."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TypeVar

import yaml
from pydantic import BaseModel

_Value = TypeVar("_Value")

# "token" only as a whole name part (hf_token, auth-token), so "tokenizer" or "max_tokens" are not secrets.
SECRET_KEY_PATTERN = re.compile(r"(api[_-]?key|(^|[_-])token$|secret|password|passwd|access[_-]?key|credential)", re.I)
# A tokenizer's special-token settings are not secrets; these key names are exempt.
NOT_SECRETS = {"eos_token", "pad_token", "bos_token", "unk_token"}
REDACTED = "***"


def is_secret_key(key: str) -> bool:
    """True when a key's name says its value is a secret (api_key, token, password, ...)."""
    return key not in NOT_SECRETS and bool(SECRET_KEY_PATTERN.search(key))


def redact(value: _Value) -> _Value:
    """A copy of a nested mapping / list with every secret value replaced by ``***``."""
    if isinstance(value, dict):
        return {  # type: ignore[return-value]  # the same mapping, its secrets replaced
            key: (REDACTED if is_secret_key(str(key)) and item is not None else redact(item))
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [redact(item) for item in value]  # type: ignore[return-value]
    return value


def to_yaml(config: BaseModel | Mapping[str, object]) -> str:
    """The config as YAML text with secrets redacted (what is saved as ``config.yaml``)."""
    data = config.model_dump(mode="json") if hasattr(config, "model_dump") else config
    return yaml.safe_dump(redact(data), sort_keys=False)
