"""What transformers' own ``generate`` answers: the reference the inference tests compare honing with."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from honing.infer.generate import stop_token_ids


def transformers_greedy(folder, prompts, max_new_tokens, *, chat):
    """Each prompt (text, or a list of messages) alone through ``generate`` (greedy, the same stop tokens)."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    stops = stop_token_ids(tokenizer)
    answers = []
    for prompt in prompts:
        if chat:
            messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
            prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            out = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=max_new_tokens,
                do_sample=False,
                eos_token_id=stops,
                pad_token_id=tokenizer.pad_token_id,
            )
        new = [t for t in out[0, ids.shape[1] :].tolist() if t not in stops]
        answers.append(tokenizer.decode(new, skip_special_tokens=True))
    return answers
