"""The ``trainer`` section (where the run writes, how long it trains, how it resumes) and the ``storage`` section
(the remote storage the run's paths may point at)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from honing.config.section import Section

# Mirrors honing.train.duration's parser (config may not import it): "200steps", "2epochs",
# "5e6tokens", "1chinchilla" (20 tokens per parameter, times the number given).
DURATION_PATTERN = r"^\s*\d+(\.\d+)?([eE]\d+)?\s*(steps?|epochs?|tokens?|chinchilla)\s*$"
BARE_NUMBER = r"^\s*\d+(\.\d+)?([eE]\d+)?\s*$"


class StepRange(Section):
    """Steps ``start <= step < stop`` whose batches are consumed but not trained on."""

    start: int = Field(ge=1)
    """The first step skipped."""
    stop: int = Field(ge=1)
    """The first step trained on again after the range (not skipped)."""


class TrainerSection(Section):
    """Where the run writes, how long it trains, and how it resumes."""

    save_folder: str = "runs/honing"
    """Where checkpoints, metrics, logs and exports are written: a local folder or an ``s3://`` (any fsspec) URL."""
    load_path: str | None = None
    """A checkpoint, or a folder of them (the newest loads), to start from when the save folder has none."""
    load_strategy: Literal["if_available", "always", "never"] = "if_available"
    """Resume from a checkpoint when there is one (``if_available``), fail without one (``always``), or never."""
    max_duration: str = "100steps"
    """How long to train: ``200steps``, ``2epochs`` (``0.5epochs``: ceil(0.5 x the steps of an epoch), as
    transformers), ``5e6tokens`` or ``1chinchilla`` (20 tokens per parameter)."""
    hard_stop: str | None = None
    """Stop at this duration without changing the LR schedule (set by ``max_duration``); None: no early stop."""
    seed: int = 0
    """The seed of weights initialisation, data order, dropout and sampling: the same seed gives the same losses."""
    precision: Literal["fp32", "bf16-mixed", "fp16-mixed", "bf16", "fp8"] = "fp32"
    """``fp32``, ``bf16-mixed`` (autocast with fp32 master weights), ``fp16-mixed`` (float16 autocast, fp32 master
    weights and a dynamic loss scale: GPUs without bf16, V100 / T4), ``bf16`` (weights and compute in bf16) or
    ``fp8`` (``bf16-mixed`` with the blocks' linear layers in float8 through torchao: GPUs of compute capability
    8.9+, Ada / Hopper; ``honing.models.float8``)."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where to train: ``auto`` (this rank's GPU if there is one, else the CPU), ``cpu`` or ``cuda``."""
    num_threads: int | None = Field(default=None, ge=1)
    """The CPU threads torch uses for its operations; None: ``OMP_NUM_THREADS`` when set, else the cores that
    other processes leave free (their busy time while the run starts up), said in one info line at start."""
    metrics_collect_interval: int = Field(default=10, ge=1)
    """Metrics are reduced over ranks and logged every N steps (the host waits for the device only then)."""
    cancel_check_interval: int = Field(default=1, ge=1)
    """SIGTERM / Ctrl-C is exchanged between ranks asynchronously every N steps: at 1, one more step at most."""
    steps_to_skip: list[StepRange] = Field(default_factory=list)
    """Ranges of steps whose batches are consumed but not trained on, e.g. ``[{start: 100, stop: 110}]``."""
    save_overwrite: bool = False
    """Replace a checkpoint already in the save folder at the same step instead of failing."""
    load_trainer_state: bool = True
    """Warm start: false takes ``load_path``'s weights but starts at step 0 with a fresh data order and RNG
    (refused without ``load_path``)."""
    load_optim_state: bool | None = None
    """Load ``load_path``'s optimizer state; None: when the trainer state is loaded (refused without
    ``load_path``)."""
    emulated_bf16: Literal["warn", "fp32"] = "warn"
    """bf16 asked for on a CPU that only emulates it (~10x slower): warn with the measured factor, or train in fp32."""
    nonfinite_loss: Literal["stop", "skip"] = "stop"
    """A NaN / inf loss stops the run (``stop``), or its step's update is skipped (``skip``: one host sync a step)."""

    @property
    def skips_nonfinite_steps(self) -> bool:
        """Whether a step whose loss is NaN / inf is skipped (``skip``) rather than stopping the run; only honing's
        own optimizer step (``honing.methods.optimizer_update``) can skip one."""
        return self.nonfinite_loss == "skip"

    @field_validator("max_duration", "hard_stop", mode="before")
    @classmethod
    def _has_unit(cls, value: object) -> object:
        # a bare number (YAML reads ``max_duration: 3`` as an int) could mean steps, epochs or tokens: ask for one
        if isinstance(value, (int, float, str)) and not isinstance(value, bool) and re.match(BARE_NUMBER, str(value)):
            number = str(value).strip()
            raise ValueError(
                f"a duration needs its unit: did you mean '{number}steps'? (or '{number}epochs', '{number}tokens')"
            )
        return value

    @field_validator("max_duration", "hard_stop")
    @classmethod
    def _is_duration(cls, value: str | None) -> str | None:
        if value is not None and not re.match(DURATION_PATTERN, str(value)):
            raise ValueError(
                f"expected a duration like '200steps', '2epochs', '5e6tokens' or '1chinchilla', got {value!r}"
            )
        return value


class StorageSection(Section):
    """Remote storage for ``s3://`` paths (save folder, load path, data, uploads). Unset values come from
    ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY`` and ``AWS_DEFAULT_REGION``;
    the keys are redacted from the saved config and never logged."""

    endpoint_url: str | None = None
    """An S3-compatible server (MinIO, R2, moto ...); None: ``AWS_ENDPOINT_URL``, else AWS itself."""
    aws_access_key_id: str | None = None
    """The access key id; None: ``AWS_ACCESS_KEY_ID`` (redacted from the saved config)."""
    aws_secret_access_key: str | None = None
    """The secret access key; None: ``AWS_SECRET_ACCESS_KEY`` (redacted from the saved config, never logged)."""
    region: str | None = None
    """The bucket's region; None: ``AWS_DEFAULT_REGION``."""
    work_folder: str | None = None
    """Local copies of a remote save folder are written here first; None: ``$HONING_CACHE_DIR/work``."""
    retry_initial_seconds: float = Field(default=1.0, gt=0)
    """The wait before an upload's first retry, in seconds; each later retry waits twice as long as the last."""
    retry_max_seconds: float = Field(default=60.0, gt=0)
    """The longest wait between upload retries, in seconds."""
    upload_wait_seconds: float = Field(default=600.0, ge=0)
    """How many seconds the end of training waits for uploads still running."""
