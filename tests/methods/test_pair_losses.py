"""ORPO and CPO / SimPO: TRL's own loss functions on the same log-probs (to 1e-6), TRL's trainers on the same model
and tokens (loss and metrics), closed forms, micro-batch invariance, and evaluation over filler pairs."""

from __future__ import annotations

import copy
import math
from types import SimpleNamespace

import pytest
import torch

from honing.data.preference.batches import PairCollator
from honing.losses import cpo_loss, orpo_loss
from honing.methods.pair_losses import CPOLoss, DPOLoss, ORPOLoss
from honing.methods.pairs import PairTrainModule
from honing.optim.param_groups import build_adamw
from tests.helpers import tiny_llama
from tests.methods.test_dpo import PAIRS, Recorder, chatml_tokenizer

PAIR_METRICS = (
    "rewards/chosen",
    "rewards/rejected",
    "rewards/accuracies",
    "rewards/margins",
    "logps/chosen",
    "logps/rejected",
    "nll_loss",
)
CPO_CASES = [
    ("sigmoid", 0.0, 0.0),
    ("sigmoid", 0.2, 0.0),
    ("hinge", 0.0, 0.0),
    ("ipo", 0.0, 0.0),
    ("simpo", 0.0, 0.0),
    ("simpo", 0.1, 0.0),
    ("simpo", 0.0, 0.25),  # AlphaPO
    ("sigmoid", 0.0, -0.5),
]


def logps(seed: int, rows: int = 64, *, mean: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Chosen and rejected log-probs: summed ones (down to -40), or token means (down to -4, some near 0 and some
    either side of -ln 2, where TRL's log1mexp switches formula)."""
    generator = torch.Generator().manual_seed(seed)
    low = 4.0 if mean else 40.0
    values = -low * torch.rand(2, rows, generator=generator) - 1e-3
    return values[0], values[1]


# --- TRL's own loss functions on the same tensors ------------------------------------------------------------------
def test_orpo_equals_trls_odds_ratio_loss():
    from trl.experimental.orpo import ORPOTrainer

    chosen, rejected = logps(0, mean=True)
    stand_in = SimpleNamespace(beta=0.25, accelerator=SimpleNamespace(device="cpu"))
    trl_losses, trl_chosen, trl_rejected, trl_ratio, trl_log_odds = ORPOTrainer.odds_ratio_loss(
        stand_in, chosen, rejected
    )
    losses, log_odds = orpo_loss(chosen, rejected, beta=0.25)
    torch.testing.assert_close(losses, -trl_losses, atol=1e-6, rtol=0)  # TRL subtracts its term from the NLL
    assert log_odds.mean().item() == pytest.approx(trl_log_odds.item(), abs=1e-6)

    lengths = torch.tensor([[3, 5]]).expand(len(chosen), 2)
    terms = ORPOLoss(beta=0.25).terms(torch.stack([chosen * 3, rejected * 5], 1), lengths, None)
    torch.testing.assert_close(terms["losses"], -trl_losses, atol=1e-6, rtol=0)
    torch.testing.assert_close(terms["chosen_rewards"], trl_chosen, atol=1e-6, rtol=0)
    torch.testing.assert_close(terms["rejected_rewards"], trl_rejected, atol=1e-6, rtol=0)
    assert terms["log_odds_ratio"].mean().item() == pytest.approx(trl_ratio.item(), abs=1e-6)
    assert terms["log_odds_chosen"].mean().item() == pytest.approx(trl_log_odds.item(), abs=1e-6)


@pytest.mark.parametrize(("loss_type", "label_smoothing", "alpha"), CPO_CASES)
def test_cpo_and_simpo_equal_trls_cpo_loss(loss_type, label_smoothing, alpha):
    from trl.experimental.cpo import CPOTrainer

    mean = loss_type in ("ipo", "simpo")
    chosen, rejected = logps(1, mean=mean)
    settings = dict(beta=0.3, loss_type=loss_type, label_smoothing=label_smoothing, simpo_gamma=0.7, alpha=alpha)
    stand_in = SimpleNamespace(**settings, accelerator=SimpleNamespace(device="cpu"))
    trl_losses, trl_chosen, trl_rejected = CPOTrainer.cpo_loss(stand_in, chosen, rejected)
    torch.testing.assert_close(cpo_loss(chosen, rejected, **settings), trl_losses, atol=1e-6, rtol=0)

    # the part: summed log-probs and token counts in, token means taken where TRL averages
    lengths = torch.tensor([[4, 2]]).expand(len(chosen), 2)
    summed = torch.stack([chosen * 4, rejected * 2], 1) if mean else torch.stack([chosen, rejected], 1)
    terms = CPOLoss(cpo_alpha=0.0, **settings).terms(summed, lengths, None)
    torch.testing.assert_close(terms["losses"], trl_losses, atol=1e-6, rtol=0)
    torch.testing.assert_close(terms["chosen_rewards"], trl_chosen, atol=1e-6, rtol=0)
    torch.testing.assert_close(terms["rejected_rewards"], trl_rejected, atol=1e-6, rtol=0)


def test_closed_forms_when_chosen_and_rejected_are_equally_likely():
    same = torch.full((3,), -1.5)
    assert orpo_loss(same, same, beta=0.1)[0].tolist() == pytest.approx([0.1 * math.log(2)] * 3, abs=1e-7)
    assert cpo_loss(same, same, beta=0.1).tolist() == pytest.approx([math.log(2)] * 3, abs=1e-7)
    # SimPO's margin: −log σ(−γ) with nothing between the replies yet
    simpo = cpo_loss(same, same, beta=2.0, loss_type="simpo", simpo_gamma=0.5)
    assert simpo.tolist() == pytest.approx([-math.log(1 / (1 + math.exp(0.5)))] * 3, abs=1e-6)
    assert cpo_loss(same, same, beta=0.5, loss_type="ipo").tolist() == pytest.approx([1.0] * 3)


# --- TRL's trainers on the same model and tokens ----------------------------------------------------------------
def trl_trainer(kind: str, tmp_path, **settings):
    """TRL's ORPOTrainer or CPOTrainer on a tiny Llama (fp32) a few steps into training, and its tokenized pairs."""
    from datasets import Dataset

    if kind == "orpo":
        from trl.experimental.orpo import ORPOConfig as Config
        from trl.experimental.orpo import ORPOTrainer as Trainer
    else:
        from trl.experimental.cpo import CPOConfig as Config
        from trl.experimental.cpo import CPOTrainer as Trainer
    tokenizer = chatml_tokenizer()
    model = tiny_llama(vocab=len(tokenizer), seed=3)
    with torch.no_grad():  # rewards and margins away from their starting values
        generator = torch.Generator().manual_seed(0)
        for param in model.parameters():
            param.add_(0.05 * torch.randn(param.shape, generator=generator))
    rows = [{"prompt": p, "chosen": c, "rejected": r} for p, c, r in PAIRS]
    args = Config(str(tmp_path), per_device_train_batch_size=len(rows), use_cpu=True, bf16=False, report_to=[],
                  max_length=128, **settings)  # fmt: skip
    trainer = Trainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer)
    return trainer, [trainer.train_dataset[i] for i in range(len(rows))]


def as_pairs(items):
    """TRL's tokenized rows as honing's pairs: the prompt's ids, and what follows them in each full sequence."""
    pairs = []
    for item in items:
        prompt = item["prompt_input_ids"]
        assert item["chosen_input_ids"][: len(prompt)] == prompt == item["rejected_input_ids"][: len(prompt)]
        pairs.append(
            {
                "prompt_ids": prompt,
                "chosen_ids": item["chosen_input_ids"][len(prompt) :],
                "rejected_ids": item["rejected_input_ids"][len(prompt) :],
            }
        )
    return pairs


def honing_step(model, loss, pairs, *, micro_batch_size, **options):
    """One step of honing's pair module: its metrics and its gradients."""
    module = PairTrainModule(
        model,
        build_adamw(model, lr=1e-3, weight_decay=0.0, betas=(0.9, 0.95), eps=1e-8),
        loss=loss,
        micro_batch_size=micro_batch_size,
        collator=PairCollator(0),
        grad_clip=None,
        **options,
    )
    module.trainer = Recorder()
    model.zero_grad(set_to_none=True)
    module.train_batch(PairCollator(0)(pairs))
    grads = {name: param.grad.clone() for name, param in model.named_parameters()}
    return module, module.trainer.metrics, grads


@pytest.mark.parametrize(
    ("kind", "settings"),
    [
        ("orpo", {"beta": 0.2}),
        ("cpo", {"loss_type": "sigmoid", "cpo_alpha": 1.0}),
        ("cpo", {"loss_type": "simpo", "cpo_alpha": 0.0, "simpo_gamma": 0.5, "beta": 2.0}),
        ("cpo", {"loss_type": "ipo", "cpo_alpha": 0.5}),
    ],
    ids=["orpo", "cpo", "simpo", "ipo"],
)
def test_a_step_equals_trls_trainer(tmp_path, kind, settings):
    trainer, items = trl_trainer(kind, tmp_path, **settings)
    trainer.model.zero_grad(set_to_none=True)
    trl_loss, trl_metrics = trainer.get_batch_loss_metrics(trainer.model, trainer.data_collator(items), "train")
    trl_loss.backward()
    trl_grads = {name: param.grad.clone() for name, param in trainer.model.named_parameters()}

    if kind == "orpo":
        loss = ORPOLoss(beta=settings["beta"])
    else:
        loss = CPOLoss(**settings)
    _, metrics, grads = honing_step(trainer.model, loss, as_pairs(items), micro_batch_size=len(items))
    assert metrics["train/loss"] == pytest.approx(trl_loss.item(), abs=1e-5)
    names = PAIR_METRICS + (("log_odds_ratio", "log_odds_chosen") if kind == "orpo" else ())
    for name in names:
        if kind == "cpo" and settings["cpo_alpha"] == 0.0 and name == "nll_loss":
            continue  # TRL logs 0 when the term is off; honing logs the NLL all the same
        assert metrics[f"train/{name}"] == pytest.approx(trl_metrics[name], abs=1e-5), name
    assert 0 < trl_metrics["rewards/accuracies"] < 1  # the pairs disagree: the comparison is not degenerate
    for name, grad in trl_grads.items():
        torch.testing.assert_close(grads[name], grad, atol=1e-6, rtol=1e-4, msg=name)


@pytest.mark.parametrize("loss", [ORPOLoss(beta=0.1), CPOLoss(loss_type="simpo", cpo_alpha=0.3)], ids=["orpo", "cpo"])
def test_the_step_does_not_depend_on_the_micro_batches(loss):
    pairs = as_pairs(trl_items())
    model = tiny_llama(vocab=300, seed=1)
    _, whole, whole_grads = honing_step(model, loss, pairs, micro_batch_size=len(pairs))
    _, split, split_grads = honing_step(model, loss, pairs, micro_batch_size=1)
    for key, value in whole.items():
        assert split[key] == pytest.approx(value, abs=1e-6), key
    for name, grad in whole_grads.items():
        torch.testing.assert_close(split_grads[name], grad, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("loss", [ORPOLoss(), DPOLoss(rpo_alpha=0.5)], ids=["orpo", "dpo"])
def test_evaluation_counts_no_filler_pair_and_stays_finite(loss):
    # the filler a rank evaluates when it has run out of validation batches (every rank of a sharded model must
    # take part in each forward): a full forward that scores nothing
    pairs = as_pairs(trl_items())
    model = tiny_llama(vocab=300, seed=1)
    reference = {"reference": "copy", "reference_model": copy.deepcopy(model)} if loss.uses_reference else {}
    module, _, _ = honing_step(model, loss, pairs, micro_batch_size=2, **reference)
    collator = PairCollator(0)
    real, filler = module.eval_batch(collator(pairs)), module.eval_batch(collator.filler(collator(pairs)))
    assert all(torch.isfinite(value) for value in filler.values())
    assert filler["pairs"].item() == 0 and filler["chosen_tokens"].item() == 0
    metrics = module.eval_metrics({key: float(real[key] + filler[key]) for key in real})
    assert metrics == module.eval_metrics({key: float(value) for key, value in real.items()})
    orpo = {"nll_loss", "log_odds_ratio", "log_odds_chosen"} if isinstance(loss, ORPOLoss) else set()
    assert set(metrics) == {"loss", *PAIR_METRICS} - {"nll_loss"} | orpo  # DPO logs no NLL, as TRL's


def trl_items():
    """The pairs tokenized as TRL's ORPOTrainer tokenizes them (byte tokens, EOS after each reply)."""
    tokenizer = chatml_tokenizer()
    eos = tokenizer.eos_token_id
    return [
        {
            "prompt_input_ids": list(p.encode()),
            "chosen_input_ids": list(p.encode()) + list(c.encode()) + [eos],
            "rejected_input_ids": list(p.encode()) + list(r.encode()) + [eos],
        }
        for p, c, r in PAIRS
    ]
