"""GRPO's off-policy sequence mask (``grpo.off_policy_mask_threshold``) against TRL's own: the mask equals
``GRPOTrainer.get_off_policy_mask``, and a micro-batch's loss and gradients with old log-probs that drop some
completions equal TRL's ``_compute_loss`` with the same ``old_per_token_logps``."""

from __future__ import annotations

import copy

import pytest
import torch

from honing.losses import grpo_loss_scale
from honing.methods.grpo_loss_stats import LossStats
from honing.methods.grpo_off_policy import off_policy_mask
from tests.helpers import tiny_llama
from tests.methods.test_grpo import TEMPERATURE, honing_module, rollouts, trl_trainer

pytest.importorskip("trl")
from trl import GRPOTrainer  # noqa: E402
from trl.trainer.utils import add_fused_lm_head  # noqa: E402


def test_the_mask_equals_trls():
    generator = torch.Generator().manual_seed(1)
    logps, sampling = -torch.rand(6, 5, generator=generator), -torch.rand(6, 5, generator=generator)
    sampling[0, 1] = float("nan")  # a token vLLM could not score: no KL evidence
    mask = torch.ones(6, 5, dtype=torch.long)
    mask[2, 3:] = 0
    advantages = torch.tensor([-1.0, 0.5, -0.2, -0.3, 0.0, -2.0])
    for threshold in (0.0, 0.1, 0.3):
        expected = GRPOTrainer.get_off_policy_mask(advantages.unsqueeze(1), logps, sampling, mask, threshold)
        assert torch.equal(off_policy_mask(advantages, logps, sampling, mask, threshold), expected)


def test_a_micro_batchs_loss_and_gradients_equal_trls_with_the_mask():
    prompt_ids, prompt_mask, completion_ids, completion_mask, advantages = rollouts()
    model = tiny_llama(seed=3)
    trl_model = copy.deepcopy(model)
    add_fused_lm_head(trl_model, temperature=TEMPERATURE, outputs=("log_probs", "entropy"))
    module = honing_module(model, loss_type="dapo", beta=0.0, epsilon=0.2, epsilon_high=0.28, micro_batch_size=2)
    micro = {"input_ids": torch.cat([prompt_ids, completion_ids], 1),
             "attention_mask": torch.cat([prompt_mask, completion_mask], 1), "completion_ids": completion_ids,
             "completion_mask": completion_mask, "advantages": advantages}  # fmt: skip
    with torch.no_grad():  # a sampling policy that differs from the current one, row by row
        shift = torch.linspace(0.0, 0.7, len(prompt_ids)).unsqueeze(1)
        old = (module.logps(model, micro) + shift) * completion_mask
    micro["old_logps"] = old
    threshold = 0.3  # drops the rows of negative advantage whose shift is above it
    dropped = (advantages < 0) & (shift.squeeze(1) > threshold)
    assert 0 < int(dropped.sum()) < int((advantages < 0).sum())  # the mask keeps some and drops some

    trainer = trl_trainer(trl_model, loss_type="dapo", beta=0.0, epsilon=0.2, epsilon_high=0.28, accumulation=1)
    object.__setattr__(trainer, "off_policy_mask_threshold", threshold)
    inputs = {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
              "completion_mask": completion_mask, "advantages": advantages, "old_per_token_logps": old,
              "num_items_in_batch": completion_mask.sum()}  # fmt: skip
    trl_loss = trainer._compute_loss(trl_model, inputs)
    trl_loss.backward()

    module.off_policy_mask_threshold = threshold
    scale = grpo_loss_scale("dapo", sequences=8, tokens=int(completion_mask.sum()), micro_batches=1,
                            max_completion_length=module.max_completion_length)  # fmt: skip
    loss = module.micro_loss(micro, LossStats()) * scale
    loss.backward()
    assert loss.item() == pytest.approx(trl_loss.item(), abs=1e-6)
    trl_params = dict(trl_model.named_parameters())
    for name, param in model.named_parameters():
        torch.testing.assert_close(param.grad, trl_params[name].grad, rtol=1e-4, atol=1e-6, msg=name)
