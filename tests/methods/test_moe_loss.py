"""An MoE model trains on its cross-entropy plus coef × transformers' own router load-balancing loss, weighted over
micro-batches by their routed tokens; the loss and the experts' load imbalance are logged."""

import copy
import json

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoConfig, AutoModelForCausalLM

from honing.config import ConfigError, validate
from honing.methods.lm import LMTrainModule
from honing.models import moe
from honing.optim.param_groups import build_adamw
from honing.recipes import PretrainRecipe, SFTRecipe
from tests.helpers import tiny_llama

VOCAB = 258  # the byte tokenizer's
COEF = 0.3  # larger than the families' defaults (0.001-0.01), so that a wrong weighting shows at 1e-6

MOE_CONFIG = {
    "model_type": "qwen3_moe",
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "intermediate_size": 64,
    "moe_intermediate_size": 16,
    "num_experts": 4,
    "num_experts_per_tok": 2,
}


def tiny_moe(**overrides):
    torch.manual_seed(0)
    values = {**MOE_CONFIG, "vocab_size": VOCAB, "router_aux_loss_coef": COEF, **overrides}
    config = AutoConfig.for_model(values.pop("model_type"), **values)
    return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")


class Recorder:
    """The trainer's side of a train module: the metrics it records."""

    global_step, max_steps = 1, 1

    def __init__(self):
        self.metrics: dict[str, torch.Tensor] = {}

    def record_metric(self, name, value, reduce_type=None, **_):
        self.metrics[name] = torch.as_tensor(value).double()

    def record_ce_loss(self, value, reduce_type=None):
        self.record_metric("train/loss", value, reduce_type)


def padded_batch(rows=(16, 12, 16, 9), seed=0):
    """Rows of different lengths, right-padded: micro-batches route different numbers of tokens."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, VOCAB - 2, (len(rows), 16), generator=generator)
    attention_mask = (torch.arange(16) < torch.tensor(rows)[:, None]).long()
    labels = input_ids.masked_fill(attention_mask == 0, -100)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def honing_step(model, batch, *, micro_batch_size, chunked_loss=True, **options):
    """The gradients of one honing step (no update), and what the step recorded."""
    module = LMTrainModule(
        model,
        build_adamw(model, lr=1e-3, weight_decay=0.0, betas=(0.9, 0.95), eps=1e-8),
        micro_batch_size=micro_batch_size,
        grad_clip=None,
        chunked_loss=chunked_loss,
        **options,
    )
    module.trainer = Recorder()
    module.zero_grads()
    module.train_batch(batch)
    return gradients(model), module.trainer.metrics


def gradients(model):
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def hand_gradients(model, batch, *, coef, rows_per_micro_batch):
    """The spec by hand, from transformers' own outputs: each micro-batch adds its summed cross-entropy over the
    step's target tokens, plus coef × its ``aux_loss`` × its share of the step's routed tokens."""
    model.train()
    model.zero_grad(set_to_none=True)
    targets = (batch["labels"][:, 1:] != -100).sum()
    routed = batch["attention_mask"].sum()
    for start in range(0, len(batch["input_ids"]), rows_per_micro_batch):
        part = {key: value[start : start + rows_per_micro_batch] for key, value in batch.items()}
        out = model(
            input_ids=part["input_ids"],
            attention_mask=part["attention_mask"],
            output_router_logits=True,
            use_cache=False,
        )
        ce = F.cross_entropy(out.logits[:, :-1].flatten(0, 1), part["labels"][:, 1:].flatten(), reduction="sum")
        (ce / targets + coef * part["attention_mask"].sum() / routed * out.aux_loss).backward()
    return gradients(model)


@pytest.mark.parametrize("chunked_loss", [True, False])
def test_the_loss_is_cross_entropy_plus_coef_times_transformers_aux_loss(chunked_loss):
    model, batch = tiny_moe(), padded_batch()
    reference = copy.deepcopy(model)
    grads, metrics = honing_step(model, batch, micro_batch_size=4, chunked_loss=chunked_loss)
    # transformers' own loss with labels is exactly CE (mean over targets) + router_aux_loss_coef · aux_loss
    reference.train()
    out = reference(**batch, output_router_logits=True, use_cache=False)
    out.loss.backward()
    assert (grads - gradients(reference)).abs().max().item() < 1e-6
    # the router term is material at this tolerance: without it the gradients differ far more
    assert (
        gradients(reference) - hand_gradients(reference, batch, coef=0.0, rows_per_micro_batch=4)
    ).abs().max() > 1e-4
    # logged: the cross-entropy alone as train/loss (its perplexity stays one), the unweighted aux loss
    assert metrics["train/loss"].item() == pytest.approx((out.loss - COEF * out.aux_loss).item(), abs=1e-6)
    assert metrics["train/aux_loss"].item() == pytest.approx(out.aux_loss.item(), abs=1e-6)
    loads = moe.expert_loads(out.router_logits, 2, batch["attention_mask"])  # padding is not counted
    assert loads.sum().item() == 2 * 2 * batch["attention_mask"].sum().item()  # 2 layers × top-2 per real token
    imbalance = (loads.max(dim=1).values / loads.double().mean(dim=1)).tolist()
    assert [metrics[f"train/expert_load_imbalance/layer_{i}"].item() for i in (0, 1)] == pytest.approx(imbalance)
    assert metrics["train/expert_load_imbalance/max"].item() == pytest.approx(max(imbalance))


def test_the_config_key_overrides_the_models_coefficient():
    batch = padded_batch()
    model = tiny_moe()
    grads, _ = honing_step(copy.deepcopy(model), batch, micro_batch_size=4, router_aux_loss_coef=2.0)
    assert (grads - hand_gradients(model, batch, coef=2.0, rows_per_micro_batch=4)).abs().max().item() < 1e-6
    default, _ = honing_step(copy.deepcopy(model), batch, micro_batch_size=4)
    assert (grads - default).abs().max().item() > 1e-3
    # 0 trains on the cross-entropy alone, and still logs the router's loss
    grads, metrics = honing_step(copy.deepcopy(model), batch, micro_batch_size=4, router_aux_loss_coef=0.0)
    assert (grads - hand_gradients(model, batch, coef=0.0, rows_per_micro_batch=4)).abs().max().item() < 1e-6
    assert "train/aux_loss" in metrics


def test_micro_batches_that_route_alike_give_the_one_micro_batch_update():
    # rows a, b, a, b: each half routes exactly as the whole batch, so the weighting alone decides (a sum over
    # micro-batches instead of their token-weighted mean would double the router's gradient)
    half = padded_batch(rows=(16, 11))
    batch = {key: torch.cat([value, value]) for key, value in half.items()}
    model = tiny_moe()
    whole, _ = honing_step(copy.deepcopy(model), batch, micro_batch_size=4)
    split, _ = honing_step(copy.deepcopy(model), batch, micro_batch_size=2)
    assert (whole - split).abs().max().item() < 1e-6


def test_micro_batches_weigh_in_by_their_routed_tokens():
    # Different halves: the router loss of one forward is E · Σ_e f_e · P_e with f_e the experts' token fractions
    # (top-k counts, not differentiable) over that forward's tokens, so a split measures f on each half and the
    # update cannot equal the one-micro-batch update; it is the token-weighted mean of the halves' losses, exactly.
    batch, model = padded_batch(), tiny_moe()
    split, metrics = honing_step(copy.deepcopy(model), batch, micro_batch_size=2)
    assert (split - hand_gradients(model, batch, coef=COEF, rows_per_micro_batch=2)).abs().max().item() < 1e-6
    whole, _ = honing_step(copy.deepcopy(model), batch, micro_batch_size=4)
    assert (split - whole).abs().max().item() > 1e-6  # see above: what a split cannot keep
    with torch.no_grad():
        halves = [
            model(**{key: value[rows] for key, value in batch.items() if key != "labels"}, output_router_logits=True)
            for rows in (slice(0, 2), slice(2, 4))
        ]
    tokens = [batch["attention_mask"][:2].sum(), batch["attention_mask"][2:].sum()]
    logged = (tokens[0] * halves[0].aux_loss + tokens[1] * halves[1].aux_loss) / (tokens[0] + tokens[1])
    assert metrics["train/aux_loss"].item() == pytest.approx(logged.item(), abs=1e-6)


def test_a_dense_model_logs_no_router_metrics():
    _, metrics = honing_step(tiny_llama(vocab=VOCAB), padded_batch(), micro_batch_size=2)
    assert "train/loss" in metrics and not any("aux" in name or "expert" in name for name in metrics)
    with pytest.raises(ConfigError, match=r"^model\.router_aux_loss_coef: 0\.1 was given"):
        honing_step(tiny_llama(vocab=VOCAB), padded_batch(), micro_batch_size=2, router_aux_loss_coef=0.1)


# --- through the recipes ------------------------------------------------------------------


def run_config(tmp_path, method, model, **sections):
    raw = {
        "method": method,
        "trainer": {
            "save_folder": str(tmp_path / "run"),
            "max_duration": "2steps",
            "num_threads": 1,
            "metrics_collect_interval": 1,
        },
        "data": {"seq_len": 32, "global_batch_size": 4, "micro_batch_size": 2, "cache_dir": str(tmp_path / "cache")},
        "tokenizer": {"kind": "byte"},
        "model": model,
        "callbacks": {
            "checkpointer": {"save_interval": 100},
            "evaluator": {"enabled": False},
            "sample": {"enabled": False},
            "console": {"enabled": False},
        },
    }
    for section, values in sections.items():
        raw.setdefault(section, {}).update(values)
    return validate(raw)


def logged(tmp_path):
    return [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]


def test_pretraining_an_moe_logs_its_router_loss_and_expert_loads(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog. " * 100)
    model = {"config": {**MOE_CONFIG, "num_hidden_layers": 3, "mlp_only_layers": [1]}, "router_aux_loss_coef": 0.02}
    config = run_config(
        tmp_path,
        "pretrain",
        model,
        data={"train": {"sources": [{"path": str(corpus)}]}},
        parallel={"activation_checkpointing": "full"},
    )
    trainer = PretrainRecipe(config).run()
    assert trainer.train_module.router_aux_loss_coef == 0.02
    rows = logged(tmp_path)
    assert [row["step"] for row in rows] == [1, 2]
    for row in rows:
        # a balanced router's loss is top_k (2); layer 1 is dense and has no router
        assert 1.5 < row["train/aux_loss"] < 3.0
        assert {"train/expert_load_imbalance/layer_0", "train/expert_load_imbalance/layer_2"} <= row.keys()
        assert "train/expert_load_imbalance/layer_1" not in row
        assert 1.0 <= row["train/expert_load_imbalance/max"] <= 2.0  # at most experts / top_k


def test_sft_trains_an_olmoe_with_its_own_coefficient(tmp_path):
    # padded rows: the router loss and the loads count the attention mask's tokens only
    source = {"path": "generated:reverse?samples=16&seed=0", "format": "conversation"}
    olmoe = {key: value for key, value in MOE_CONFIG.items() if key != "moe_intermediate_size"}
    config = run_config(
        tmp_path,
        "sft",
        {"config": {**olmoe, "model_type": "olmoe"}},
        data={"train": {"sources": [source]}, "chat_template": "chatml", "seq_len": 64, "packing": False},
    )
    trainer = SFTRecipe(config).run()
    assert trainer.train_module.router_aux_loss_coef == 0.01  # olmoe's own
    assert all("train/aux_loss" in row for row in logged(tmp_path))


def test_the_key_is_refused_for_a_dense_model_and_for_dpo(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the quick brown fox. " * 100)
    dense = {"config": {**MOE_CONFIG, "model_type": "llama"}, "router_aux_loss_coef": 0.01}
    config = run_config(tmp_path, "pretrain", dense, data={"train": {"sources": [{"path": str(corpus)}]}})
    with pytest.raises(ConfigError, match=r"^model\.router_aux_loss_coef: 0\.01 was given, but the 'llama' model"):
        PretrainRecipe(config).run()
    with pytest.raises(ConfigError, match=r"model\.router_aux_loss_coef: not used by method 'dpo'"):
        run_config(
            tmp_path,
            "dpo",
            {"config": MOE_CONFIG, "router_aux_loss_coef": 0.01},
            data={"train": {"sources": [{"path": "x"}]}},
        )
