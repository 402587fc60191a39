"""The CLI hides the warnings of transformers, torch's device mesh, lm-eval and bitsandbytes, and keeps honing's own."""

from __future__ import annotations

import logging
import warnings

import pytest

from honing import cli_library_warnings
from honing.cli_library_warnings import QUIET_LOGGERS, quiet_library_warnings


@pytest.fixture
def quieted(monkeypatch):
    """``quiet_library_warnings()`` applied, with the loggers' levels and the warning filters restored after."""
    monkeypatch.delenv("TRANSFORMERS_VERBOSITY", raising=False)
    monkeypatch.delenv("LMEVAL_LOG_LEVEL", raising=False)
    monkeypatch.setattr(cli_library_warnings.sys, "warnoptions", [])
    levels = {name: logging.getLogger(name).level for name in QUIET_LOGGERS}
    with warnings.catch_warnings(record=True) as shown:
        quiet_library_warnings()
        yield shown
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


def warn_from(module: str) -> None:
    """A FutureWarning attributed to ``module``, as a library's ``warnings.warn`` is."""
    warnings.warn_explicit("a notice", FutureWarning, f"{module.replace('.', '/')}.py", 1, module=module)


def test_library_warnings_are_hidden_and_honing_own_shown(quieted):
    for module in ("transformers.modeling_utils", "torch.distributed.device_mesh", "lm_eval.api.task"):
        warn_from(module)
    warn_from("honing.train.trainer_bookkeeping")
    warn_from("torch.nn.modules.module")  # torch's other warnings are not the device mesh's
    assert [w.filename for w in quieted] == ["honing/train/trainer_bookkeeping.py", "torch/nn/modules/module.py"]


def test_library_loggers_show_errors_only(quieted):
    for name in (
        "transformers.modeling_utils",
        "torch.distributed.device_mesh",
        "lm_eval.evaluator",
        "bitsandbytes.backends.cpu.ops",
    ):
        logger = logging.getLogger(name)
        assert not logger.isEnabledFor(logging.WARNING) and logger.isEnabledFor(logging.ERROR)
    assert logging.getLogger("honing.train").isEnabledFor(logging.WARNING)
    # transformers sets its level from this variable as it is imported
    assert cli_library_warnings.os.environ["TRANSFORMERS_VERBOSITY"] == "error"


def test_the_user_own_settings_stand(monkeypatch):
    monkeypatch.setenv("TRANSFORMERS_VERBOSITY", "info")
    monkeypatch.setattr(cli_library_warnings.sys, "warnoptions", ["default"])  # python -W default
    levels = {name: logging.getLogger(name).level for name in QUIET_LOGGERS}
    try:
        with warnings.catch_warnings(record=True) as shown:
            warnings.simplefilter("default")
            quiet_library_warnings()
            warn_from("transformers.modeling_utils")
        assert len(shown) == 1
        assert cli_library_warnings.os.environ["TRANSFORMERS_VERBOSITY"] == "info"
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
