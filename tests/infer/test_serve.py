"""``honing serve``: the OpenAI client's chat round trip on loopback. The answer is honing's own greedy decoding (and
transformers' too) of the model's chat template, its usage counts the tokens really read and chosen, a stream spells
the same answer, and what the server cannot honour comes back as OpenAI's error objects."""

from __future__ import annotations

import argparse
import json
import threading
import urllib.error
import urllib.request

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from honing.infer.arguments import serve_arguments
from honing.infer.generate import DEFAULT_MAX_NEW_TOKENS, Sampling, TextGenerator
from honing.infer.generate_command import sampling_from
from honing.infer.model_source import load_model
from honing.infer.serve import ChatService, make_server
from tests.infer.tiny_chat_model import SCRIPTED_ANSWER, save_chat_model

openai = pytest.importorskip("openai")

CONVERSATION = [
    {"role": "system", "content": "You reverse words."},
    {"role": "user", "content": "stressed"},
]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve")
    return {"random": save_chat_model(root / "random"), "scripted": save_chat_model(root / "scripted", scripted=True)}


def serving(folder, name="tiny", max_new_tokens=256):
    """A started server on a free loopback port; the client and the loaded model."""
    loaded = load_model(str(folder), device="cpu")
    service = ChatService(loaded, name, Sampling(max_new_tokens=max_new_tokens))
    server = make_server(service, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    return server, openai.OpenAI(base_url=url, api_key="x", max_retries=0), loaded, url


@pytest.fixture(scope="module")
def random_server(folders):
    server, client, loaded, url = serving(folders["random"])
    yield client, loaded, url
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def scripted_server(folders):
    server, client, loaded, url = serving(folders["scripted"], max_new_tokens=8)
    yield client, loaded, url
    server.shutdown()
    server.server_close()


def transformers_answer(folder, messages, max_new_tokens):
    """(prompt ids, new ids) of transformers' greedy ``generate`` on the rendered conversation, ending at im_end."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    stop = tokenizer.convert_tokens_to_ids("<|im_end|>")
    with torch.no_grad():
        out = model.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens, do_sample=False,
            eos_token_id=[stop, tokenizer.eos_token_id], pad_token_id=tokenizer.pad_token_id,
        )  # fmt: skip
    return ids[0].tolist(), out[0, ids.shape[1] :].tolist(), tokenizer


def test_a_chat_round_trip_is_honings_greedy_answer_with_the_real_token_counts(random_server, folders):
    client, loaded, _ = random_server
    answer = client.chat.completions.create(model="tiny", messages=CONVERSATION, max_tokens=12)
    assert answer.object == "chat.completion" and answer.model == "tiny" and answer.id.startswith("chatcmpl-")
    [choice] = answer.choices
    assert choice.index == 0 and choice.message.role == "assistant"
    assert choice.finish_reason == "length"  # a random model does not close its turn within 12 tokens
    ours = TextGenerator(loaded, Sampling(max_new_tokens=12), chat_template=True).complete([CONVERSATION])
    assert choice.message.content == ours[0]
    prompt, new, tokenizer = transformers_answer(folders["random"], CONVERSATION, 12)
    assert choice.message.content == tokenizer.decode(new, skip_special_tokens=True)
    assert answer.usage.prompt_tokens == len(prompt)
    assert answer.usage.completion_tokens == len(new) == 12
    assert answer.usage.total_tokens == len(prompt) + 12


def test_an_answer_that_closes_its_turn_stops_there_and_counts_the_closing_token(scripted_server, folders):
    client, _, _ = scripted_server
    answer = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hello"}])
    assert answer.choices[0].message.content == SCRIPTED_ANSWER
    assert answer.choices[0].finish_reason == "stop"
    prompt, new, _ = transformers_answer(folders["scripted"], [{"role": "user", "content": "hello"}], 8)
    assert len(new) == len(SCRIPTED_ANSWER) + 1  # the letters, then <|im_end|>
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (len(prompt), len(new))


def test_a_stream_spells_the_same_answer_and_ends_with_usage(random_server, scripted_server):
    for client, _, _ in (random_server, scripted_server):
        whole = client.chat.completions.create(model="tiny", messages=CONVERSATION, max_tokens=10)
        chunks = list(
            client.chat.completions.create(
                model="tiny", messages=CONVERSATION, max_tokens=10, stream=True, stream_options={"include_usage": True}
            )
        )
        assert {chunk.object for chunk in chunks} == {"chat.completion.chunk"}
        assert len({chunk.id for chunk in chunks}) == 1
        assert chunks[0].choices[0].delta.role == "assistant"
        text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
        assert text == whole.choices[0].message.content
        reasons = [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices]
        assert reasons[-1] == whole.choices[0].finish_reason and not any(reasons[:-1])
        assert chunks[-1].choices == [] and chunks[-1].usage == whole.usage


def test_models_lists_the_one_model_served(random_server):
    client, _, _ = random_server
    assert [model.id for model in client.models.list()] == ["tiny"]


def test_requests_the_server_cannot_honour_are_openai_errors_naming_the_field(random_server):
    client, _, url = random_server
    with pytest.raises(openai.NotFoundError, match="'gpt-4o' does not exist"):
        client.chat.completions.create(model="gpt-4o", messages=CONVERSATION)
    with pytest.raises(openai.BadRequestError, match="n: only 1 answer") as error:
        client.chat.completions.create(model="tiny", messages=CONVERSATION, n=2)
    assert error.value.body["param"] == "n" and error.value.body["type"] == "invalid_request_error"
    with pytest.raises(openai.BadRequestError, match="unsupported field 'tools'"):
        client.chat.completions.create(
            model="tiny", messages=CONVERSATION, tools=[{"type": "function", "function": {"name": "f"}}]
        )
    with pytest.raises(openai.BadRequestError, match="max_tokens: 300 new tokens after a"):
        client.chat.completions.create(model="tiny", messages=CONVERSATION, max_tokens=300)  # 256 positions
    with pytest.raises(openai.BadRequestError, match="temperature: expected >= 0"):
        client.chat.completions.create(model="tiny", messages=CONVERSATION, temperature=-1)
    with pytest.raises(openai.BadRequestError, match=r"messages\[0\]"):
        client.chat.completions.create(model="tiny", messages=[{"role": "wizard", "content": "hi"}])
    for path, body, status in (("/chat/completions", b"{not json", 400), ("/completions", b"{}", 404)):
        request = urllib.request.Request(url + path, data=body, headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as raw:
            urllib.request.urlopen(request, timeout=30)
        assert raw.value.code == status and "message" in json.loads(raw.value.read())["error"]
    # after every refusal the server still answers
    assert (
        client.chat.completions.create(model="tiny", messages=CONVERSATION, max_tokens=2).usage.completion_tokens == 2
    )


def test_the_command_lines_sampling_is_a_requests_default_without_top_k():
    parser = argparse.ArgumentParser()
    serve_arguments(parser)
    args = parser.parse_args(["run", "--temperature", "0.7", "--top-p", "0.9", "--seed", "3"])
    assert sampling_from(args) == Sampling(max_new_tokens=DEFAULT_MAX_NEW_TOKENS, temperature=0.7, top_p=0.9, seed=3)
    assert sampling_from(parser.parse_args(["run", "--max-new-tokens", "9"])).max_new_tokens == 9
