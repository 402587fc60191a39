"""``RolloutClient``: completions from the rollout server in ``sample_completions``' own form, and the trainer's
weights (full or LoRA-merged) on the server before it samples, proven by greedy completions equal to honing's own
decoder on the trainer's model."""

from __future__ import annotations

import json

import pytest
import torch
from peft import LoraConfig, get_peft_model

from honing.models.generation import sample_completions
from honing.rollout.client import RolloutClient, flagged, padded_completions, weight_chunks
from tests.rollout.conftest import tiny_llama

PAD = 259
ROWS = [[5, 17, 42, 8, 99], [3, 4], [250, 1, 2, 3], [77, 78, 79]]
SEEDS = [11, 12, 13, 14]


def left_padded(rows):
    width = max(len(row) for row in rows)
    ids = torch.full((len(rows), width), PAD, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for index, row in enumerate(rows):
        ids[index, width - len(row) :] = torch.tensor(row)
        mask[index, width - len(row) :] = 1
    return ids, mask


def decoding(stops=(), temperature=0.0, seeds=SEEDS):
    return dict(max_new_tokens=8, stop_token_ids=list(stops), pad_token_id=PAD, seeds=seeds, temperature=temperature)


def local(model, stops=(), temperature=0.0):
    """honing's own decoder on the trainer's model."""
    ids, mask = left_padded(ROWS)
    return sample_completions(model, ids, mask, **decoding(stops, temperature))


def server_as_is(client, stops=(), temperature=0.0):
    """The server's completions from whatever weights it holds (no sync first)."""
    request = dict(prompts=ROWS, seeds=SEEDS, temperature=temperature, top_p=1.0, top_k=0, max_tokens=8)
    answer = client.post("/generate", json.dumps({**request, "stop_token_ids": list(stops)}).encode(), "text/json")
    return padded_completions(answer["completions"], PAD, torch.device("cpu"))


def sampled(client, model, step, stops=(), temperature=0.0, seeds=SEEDS):
    ids, mask = left_padded(ROWS)
    return client.sample(model, ids, mask, step=step, **decoding(stops, temperature, seeds))


def same(a, b):
    return torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_completions_have_sample_completions_shapes_padding_and_stops(rollout_server):
    model, client = tiny_llama(seed=3), RolloutClient.connect(rollout_server.url, timeout=30)
    stop = int(local(model)[0][0, 2])  # row 0's third greedy token: row 0 ends there, others go on or stop early
    expected = local(model, stops=[stop])
    ids, mask = sampled(client, model, step=1, stops=[stop])
    assert same((ids, mask), expected)
    lengths = mask.sum(1).tolist()
    assert lengths[0] <= 3 and ids[0, lengths[0] - 1] == stop and ids.shape[1] == max(lengths)
    short = lengths.index(min(lengths))
    assert (ids[short, lengths[short] :] == PAD).all() and ids.dtype == mask.dtype == torch.long


def test_the_same_seeds_give_the_same_completions(rollout_server):
    model, client = tiny_llama(seed=3), RolloutClient.connect(rollout_server.url, timeout=30)
    first = sampled(client, model, step=1, temperature=1.0)
    assert same(sampled(client, model, step=1, temperature=1.0), first)
    other = sampled(client, model, step=1, temperature=1.0, seeds=[21, 22, 23, 24])
    assert not torch.equal(other[0], first[0])


def test_the_trainers_weights_reach_the_server_when_they_change(rollout_server):
    model, client = tiny_llama(seed=4), RolloutClient.connect(rollout_server.url, timeout=30)
    before = local(model)
    assert not same(server_as_is(client), before)  # the server started from other weights
    assert same(sampled(client, model, step=1), before)
    version = client.weights_version

    # one optimizer step, and a sample at the same step (an evaluation after the update): the weights go again
    optimizer = torch.optim.SGD(model.parameters(), lr=20.0)
    ids, _ = left_padded(ROWS)
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    after = local(model)
    assert not same(after, before) and not same(server_as_is(client), after)
    assert same(sampled(client, model, step=1), after)
    assert client.weights_version == version + 1
    sampled(client, model, step=1)  # nothing changed: nothing is sent
    assert client.get("/weights_version")["weights_version"] == version + 1


def test_a_lora_model_sends_its_merged_weights_and_stays_as_it_was(rollout_server):
    config = LoraConfig(r=4, lora_alpha=64, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    model = get_peft_model(tiny_llama(seed=5), config)
    with model.disable_adapter():
        base = local(model)
    adapted = local(model)
    assert not same(adapted, base)
    weights = {name: value.clone() for name, value in model.state_dict().items()}
    client = RolloutClient.connect(rollout_server.url, timeout=30)
    assert same(sampled(client, model, step=1), adapted)
    assert all(torch.equal(value, weights[name]) for name, value in model.state_dict().items())


def test_keywords_the_server_cannot_take_are_refused(rollout_server):
    client = RolloutClient.connect(rollout_server.url, timeout=30)
    ids, mask = left_padded(ROWS)
    with pytest.raises(ValueError, match=r"\['decoder'\] cannot go to the rollout server"):
        client.sample(tiny_llama(), ids, mask, step=1, decoder=lambda model: None, **decoding())


def test_weights_go_in_chunks_of_about_the_size_asked(tmp_path):
    from safetensors.torch import load

    model = tiny_llama(seed=6)
    chunks = list(flagged(weight_chunks(model, max_bytes=40_000)))
    assert len(chunks) > 2 and [first for first, _, _ in chunks].count(True) == 1
    assert [last for _, last, _ in chunks] == [False] * (len(chunks) - 1) + [True]
    received = {name: value for _, _, blob in chunks for name, value in load(blob).items()}
    assert received.keys() == model.state_dict().keys()
    assert all(torch.equal(value, model.state_dict()[name]) for name, value in received.items())
    assert {value.dtype for value in load(next(weight_chunks(model, 40_000, dtype=torch.bfloat16))).values()} == {
        torch.bfloat16
    }
