"""GRPO's entropy bonus (``grpo.entropy_coef``, ``use_adaptive_entropy``) against TRL's own ``_compute_loss``: the
loss and every gradient of one optimizer step equal TRL's, and the adaptive coefficient moves as TRL's does; the
controller's state survives a checkpoint."""

from __future__ import annotations

import copy

import pytest
import torch

from honing.methods.grpo_entropy import token_entropies
from honing.methods.grpo_entropy_bonus import EntropyBonus
from tests.helpers import tiny_llama
from tests.methods.test_grpo import TEMPERATURE, honing_module, rollouts, trl_trainer

pytest.importorskip("trl")
from trl.trainer.utils import add_fused_lm_head, entropy_from_logits  # noqa: E402


def test_token_entropies_equal_trls():
    logits = torch.randn(3, 5, 11, generator=torch.Generator().manual_seed(0))
    expected = entropy_from_logits(logits / TEMPERATURE)
    torch.testing.assert_close(token_entropies(logits, TEMPERATURE), expected, rtol=0, atol=1e-6)


def trl_step(model, *, loss_type, micro_batches, coef, adaptive, target, last_entropy):
    """One optimizer step of TRL's loss over the test rollouts; the trainer (its coefficient after the step)."""
    prompt_ids, prompt_mask, completion_ids, completion_mask, advantages = rollouts()
    trainer = trl_trainer(model, loss_type=loss_type, beta=0.0, epsilon=0.2, epsilon_high=0.28,
                          accumulation=micro_batches)  # fmt: skip
    for name, value in dict(_entropy_bonus_enabled=True, entropy_coef=coef, use_adaptive_entropy=adaptive,
                            _last_world_entropy=last_entropy, _entropy_window_stats=None).items():  # fmt: skip
        object.__setattr__(trainer, name, value)
    trainer.args.__dict__.update(entropy_target=target, entropy_coef_delta=0.05, entropy_coef_min=0.0,
                                 entropy_coef_max=1.0)  # fmt: skip
    rows, total = len(prompt_ids) // micro_batches, 0.0
    for index, start in enumerate(range(0, len(prompt_ids), rows)):
        part = slice(start, start + rows)
        trainer.accelerator.sync_gradients = index == micro_batches - 1  # the accumulation window's end
        inputs = {"prompt_ids": prompt_ids[part], "prompt_mask": prompt_mask[part],
                  "completion_ids": completion_ids[part], "completion_mask": completion_mask[part],
                  "advantages": advantages[part], "num_items_in_batch": completion_mask.sum()}  # fmt: skip
        loss = trainer._compute_loss(model, inputs)
        loss.backward()
        total += loss.item()
    return trainer, total


def honing_step(model, *, loss_type, micro_batches, bonus):
    """The same step through honing's GRPO train module with ``bonus``."""
    prompt_ids, prompt_mask, completion_ids, completion_mask, advantages = rollouts()
    rows = len(prompt_ids) // micro_batches
    per_group = {"micro_batch_size": max(rows // 4, 1), "micro_batch_completions": rows if rows % 4 else None}
    module = honing_module(model, loss_type=loss_type, beta=0.0, epsilon=0.2, epsilon_high=0.28, **per_group)
    module.entropy_bonus = bonus
    module.learn({"input_ids": torch.cat([prompt_ids, completion_ids], 1),
                  "attention_mask": torch.cat([prompt_mask, completion_mask], 1), "completion_ids": completion_ids,
                  "completion_mask": completion_mask, "advantages": advantages})  # fmt: skip
    return module


@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
@pytest.mark.parametrize("micro_batches", [1, 2])
@pytest.mark.parametrize("adaptive, last_entropy", [(False, float("inf")), (True, 0.1), (True, 9.0)])
def test_loss_gradients_and_adaptive_coefficient_equal_trl(loss_type, micro_batches, adaptive, last_entropy):
    model = tiny_llama(seed=3)
    trl_model = copy.deepcopy(model)
    add_fused_lm_head(trl_model, temperature=TEMPERATURE, outputs=("log_probs", "entropy"))
    target = 3.0  # between the two last entropies: the bonus applied (0.1) or gated off (9.0)
    trainer, trl_loss = trl_step(trl_model, loss_type=loss_type, micro_batches=micro_batches, coef=0.3,
                                 adaptive=adaptive, target=target, last_entropy=last_entropy)  # fmt: skip
    bonus = EntropyBonus(0.3, adaptive, 0.0, 1.0, 0.05, target, last_world_entropy=last_entropy)
    module = honing_step(model, loss_type=loss_type, micro_batches=micro_batches, bonus=bonus)
    assert module._step_loss.item() == pytest.approx(trl_loss, abs=1e-5)
    trl_params = dict(trl_model.named_parameters())
    for name, param in model.named_parameters():
        torch.testing.assert_close(param.grad, trl_params[name].grad, rtol=1e-4, atol=1e-6, msg=name)
    assert bonus.coef == pytest.approx(trainer.entropy_coef, abs=1e-9)  # 0.3 +- 0.05, or unchanged when static
    assert bonus.last_world_entropy == pytest.approx(trainer._last_world_entropy, abs=1e-5)


def test_the_bonus_changes_the_gradient_and_the_controller_state_is_checkpointed():
    model, plain = tiny_llama(seed=3), tiny_llama(seed=3)
    honing_step(plain, loss_type="dapo", micro_batches=1, bonus=None)
    honing_step(model, loss_type="dapo", micro_batches=1, bonus=EntropyBonus(0.3))
    assert not torch.equal(next(model.parameters()).grad, next(plain.parameters()).grad)
    module = honing_step(
        tiny_llama(seed=3), loss_type="dapo", micro_batches=1, bonus=EntropyBonus(0.3, True, target=50.0)
    )
    state = module.extra_state_dict()["entropy_bonus"]  # below the target: the coefficient went up by delta
    assert state["entropy_coef"] == pytest.approx(0.305) and state["last_world_entropy"] < 50.0
    restored = EntropyBonus(0.3, True, target=50.0)
    module.entropy_bonus = restored
    module.load_extra_state_dict({"entropy_bonus": state})
    assert (restored.coef, restored.last_world_entropy) == (state["entropy_coef"], state["last_world_entropy"])
