"""The GRPO recipe's parts beside training: the validation pass over ``data.validation`` (sampled by
``grpo.validation``, scored by ``grpo.rewards`` at each ``callbacks.evaluator`` evaluation) and the rollout backend
``grpo.use_vllm`` asks for."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from honing.config.grpo_loss_schema import weighted_rewards
from honing.distributed import is_rank0
from honing.errors import DataError
from honing.methods.grpo_validation import RewardValidation
from honing.rl.rewards import RewardScorer
from honing.train.callbacks.base import Callback
from honing.train.callbacks.evaluate_before_training import EvaluateBeforeTrainingCallback

if TYPE_CHECKING:
    from honing.config import RunConfig

log = logging.getLogger(__name__)


def wants_reward_validation(config: RunConfig) -> bool:
    """Whether the held-out prompts of ``data.validation`` are read for the evaluator (enabled, and given)."""
    return config.data.validation is not None and config.callbacks.evaluator.enabled


def reward_validation(eval_batches: Any, section: Any, seed: int) -> RewardValidation | None:
    """How the train module answers the held-out prompts at an evaluation (``section``: the method's, with its
    rewards and ``validation``); None without validation batches. The rewards are tried on the first held-out batch
    first, so rows they cannot score fail before training does."""
    if eval_batches is None:
        return None
    check_held_out_columns(eval_batches, weighted_rewards(section))
    return RewardValidation.from_section(section.validation, seed)


def with_evaluation_before_training(callbacks: dict[str, Callback], section: Any) -> dict[str, Callback]:
    """The recipe's callbacks, plus one evaluation of the held-out prompts before step 1 when
    ``grpo.validation.before_training`` asks for it (and there is an evaluator)."""
    if section.validation.before_training and "evaluator" in callbacks:
        callbacks["evaluate_before_training"] = EvaluateBeforeTrainingCallback(callbacks["evaluator"])
    return callbacks


def check_held_out_columns(batches: Any, rewards: list[tuple[str, float]]) -> None:
    """Score empty completions of the first held-out batch: a reward that needs a column the held-out rows lack
    (e.g. countdown's ``target``) fails here, naming the reward, not at the first evaluation hours in."""
    batch = next(iter(batches), None)
    if batch is None:
        return
    prompts = list(batch["prompt"])
    empty = [[{"role": "assistant", "content": ""}] if isinstance(p, list) else "" for p in prompts]
    columns = {**batch["columns"], "completion_ids": [[] for _ in prompts]}
    try:
        RewardScorer(rewards).score(prompts, empty, columns)
    except DataError as error:
        raise DataError(
            f"data.validation: the held-out prompts cannot be scored by the rewards ({error}); give them the columns "
            "the rewards read, as the training rows have, or set callbacks.evaluator.enabled: false"
        ) from error


#: why honing's own decoder samples when ``use_vllm`` asks for a rollout server and none is configured or found
NO_ROLLOUT_SERVER = "no rollout server answers at http://localhost:8000 (make vllm-serve starts one on a CUDA machine)"


def announce_rollout_backend(section: Any, method: str = "grpo", reason: str = NO_ROLLOUT_SERVER) -> None:
    """One info line when ``<method>.use_vllm`` asks for vLLM rollouts that honing's own decoder samples instead,
    saying why."""
    if section.use_vllm and is_rank0():
        log.info("%s.use_vllm: %s; honing's own decoder samples the completions", method, reason)
