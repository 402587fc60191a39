"""fp16-mixed: fp32 weights, float16 autocast, a dynamic loss scale; overflowing steps skipped; exact resume."""

import json

import pytest
import torch

from honing.errors import ConfigError
from honing.methods.lm import LMTrainModule
from honing.methods.loss_scaling import LossScaler
from honing.optim.param_groups import build_adamw
from honing.train import Callback
from tests.helpers import TokenDataset, flat_weights, make_trainer, tiny_llama


def module_for(precision, **options):
    model = tiny_llama(seed=2)
    optimizer = build_adamw(model, lr=1e-2, weight_decay=0.0, betas=(0.9, 0.95), eps=1e-8)
    return LMTrainModule(model, optimizer, micro_batch_size=4, precision=precision, **options)


def train(module, steps):
    data = TokenDataset(rows=4, seq_len=16).data
    batch = {"input_ids": data, "labels": data}
    losses = []
    for _ in range(steps):
        module.zero_grads()
        module.train_batch(batch)
        module.optim_step()
        totals = module.eval_batch(batch)
        losses.append(float(totals["loss_sum"] / totals["tokens"]))
    return losses


def test_fp16_mixed_learns_like_fp32_with_fp32_weights():
    module = module_for("fp16-mixed")
    losses = train(module, 20)
    fp32_losses = train(module_for("fp32"), 20)
    assert all(p.dtype == torch.float32 for p in module.model.parameters())
    assert losses[-1] < losses[0] / 4  # it learns the four rows
    # float16 matmuls under a 2^16 loss scale: the fp32 trajectory within rounding, no step skipped
    assert max(abs(a - b) for a, b in zip(losses, fp32_losses)) < 0.02
    assert module.updater.loss_scaler.skipped_steps == 0 and module.updater.loss_scaler.scaler.get_scale() == 2.0**16


def test_the_chunked_head_makes_its_gradients_at_the_loss_scale(monkeypatch):
    # The chunked head computes its float16 gradients in the forward, at the factor backward will be called with:
    # it must be given the loss scale too, or its smallest gradients flush to zero before they are scaled up.
    monkeypatch.setattr("honing.chunked_ce.CHUNK_ROWS", 8)  # smaller than the micro-batch: the chunked path
    module = module_for("fp16-mixed")
    given, backward_with = [], []
    forward_loss = module.forward_loss
    monkeypatch.setattr(
        module, "forward_loss", lambda micro, grad_scale: given.append(grad_scale) or forward_loss(micro, grad_scale)
    )
    original_backward = torch.Tensor.backward
    monkeypatch.setattr(
        torch.Tensor,
        "backward",
        lambda loss, gradient=None: backward_with.append(gradient) or original_backward(loss, gradient),
    )
    chunked = train(module, 5)
    plain = train(module_for("fp16-mixed", chunked_loss=False), 5)
    tokens = 4 * 15  # the step's target tokens: the loss's weight is 1 / tokens
    assert float(given[0]) == float(backward_with[0]) == pytest.approx(2.0**16 / tokens, rel=1e-6)
    assert max(abs(a - b) for a, b in zip(chunked, plain)) < 0.02


def test_an_overflow_skips_the_step_and_halves_the_scale():
    module = module_for("fp16-mixed")
    module.updater.loss_scaler = LossScaler(torch.device("cpu"), init_scale=2.0**40)  # loss x 2^40 overflows float16
    before = flat_weights_of(module)
    train(module, 1)
    assert torch.equal(flat_weights_of(module), before)  # no update
    assert not module.optimizer.state  # AdamW's moments and step count never made
    assert module.updater.loss_scaler.scaler.get_scale() == 2.0**39
    assert module.updater.loss_scaler.skipped_steps == 1


def test_fp16_mixed_refuses_float16_weights():
    model = tiny_llama(seed=2).to(torch.float16)
    optimizer = build_adamw(model, lr=1e-2, weight_decay=0.0, betas=(0.9, 0.95), eps=1e-8)
    with pytest.raises(ConfigError, match="trainable weights are torch.float16"):
        LMTrainModule(model, optimizer, micro_batch_size=4, precision="fp16-mixed")


def flat_weights_of(module):
    return torch.cat([p.detach().flatten() for p in module.model.parameters()])


class InfGradient(Callback):
    """Puts inf into one gradient before the optimizer step of step ``at`` (an overflow the scaler must catch)."""

    def __init__(self, at: int):
        self.at = at
        self.weights_before: torch.Tensor | None = None
        self.weights_after: torch.Tensor | None = None

    def pre_optim_step(self):
        if self.step == self.at:
            self.weights_before = flat_weights(self.trainer)
            next(p for p in self.trainer.train_module.model.parameters() if p.grad is not None).grad.view(-1)[0] = (
                float("inf")
            )

    def on_step_end(self):
        if self.step == self.at:
            self.weights_after = flat_weights(self.trainer)


def metric_rows(folder):
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return {row["step"]: row for row in rows if "step" in row}


def test_a_skipped_step_is_logged_and_the_schedule_waits_for_it(tmp_path):
    overflow = InfGradient(3)
    trainer = make_trainer(
        tmp_path / "skip", max_duration="6steps", precision="fp16-mixed", callbacks={"inf": overflow}, dropout=0.0
    )
    trainer.fit()
    make_trainer(tmp_path / "clean", max_duration="6steps", precision="fp16-mixed", dropout=0.0).fit()
    assert torch.equal(overflow.weights_before, overflow.weights_after)
    skipped, clean = metric_rows(tmp_path / "skip"), metric_rows(tmp_path / "clean")
    assert skipped[3]["optim/skipped_steps"] == 1 and "optim/grad_norm" not in skipped[3]
    assert skipped[3]["optim/loss_scale"] == 2.0**16 and skipped[4]["optim/loss_scale"] == 2.0**15
    # as transformers' Trainer: the skipped step did not advance the LR schedule, so step 4 trains at step 3's LR
    assert skipped[4]["optim/lr"] == clean[3]["optim/lr"] != clean[4]["optim/lr"]


def test_resume_is_exact_with_the_loss_scale_and_skipped_steps(tmp_path):
    def run(folder, **options):
        return make_trainer(
            folder, max_duration="10steps", precision="fp16-mixed", callbacks={"inf": InfGradient(3)}, **options
        )

    reference = run(tmp_path / "ref")
    reference.fit()
    stopped = run(tmp_path / "run", hard_stop="6steps")
    stopped.fit()
    resumed = run(tmp_path / "run", init_seed=123)  # the load replaces the init
    resumed.fit()
    assert resumed.global_step == 10
    assert torch.equal(flat_weights(resumed), flat_weights(reference))
    scaler = resumed.train_module.updater.loss_scaler
    assert scaler.skipped_steps == 1 and scaler.scaler.get_scale() == 2.0**15
    assert metric_rows(tmp_path / "run")[8]["optim/lr"] == metric_rows(tmp_path / "ref")[8]["optim/lr"]
