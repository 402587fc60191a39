"""Shared fixtures: tiny models and data that build in milliseconds."""

from __future__ import annotations

import os

import pytest
import torch

from tests.helpers import TokenDataset

# Tests run on 2 cores next to other work; one thread keeps timings stable and results deterministic.
torch.set_num_threads(1)
os.environ.setdefault("HONING_CACHE_DIR", os.path.join(os.path.dirname(__file__), "..", ".pytest_cache", "honing"))


@pytest.fixture
def token_dataset():
    return TokenDataset()
