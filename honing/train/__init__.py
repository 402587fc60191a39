"""The method-agnostic trainer: the loop, durations, metrics, checkpoints and callbacks. OLMo-core's
``TrainerConfig`` / ``CheckpointerConfig`` live at the edge, in ``honing.interop.olmo_core``."""

from honing.distributed import prepare_training_environment, teardown_training_environment
from honing.train.callbacks.base import Callback
from honing.train.checkpoint import Checkpointer
from honing.train.common import LoadStrategy, StepSkipRange
from honing.train.duration import Duration, DurationUnit
from honing.train.metrics import MetricMergeStrategy, ReduceType
from honing.train.train_module import TrainModule
from honing.train.trainer import Trainer

__all__ = [
    "Callback",
    "Checkpointer",
    "Duration",
    "DurationUnit",
    "LoadStrategy",
    "MetricMergeStrategy",
    "ReduceType",
    "StepSkipRange",
    "Trainer",
    "TrainModule",
    "prepare_training_environment",
    "teardown_training_environment",
]
