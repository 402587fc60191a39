"""DPOTrainModule: TRL's DPOTrainer numbers on the same model and batch, GA invariance, whole pairs per micro-batch."""

from __future__ import annotations

import contextlib
import copy

import pytest
import torch

from honing.data.chat.conversation import ensure_special_tokens, resolve_chat_template
from honing.data.preference.batches import PairCollator
from honing.data.tokenizer import build_tokenizer
from honing.methods.dpo import DPOTrainModule
from honing.optim.param_groups import build_adamw
from tests.helpers import tiny_llama

METRICS = (
    "rewards/chosen",
    "rewards/rejected",
    "rewards/accuracies",
    "rewards/margins",
    "logps/chosen",
    "logps/rejected",
)
PAIRS = [
    ("What is 2 + 3?", "5", "6"),
    ("Reverse: abc", "cba", "abc!"),
    ("Say hello to the whole world, please", "Hello, world!", "no"),
    ("1 + 1", "2", "11"),
]


class Recorder:
    """The trainer's side of a train module: the metrics it records."""

    global_step, max_steps = 1, 1

    def __init__(self):
        self.metrics: dict[str, float] = {}

    def record_metric(self, name, value, reduce_type=None, **_):
        self.metrics[name] = float(value)


def chatml_tokenizer():
    tokenizer = build_tokenizer("byte")
    tokenizer.chat_template = resolve_chat_template(tokenizer, "chatml")
    ensure_special_tokens(tokenizer, "chatml")
    return tokenizer


def honing_module(policy, reference, *, micro_batch_size, **dpo):
    module = DPOTrainModule(
        policy,
        build_adamw(policy, lr=1e-3, weight_decay=0.0, betas=(0.9, 0.95), eps=1e-8),
        reference="copy",
        reference_model=reference,
        micro_batch_size=micro_batch_size,
        collator=PairCollator(0),
        grad_clip=None,
        **dpo,
    )
    module.trainer = Recorder()
    return module


@pytest.fixture(scope="module")
def trl_trainer(tmp_path_factory):
    """TRL's DPOTrainer on a tiny Llama (fp32) whose policy has moved away from its reference copy."""
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    tokenizer = chatml_tokenizer()
    policy = tiny_llama(vocab=len(tokenizer), seed=3)
    reference = copy.deepcopy(policy)
    with torch.no_grad():  # a policy a few steps into training: rewards and margins are not zero
        generator = torch.Generator().manual_seed(0)
        for param in policy.parameters():
            param.add_(0.05 * torch.randn(param.shape, generator=generator))
    rows = [
        {"prompt": [{"role": "user", "content": p}], "chosen": [{"role": "assistant", "content": c}],
         "rejected": [{"role": "assistant", "content": r}]}
        for p, c, r in PAIRS
    ]  # fmt: skip
    args = DPOConfig(
        str(tmp_path_factory.mktemp("trl")),
        per_device_train_batch_size=len(rows),
        use_cpu=True,
        bf16=False,  # TRL's default autocasts the policy only; the comparison is in fp32
        report_to=[],
        max_length=128,
        beta=0.1,
    )
    trainer = DPOTrainer(
        model=policy, ref_model=reference, args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer
    )
    items = [trainer.train_dataset[i] for i in range(len(rows))]
    return trainer, items


@pytest.mark.parametrize(
    ("loss_type", "label_smoothing"), [("sigmoid", 0.0), ("hinge", 0.0), ("ipo", 0.0), ("robust", 0.2)]
)
def test_loss_and_metrics_equal_trl(trl_trainer, loss_type, label_smoothing):
    trainer, items = trl_trainer
    trainer.loss_types, trainer.loss_weights, trainer.label_smoothing = [loss_type], [1.0], label_smoothing
    trainer._metrics["train"].clear()
    trl_loss = trainer.compute_loss(trainer.model, trainer.data_collator(items)).item()
    trl_metrics = {name: values[-1] for name, values in trainer._metrics["train"].items()}

    # the same tokenized pairs (TRL's prompt_ids / chosen_ids / rejected_ids) through honing's collator and module
    module = honing_module(
        trainer.model, trainer.ref_model, micro_batch_size=2, loss_type=loss_type, label_smoothing=label_smoothing
    )
    module.train_batch(PairCollator(0)(items))
    assert module.trainer.metrics["train/loss"] == pytest.approx(trl_loss, abs=1e-5)
    for name in METRICS:
        assert module.trainer.metrics[f"train/{name}"] == pytest.approx(trl_metrics[name], abs=1e-5), name
    assert 0 < trl_metrics["rewards/accuracies"] < 1 and abs(trl_metrics["rewards/margins"]) > 1e-3


def test_rpo_term_equals_trl_sigmoid_plus_sft(trl_trainer):
    trainer, items = trl_trainer
    trainer.loss_types, trainer.loss_weights, trainer.label_smoothing = ["sigmoid", "sft"], [1.0, 0.5], 0.0
    trl_loss = trainer.compute_loss(trainer.model, trainer.data_collator(items)).item()
    module = honing_module(trainer.model, trainer.ref_model, micro_batch_size=4, rpo_alpha=0.5)
    module.train_batch(PairCollator(0)(items))
    assert module.trainer.metrics["train/loss"] == pytest.approx(trl_loss, abs=1e-5)


def random_pairs(count, seed=0):
    generator = torch.Generator().manual_seed(seed)

    def ids(low, high):
        return torch.randint(1, 60, (int(torch.randint(low, high, (1,), generator=generator)),), generator=generator)

    return [{"prompt_ids": ids(2, 9).tolist(), "chosen_ids": ids(1, 7).tolist(), "rejected_ids": ids(1, 7).tolist()}
            for _ in range(count)]  # fmt: skip


@pytest.mark.parametrize("options", [{}, {"rpo_alpha": 0.7, "loss_type": "ipo"}])
def test_update_does_not_depend_on_micro_batches(options):
    batch = PairCollator(0)(random_pairs(8))
    grads, metrics = [], []
    for micro_batch_size in (8, 2):
        # in float64, so that the test sees the split and not the processor's fp32 summation order
        policy = tiny_llama(seed=1).double()
        reference = copy.deepcopy(tiny_llama(seed=2)).double()
        module = honing_module(policy, reference, micro_batch_size=micro_batch_size, **options)
        module.train_batch(batch)
        grads.append(torch.cat([p.grad.flatten() for p in policy.parameters()]))
        metrics.append(module.trainer.metrics)
    torch.testing.assert_close(grads[0], grads[1], atol=1e-6, rtol=0)
    for name, value in metrics[0].items():
        assert metrics[1][name] == pytest.approx(value, rel=1e-6, abs=1e-6), name


def test_a_pair_never_splits():
    items = random_pairs(5)
    for index, item in enumerate(items):
        item["ref_chosen_logps"], item["ref_rejected_logps"] = -float(index), -10.0 - index
    collator = PairCollator(0)
    micro_batches = collator.split(collator(items), 2)
    assert [m["input_ids"].shape[0] for m in micro_batches] == [2, 2, 1]  # whole pairs: one row each
    rows = [(micro, row) for micro in micro_batches for row in range(micro["input_ids"].shape[0])]
    for index, ((micro, row), item) in enumerate(zip(rows, items, strict=True)):
        prompt, chosen, rejected = item["prompt_ids"], item["chosen_ids"], item["rejected_ids"]
        length = len(prompt) + len(chosen) + len(rejected)
        assert micro["input_ids"][row, :length].tolist() == prompt + chosen + rejected
        targets = micro["targets"][row]
        assert targets[:, 0][targets[:, 0] != -100].tolist() == chosen
        assert targets[:, 1][targets[:, 1] != -100].tolist() == rejected
        assert micro["ref_chosen_logps"][row].item() == -index
        assert micro["ref_rejected_logps"][row].item() == -10.0 - index
    for micro in micro_batches:
        assert micro["input_ids"].shape[1] == int(micro["num_real_tokens"].max())  # cut to its own longest row


def test_each_reply_is_scored_as_in_its_own_sequence():
    """The shared row's log-probs equal those of prompt + chosen and prompt + rejected run separately."""
    from honing.losses import completion_logps

    items = random_pairs(3, seed=4)
    model = tiny_llama(seed=5).eval()
    for additive in (False, True):
        collator = PairCollator(0, additive_mask=additive)
        if additive:
            model.config._attn_implementation = "eager"
        batch = collator(items)
        with torch.no_grad():
            logits = model(**collator.model_inputs(batch)).logits
            logps, counts = completion_logps(logits, batch["targets"])
            for row, item in enumerate(items):
                for side, key in enumerate(("chosen_ids", "rejected_ids")):
                    ids = torch.tensor([item["prompt_ids"] + item[key]])
                    alone = model(input_ids=ids).logits[0, :-1].log_softmax(-1)
                    start = len(item["prompt_ids"]) - 1
                    expected = alone[start:].gather(-1, ids[0, start + 1 :, None]).sum()
                    assert logps[row, side].item() == pytest.approx(expected.item(), abs=1e-5)
                    assert counts[row, side] == len(item[key])
    filler = collator.filler(batch)
    assert (filler["targets"] == -100).all() and filler["num_real_tokens"].sum() == 0


@pytest.mark.parametrize(
    "settings",
    [
        {"loss_type": ["sigmoid", "bco_pair", "sft"], "loss_weights": [0.8, 0.2, 1.0]},  # MPO
        {"loss_type": "sigmoid", "ld_alpha": 0.5},
        {"loss_type": "sigmoid", "use_weighting": True},
        {"loss_type": "ipo", "use_weighting": True},
        {"loss_type": "sigmoid", "use_weighting": True, "chunked_loss": False},  # log Σ p² from the full logits
        {"loss_type": "exo_pair", "label_smoothing": 1e-3, "f_divergence_type": "js_divergence", "ld_alpha": 0.3},
        {"loss_type": "aot", "label_smoothing": 0.1},
    ],
    ids=["mpo", "ld_alpha", "wpo", "wpo-ipo", "wpo-logits", "exo-js-ld", "aot"],
)
def test_loss_options_and_gradients_equal_trl(trl_trainer, settings):
    """TRL's DPOTrainer and honing's module on the same model and pairs: the loss and every weight's gradient."""
    trainer, items = trl_trainer
    types = [settings["loss_type"]] if isinstance(settings["loss_type"], str) else settings["loss_type"]
    trainer.loss_types, trainer.loss_weights = types, settings.get("loss_weights", [1.0] * len(types))
    trainer.label_smoothing = settings.get("label_smoothing", 0.0)
    trainer.ld_alpha, trainer.use_weighting = settings.get("ld_alpha"), settings.get("use_weighting", False)
    trainer.f_divergence_type = settings.get("f_divergence_type", "reverse_kl")
    if trainer.use_weighting:  # TRL's fused head computes log Σ p² only when built with use_weighting
        from trl.trainer.utils import add_fused_lm_head

        add_fused_lm_head(trainer.model, outputs=("log_probs", "entropy", "mean_logits", "is_top1", "log_sum_sq_probs"))
    try:
        trainer.model.zero_grad(set_to_none=True)
        trl_loss = trainer.compute_loss(trainer.model, trainer.data_collator(items))
        trl_loss.backward()
        trl_grads = [p.grad.clone() for p in trainer.model.parameters()]
        trainer.model.zero_grad(set_to_none=True)
        module = honing_module(trainer.model, trainer.ref_model, micro_batch_size=len(items), **settings)
        module.train_batch(PairCollator(0)(items))
        honing_grads = [p.grad for p in trainer.model.parameters()]
    finally:
        trainer.model.zero_grad(set_to_none=True)
        trainer.ld_alpha, trainer.use_weighting, trainer.f_divergence_type = None, False, "reverse_kl"
    # relative above 1: ipo's losses near 20 differ by their float32 spacing (2e-6)
    assert module.trainer.metrics["train/loss"] == pytest.approx(trl_loss.item(), rel=1e-6, abs=1e-6)
    largest = max((t - h).abs().max().item() for t, h in zip(trl_grads, honing_grads, strict=True))
    biggest = max(g.abs().max().item() for g in trl_grads)
    assert largest < 1e-6 * max(1.0, biggest) and biggest > 1e-3  # ipo's gradients reach 3: relative there


def test_precomputed_reference_is_ld_dpos_when_ld_alpha_is_set():
    """``reference: precompute`` scores each pair as the copy reference does under LD-DPO (tail weighted by alpha)."""
    from honing.methods.dpo import compute_reference_logps

    items = random_pairs(4, seed=7)
    model = tiny_llama(seed=8)
    collator = PairCollator(0)
    module = honing_module(model, copy.deepcopy(model), micro_batch_size=4, ld_alpha=0.4)
    micro = module.micro_batches(collator(items))[0]
    expected = torch.stack(module.score_reference(micro), 1)
    options = {"collator": collator, "device": torch.device("cpu"), "autocast": contextlib.nullcontext}
    precomputed = torch.stack(compute_reference_logps(model, [collator(items)], ld_alpha=0.4, **options), 1)
    plain = torch.stack(compute_reference_logps(model, [collator(items)], **options), 1)
    torch.testing.assert_close(precomputed.float(), expected, atol=1e-5, rtol=0)
    assert (precomputed - plain).abs().max() > 1e-3  # replies of other lengths: the tails weigh less
