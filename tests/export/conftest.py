"""The example runs of tests/infer (trained once per session where they are used)."""

from tests.infer.conftest import lora_run, quickstart_run, sft_run  # noqa: F401  (registered as fixtures)
