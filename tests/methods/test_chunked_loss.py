"""The chunked loss (model.chunked_loss, the default) trains exactly as the full logits do: the same loss and
gradients within 1e-5 in fp32, for SFT with assistant-only labels (tied and untied heads, LoRA, a saved head), the
evaluation sums, and the DPO and GRPO log-probabilities."""

from __future__ import annotations

import pytest
import torch

from honing import chunked_ce
from honing.data.collate import Collator
from honing.data.preference.batches import PairCollator
from honing.methods.dpo import DPOTrainModule, compute_reference_logps
from honing.methods.grpo import GRPOTrainModule
from honing.methods.lm import LMTrainModule
from honing.models.output_head import supports_head_fn
from tests.helpers import TokenDataset, tiny_llama
from tests.methods.rollout_module import rollout_module

TOLERANCE = 1e-5


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    monkeypatch.setattr(chunked_ce, "CHUNK_ROWS", 5)  # several chunks per micro-batch


def assistant_only_batch(rows: int = 6, seq_len: int = 16) -> dict[str, torch.Tensor]:
    """Rows whose labels are masked on a prompt of varying length (most positions carry no loss)."""
    data = TokenDataset(rows=rows, seq_len=seq_len).data
    labels = data.clone()
    for row in range(rows):
        labels[row, : 6 + row] = -100
    labels[2] = -100  # a row without any target
    return {"input_ids": data, "labels": labels}


def lora(model, **options):
    from peft import LoraConfig, get_peft_model

    return get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", **options))


def gradients(model) -> dict[str, torch.Tensor]:
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def assert_same_gradients(chunked: dict[str, torch.Tensor], plain: dict[str, torch.Tensor]) -> None:
    assert chunked.keys() == plain.keys() and plain
    for name, grad in plain.items():
        assert (chunked[name] - grad).abs().max().item() < TOLERANCE, name


def lm_step(build, chunked: bool):
    model = build()
    module = LMTrainModule(model, torch.optim.SGD(model.parameters(), lr=0.0), micro_batch_size=2, chunked_loss=chunked)
    batch = assistant_only_batch()
    module.zero_grads()
    module.train_batch(batch)
    assert supports_head_fn(model)
    return module._step_loss, gradients(model), module.eval_batch(batch)


BUILDS = {
    "untied": lambda: tiny_llama(seed=1),
    "tied": lambda: tiny_llama(seed=1, tie_word_embeddings=True),
    "lora": lambda: lora(tiny_llama(seed=1)),
    "lora_saved_head": lambda: lora(tiny_llama(seed=1), modules_to_save=["lm_head"]),
}


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_sft_loss_gradients_and_eval_equal_the_full_logits(name):
    chunked_loss, chunked_grads, chunked_eval = lm_step(BUILDS[name], chunked=True)
    plain_loss, plain_grads, plain_eval = lm_step(BUILDS[name], chunked=False)
    assert abs(chunked_loss.item() - plain_loss.item()) < TOLERANCE
    assert_same_gradients(chunked_grads, plain_grads)
    assert abs(chunked_eval["loss_sum"].item() - plain_eval["loss_sum"].item()) < TOLERANCE
    assert chunked_eval["correct"].item() == plain_eval["correct"].item()
    assert chunked_eval["tokens"].item() == plain_eval["tokens"].item()


def test_sft_never_builds_the_full_logits(monkeypatch):
    model = tiny_llama(vocab=80, seed=1)  # a vocabulary no other layer's width equals
    module = LMTrainModule(model, torch.optim.SGD(model.parameters(), lr=0.0), micro_batch_size=6)
    widest = []
    linear = torch.nn.functional.linear

    def recording_linear(input, weight, bias=None):
        out = linear(input, weight, bias)
        if weight.shape[0] == 80:  # the head
            widest.append(out.shape[:-1].numel())
        return out

    monkeypatch.setattr(torch.nn.functional, "linear", recording_linear)
    module.train_batch(assistant_only_batch())
    assert widest and max(widest) <= chunked_ce.CHUNK_ROWS  # one chunk of positions at a time, never 6 × 16


# --- DPO ------------------------------------------------------------------------------------------------------


def random_pairs(count: int, seed: int = 0) -> list[dict[str, list[int]]]:
    generator = torch.Generator().manual_seed(seed)

    def ids(low, high):
        length = int(torch.randint(low, high, (1,), generator=generator))
        return torch.randint(1, 60, (length,), generator=generator).tolist()

    return [{"prompt_ids": ids(2, 9), "chosen_ids": ids(1, 7), "rejected_ids": ids(1, 7)} for _ in range(count)]


def dpo_step(chunked: bool, reference: str):
    policy = tiny_llama(seed=1)
    reference_model = tiny_llama(seed=2) if reference == "copy" else None
    if reference == "adapters_off":
        policy = lora(policy)
    module = DPOTrainModule(
        policy,
        torch.optim.SGD(policy.parameters(), lr=0.0),
        reference=reference,
        reference_model=reference_model,
        rpo_alpha=0.5,
        micro_batch_size=3,
        collator=PairCollator(0),
        grad_clip=None,
        chunked_loss=chunked,
    )
    batch = PairCollator(0)(random_pairs(6))
    module.train_batch(batch)
    micro = module.micro_batches(batch)[0]
    with torch.no_grad():
        terms = module.pair_terms(micro)
    return module._step_loss, gradients(policy), terms


@pytest.mark.parametrize("reference", ["copy", "adapters_off"])
def test_dpo_log_probs_loss_and_gradients_equal_the_full_logits(reference):
    chunked_loss, chunked_grads, chunked_terms = dpo_step(True, reference)
    plain_loss, plain_grads, plain_terms = dpo_step(False, reference)
    assert abs(chunked_loss.item() - plain_loss.item()) < TOLERANCE
    for key in ("chosen", "rejected", "chosen_rewards", "rejected_rewards", "chosen_nll"):
        assert (chunked_terms[key] - plain_terms[key]).abs().max().item() < TOLERANCE, key
    assert torch.equal(chunked_terms["chosen_tokens"], plain_terms["chosen_tokens"])
    assert_same_gradients(chunked_grads, plain_grads)


def test_dpo_precomputed_reference_equals_the_full_logits():
    model = tiny_llama(seed=2)
    collator = PairCollator(0)
    batches = [collator(random_pairs(4, seed=seed)) for seed in (0, 1)]
    options = dict(collator=collator, device=torch.device("cpu"), autocast=lambda: torch.autocast("cpu", enabled=False))
    chunked = compute_reference_logps(model, batches, chunked=True, **options)
    plain = compute_reference_logps(model, batches, chunked=False, **options)
    for a, b in zip(chunked, plain):
        assert (a - b).abs().max().item() < TOLERANCE


# --- GRPO -----------------------------------------------------------------------------------------------------


def grpo_module(model, chunked: bool, reference_model=None) -> GRPOTrainModule:
    return rollout_module(
        model,
        torch.optim.SGD(model.parameters(), lr=0.0),
        num_generations=2,
        max_completion_length=6,
        temperature=0.7,
        beta=0.04,
        loss_type="dapo",
        micro_batch_size=2,
        reference_model=reference_model,
        chunked_loss=chunked,
    )


def grpo_micro() -> dict[str, torch.Tensor]:
    """Left-padded prompts and right-padded completions of different lengths."""
    generator = torch.Generator().manual_seed(0)
    prompt_lengths, completion_lengths = [3, 5, 2, 4], [6, 1, 4, 3]
    prompt_ids, prompt_mask = torch.zeros(4, 5, dtype=torch.long), torch.zeros(4, 5, dtype=torch.long)
    completion_ids, completion_mask = torch.zeros(4, 6, dtype=torch.long), torch.zeros(4, 6, dtype=torch.long)
    for row, (p, c) in enumerate(zip(prompt_lengths, completion_lengths)):
        prompt_ids[row, 5 - p :] = torch.randint(2, 64, (p,), generator=generator)
        prompt_mask[row, 5 - p :] = 1
        completion_ids[row, :c] = torch.randint(2, 64, (c,), generator=generator)
        completion_mask[row, :c] = 1
    return {
        "input_ids": torch.cat([prompt_ids, completion_ids], dim=1),
        "attention_mask": torch.cat([prompt_mask, completion_mask], dim=1),
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": torch.randn(4, generator=generator),
    }


def grpo_step(chunked: bool):
    model = tiny_llama(seed=1)
    module = grpo_module(model, chunked, reference_model=tiny_llama(seed=2))
    micro = grpo_micro()
    mask = micro["completion_mask"].bool()
    logps = module.logps(model, micro)
    with torch.no_grad():
        micro["ref_logps"] = module.logps.reference(model, micro)
    module.learn(micro)
    return logps.detach()[mask], micro["ref_logps"][mask], module._step_loss, gradients(model)


def test_grpo_token_log_probs_loss_and_gradients_equal_the_full_logits():
    chunked_logps, chunked_ref, chunked_loss, chunked_grads = grpo_step(True)
    plain_logps, plain_ref, plain_loss, plain_grads = grpo_step(False)
    assert (chunked_logps - plain_logps).abs().max().item() < TOLERANCE
    assert (chunked_ref - plain_ref).abs().max().item() < TOLERANCE
    assert abs(chunked_loss.item() - plain_loss.item()) < TOLERANCE
    assert_same_gradients(chunked_grads, plain_grads)


# --- vision-language SFT ----------------------------------------------------------------------------------------


class WholeBatch(Collator):
    """One micro-batch holding a Qwen2-VL batch's patch-flattened pixels (a batch the rows do not split)."""

    model_input_keys = ("input_ids", "attention_mask", "pixel_values", "image_grid_thw", "mm_token_type_ids")

    def split(self, batch, rows_per_micro_batch):
        return [dict(batch)]


def tiny_qwen2_vl():
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    torch.manual_seed(0)
    text = dict(vocab_size=80, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)
    text |= dict(
        num_key_value_heads=2, rope_parameters={"rope_type": "default", "rope_theta": 1e4, "mrope_section": [2, 3, 3]}
    )
    vision = dict(depth=2, embed_dim=32, hidden_size=64, num_heads=2, mlp_ratio=2, patch_size=14)
    vision |= dict(spatial_merge_size=2, temporal_patch_size=2)
    config = Qwen2VLConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=70,
        video_token_id=71,
        vision_start_token_id=72,
        vision_end_token_id=73,
    )
    return Qwen2VLForConditionalGeneration(config)


def vl_batch() -> dict[str, torch.Tensor]:
    """Two rows, one 4×4-patch image each (4 image tokens after the 2×2 merge), answers after the image."""
    generator = torch.Generator().manual_seed(0)
    rows = []
    for _ in range(2):
        text = torch.randint(0, 64, (10,), generator=generator)
        rows.append(torch.cat([torch.tensor([72, 70, 70, 70, 70, 73]), text]))
    input_ids = torch.stack(rows)
    labels = input_ids.clone()
    labels[:, :9] = -100  # the image and the question
    return {
        "input_ids": input_ids,
        "attention_mask": torch.ones_like(input_ids),
        "labels": labels,
        "pixel_values": torch.randn(2 * 16, 3 * 2 * 14 * 14, generator=generator),
        "image_grid_thw": torch.tensor([[1, 4, 4], [1, 4, 4]]),
        "mm_token_type_ids": (input_ids == 70).long(),
    }


def test_vision_language_sft_equals_the_full_logits():
    results = []
    for chunked in (True, False):
        model = tiny_qwen2_vl()
        module = LMTrainModule(
            model,
            torch.optim.SGD(model.parameters(), lr=0.0),
            micro_batch_size=2,
            collator=WholeBatch(),
            chunked_loss=chunked,
        )
        module.train_batch(vl_batch())
        results.append((module._step_loss, gradients(model)))
        assert supports_head_fn(model)  # served by the chunked head, not found to change its logits
    (chunked_loss, chunked_grads), (plain_loss, plain_grads) = results
    assert abs(chunked_loss.item() - plain_loss.item()) < TOLERANCE
    assert_same_gradients(chunked_grads, plain_grads)
    assert any(name.startswith("model.visual") for name in plain_grads)  # the image reached the loss


def test_one_chunk_equals_the_full_logits_bit_for_bit(monkeypatch):
    # a small vocabulary: every position fits one chunk, which then runs as the full logits do (the pinned example
    # losses of tests/e2e/test_reference_losses.py stay identical)
    monkeypatch.setattr(chunked_ce, "CHUNK_ROWS", None)
    for name in ("untied", "tied"):
        chunked_loss, chunked_grads, chunked_eval = lm_step(BUILDS[name], chunked=True)
        plain_loss, plain_grads, plain_eval = lm_step(BUILDS[name], chunked=False)
        assert torch.equal(chunked_loss, plain_loss)
        assert all(torch.equal(chunked_grads[key], grad) for key, grad in plain_grads.items())
        assert torch.equal(chunked_eval["loss_sum"], plain_eval["loss_sum"])
