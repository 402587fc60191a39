"""KTO: the loss equals TRL's KTOTrainer on the same log-probs (to 1e-6, both loss types, with weights), the
closed form of the first step (policy = reference: 0.5 a row), and a whole step equals TRL's trainer on the same model
and tokens (loss, metrics, gradients)."""

from __future__ import annotations

import copy
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

from honing.data.preference.kto_rows import KTOCollator, with_batch_kl_completions
from honing.methods.kto import KTOTrainModule
from honing.methods.kto_loss import KTOLoss, kl_estimate, kl_sums, kto_losses
from honing.optim.param_groups import build_adamw
from tests.helpers import tiny_llama
from tests.methods.test_dpo import PAIRS, Recorder, chatml_tokenizer

CASES = [("kto", 1.0, 1.0), ("kto", 1.33, 0.7), ("apo_zero_unpaired", 1.0, 1.0), ("apo_zero_unpaired", 0.8, 1.5)]
TRL_METRICS = ("rewards/chosen", "rewards/rejected", "rewards/margins", "logps/chosen", "logps/rejected", "kl")


class FakeModel:
    """Stands in for the model TRL's ``_compute_loss`` calls: the sequence ``[i, s]`` (row i, s = 0 its completion,
    1 its mismatched completion) gets the log-prob ``table[s][i]`` on its one completion token."""

    training = True

    def __init__(self, completion: torch.Tensor, mismatched: torch.Tensor):
        self.table = torch.stack([completion, mismatched])

    def __call__(self, *, input_ids, labels, **_):
        log_probs = self.table[input_ids[:, 1], input_ids[:, 0]][:, None]
        return SimpleNamespace(log_probs=log_probs, entropy=torch.zeros_like(log_probs), mean_logits=log_probs * 0)


def trl_loss_and_metrics(logps, ref_logps, kl_logps, ref_kl_logps, desirable, **settings):
    """TRL's own ``KTOTrainer._compute_loss`` on these log-probs (its precomputed-reference path)."""
    from trl import KTOTrainer

    rows = len(logps)
    index = torch.arange(rows)
    ones = torch.ones(rows, 2, dtype=torch.long)
    batch = {
        "input_ids": torch.stack([index, index * 0], 1),
        "attention_mask": ones,
        "completion_mask": torch.tensor([[0, 1]]).expand(rows, 2),
        "KL_input_ids": torch.stack([index, index * 0 + 1], 1),
        "KL_attention_mask": ones,
        "KL_completion_mask": torch.tensor([[0, 1]]).expand(rows, 2),
        "label": desirable,
        "ref_logps": ref_logps,
        "ref_KL_logps": ref_kl_logps,
    }
    stand_in = SimpleNamespace(
        **settings,
        model=FakeModel(logps, kl_logps),
        accelerator=SimpleNamespace(device="cpu", gather_for_metrics=lambda value: value),
        calculate_KL=settings["loss_type"] != "apo_zero_unpaired",
        precompute_ref_logps=True,
        aux_loss_enabled=False,
        _metrics=defaultdict(lambda: defaultdict(list)),
        _total_train_tokens=0,
        _tp_size=1,
    )
    stand_in._compute_kl_logps = lambda model, inputs: KTOTrainer._compute_kl_logps(stand_in, model, inputs)
    loss = KTOTrainer._compute_loss(stand_in, stand_in.model, batch, return_outputs=False)
    return loss, {name: values[-1] for name, values in stand_in._metrics["train"].items()}


def random_logps(seed: int, rows: int = 64):
    """Summed log-probs (down to -40) of completions and mismatched completions under a policy and a reference
    near it, and labels of both kinds."""
    generator = torch.Generator().manual_seed(seed)
    logps, kl_logps = -40 * torch.rand(2, rows, generator=generator)
    ref_logps = logps + torch.randn(rows, generator=generator)
    ref_kl_logps = kl_logps - 0.5 + torch.randn(rows, generator=generator)  # a positive KL estimate
    desirable = torch.rand(rows, generator=generator) < 0.4
    return logps, ref_logps, kl_logps, ref_kl_logps, desirable


@pytest.mark.parametrize(("loss_type", "desirable_weight", "undesirable_weight"), CASES)
def test_the_loss_equals_trls_kto_trainer(loss_type, desirable_weight, undesirable_weight):
    logps, ref_logps, kl_logps, ref_kl_logps, desirable = random_logps(0)
    settings = dict(
        beta=0.25, loss_type=loss_type, desirable_weight=desirable_weight, undesirable_weight=undesirable_weight
    )
    trl_loss, trl_metrics = trl_loss_and_metrics(logps, ref_logps, kl_logps, ref_kl_logps, desirable, **settings)

    real = torch.ones(len(logps), dtype=torch.bool)
    kl = kl_estimate(kl_sums(kl_logps, ref_kl_logps, real))
    if loss_type == "kto":
        assert kl.item() == pytest.approx(trl_metrics["kl"], abs=1e-6) and kl.item() > 0
    losses = kto_losses(logps, ref_logps, desirable, kl, **settings)
    assert losses.mean().item() == pytest.approx(trl_loss.item(), abs=1e-6)

    # the part, as the step calls it: columns (completion, mismatched completion)
    terms = KTOLoss(**settings).row_terms(torch.stack([logps, kl_logps], 1), (ref_logps, ref_kl_logps), desirable, kl)
    assert terms["losses"].mean().item() == pytest.approx(trl_loss.item(), abs=1e-6)
    chosen, rejected = terms["rewards"][desirable].mean(), terms["rewards"][~desirable].mean()
    assert chosen.item() == pytest.approx(trl_metrics["rewards/chosen"], abs=1e-6)
    assert rejected.item() == pytest.approx(trl_metrics["rewards/rejected"], abs=1e-6)
    assert (chosen - rejected).item() == pytest.approx(trl_metrics["rewards/margins"], abs=1e-6)
    assert terms["logps"][desirable].mean().item() == pytest.approx(trl_metrics["logps/chosen"], abs=1e-5)


def test_the_kl_estimate_is_clamped_at_zero_and_counts_real_rows_only():
    logps = torch.tensor([-3.0, -4.0, -5.0])
    assert kl_estimate(kl_sums(logps, logps + 1.0, torch.ones(3, dtype=torch.bool))).item() == 0.0  # −1, clamped
    sums = kl_sums(logps, logps - torch.tensor([1.0, 2.0, 100.0]), torch.tensor([True, True, False]))
    assert sums.tolist() == [3.0, 2.0] and kl_estimate(sums).item() == 1.5


@pytest.mark.parametrize("loss_type", ["kto", "apo_zero_unpaired"])
def test_with_the_reference_equal_to_the_policy_every_row_loses_one_half(loss_type):
    logps, _, kl_logps, _, desirable = random_logps(1)
    kl = kl_estimate(kl_sums(kl_logps, kl_logps, torch.ones(len(logps), dtype=torch.bool)))
    assert kl.item() == 0.0
    losses = kto_losses(logps, logps, desirable, kl, beta=0.1, loss_type=loss_type)
    assert losses.tolist() == [0.5] * len(logps)


# --- a whole step against TRL's trainer on the same model and tokens ------------------------------------------------
def trl_trainer(tmp_path, **settings):
    """TRL's KTOTrainer on a tiny Llama (fp32) moved away from its reference, and its tokenized rows (the KL
    completions its data preparation assigns)."""
    from datasets import Dataset
    from trl import KTOConfig, KTOTrainer

    tokenizer = chatml_tokenizer()
    model = tiny_llama(vocab=len(tokenizer), seed=3)
    reference = copy.deepcopy(model)
    with torch.no_grad():  # rewards and the KL estimate away from 0
        generator = torch.Generator().manual_seed(0)
        for param in model.parameters():
            param.add_(0.05 * torch.randn(param.shape, generator=generator))
    rows = [{"prompt": p, "completion": c, "label": True} for p, c, _ in PAIRS]
    rows += [{"prompt": p, "completion": r, "label": False} for p, _, r in PAIRS]
    settings.setdefault("per_device_train_batch_size", len(rows))
    args = KTOConfig(str(tmp_path), use_cpu=True, bf16=False, report_to=[],
                     max_length=128, gradient_checkpointing=False, disable_dropout=True, **settings)  # fmt: skip
    trainer = KTOTrainer(
        model=model, ref_model=reference, args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer
    )
    return trainer, [trainer.train_dataset[i] for i in range(len(rows))]


def as_rows(items):
    """TRL's tokenized rows as honing's: prompt, completion and mismatched completion, and the label."""
    return [
        {
            "prompt_ids": item["prompt_ids"],
            "chosen_ids": item["completion_ids"],
            "rejected_ids": item["KL_completion_ids"],
            "desirable": item["label"],
        }
        for item in items
    ]


@pytest.mark.parametrize(
    "settings",
    [{"beta": 0.3}, {"beta": 0.2, "desirable_weight": 1.5, "undesirable_weight": 0.5}],
    ids=["kto", "weights"],
)
def test_a_step_equals_trls_trainer(tmp_path, settings):
    trainer, items = trl_trainer(tmp_path, **settings)
    trainer.model.zero_grad(set_to_none=True)
    trl_loss = trainer.compute_loss(trainer.model, trainer.data_collator(items))
    trl_metrics = {name: values[-1] for name, values in trainer._metrics["train"].items()}
    trl_loss.backward()
    trl_grads = {name: param.grad.clone() for name, param in trainer.model.named_parameters()}

    model = trainer.model
    module = KTOTrainModule(
        model,
        build_adamw(model, lr=1e-3, weight_decay=0.0, betas=(0.9, 0.95), eps=1e-8),
        loss=KTOLoss(**settings),
        reference="copy",
        reference_model=trainer.ref_model,
        micro_batch_size=len(items),
        collator=KTOCollator(0),
        grad_clip=None,
    )
    module.trainer = Recorder()
    model.zero_grad(set_to_none=True)
    module.train_batch(KTOCollator(0)(as_rows(items)))
    metrics = module.trainer.metrics
    assert metrics["train/loss"] == pytest.approx(trl_loss.item(), abs=1e-5)
    assert trl_metrics["kl"] > 0 and trl_metrics["rewards/margins"] != 0  # not the degenerate first step
    for name in TRL_METRICS:
        assert metrics[f"train/{name}"] == pytest.approx(trl_metrics[name], abs=1e-5), name
    for name, grad in trl_grads.items():
        torch.testing.assert_close(model.get_parameter(name).grad, grad, atol=1e-6, rtol=1e-4, msg=name)


# --- kto.kl_pairing: batch, TRL's mismatched completions ------------------------------------------------------------
def test_batch_kl_completions_are_trls_and_a_batch_step_equals_trls_trainer(tmp_path):
    rows_per_batch = 3  # 8 rows: TRL's batches of 3, 3 and 2, each rotated by its own add_kl_completion_ids
    trainer, items = trl_trainer(tmp_path, beta=0.3, per_device_train_batch_size=rows_per_batch)
    unpaired = [{**row, "rejected_ids": row["chosen_ids"]} for row in as_rows(items)]  # no KL completion of TRL's
    paired = with_batch_kl_completions(unpaired, rows_per_batch, seq_len=128)
    assert [row["rejected_ids"] for row in paired] == [item["KL_completion_ids"] for item in items]
    assert paired[0]["rejected_ids"] == items[2]["completion_ids"]  # the first row takes its batch's last

    first = items[:rows_per_batch]  # TRL's first per-device batch (its sequential sampler)
    trainer.model.zero_grad(set_to_none=True)
    trl_loss = trainer.compute_loss(trainer.model, trainer.data_collator(first))
    trl_kl = trainer._metrics["train"]["kl"][-1]
    trl_loss.backward()
    trl_grads = {name: param.grad.clone() for name, param in trainer.model.named_parameters()}
    model = trainer.model
    collator = KTOCollator(0, kl_rows=rows_per_batch, seq_len=128)
    module = KTOTrainModule(
        model,
        build_adamw(model, lr=1e-3, weight_decay=0.0, betas=(0.9, 0.95), eps=1e-8),
        loss=KTOLoss(beta=0.3),
        reference="copy",
        reference_model=trainer.ref_model,
        micro_batch_size=rows_per_batch,
        collator=collator,
        grad_clip=None,
    )
    module.trainer = Recorder()
    model.zero_grad(set_to_none=True)
    module.train_batch(collator(unpaired[:rows_per_batch]))
    metrics = module.trainer.metrics
    assert trl_kl > 0
    assert abs(metrics["train/loss"] - trl_loss.item()) < 1e-6
    # the KL is a difference of summed log-probs (~1e2 in float32): equal to their rounding, not to 1e-6 absolute
    assert metrics["train/kl"] == pytest.approx(trl_kl, rel=1e-5)
    for name, grad in trl_grads.items():
        torch.testing.assert_close(model.get_parameter(name).grad, grad, atol=1e-6, rtol=1e-4, msg=name)
