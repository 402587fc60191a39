"""What a vision-language model produces: answers to image conversations (the generation eval), beside the
sampled text and exports every run has."""

from __future__ import annotations

from typing import Any

import torch

from honing.data.vision.images import load_image
from honing.data.vision.processing import process
from honing.models.generation import end_of_turn_ids, generate, sampling_kwargs
from honing.run.outputs import RunOutputs


class VLOutputs(RunOutputs):
    """``answer`` takes an image conversation: its images loaded, rendered by the processor's chat template."""

    def answer(self, prompt: Any, *, max_new_tokens: int, temperature: float = 0.0) -> str:
        """The model's reply to an image conversation (greedy unless ``temperature``), stopped at end of turn."""
        messages, items = prompt.to_vl_messages()
        images = [load_image(item, pdf_longest_side=self.config.data.pdf_longest_side) for item in items]
        tokenizer = self.tokenizer
        text = self.processor.apply_chat_template(
            messages, chat_template=self.processor.chat_template, tokenize=False, add_generation_prompt=True
        )
        inputs = process(self.processor, text, images, {})
        model_inputs = {
            key: value.to(self.device)
            for key, value in inputs.items()
            # generate() makes the attention mask of the prompt and of each new token itself
            if isinstance(value, torch.Tensor) and key in self.collator.model_input_keys and key != "attention_mask"
        }
        model_inputs["input_ids"] = inputs["input_ids"].to(self.device)
        stop = [i for i in (tokenizer.eos_token_id, *end_of_turn_ids(tokenizer)) if i is not None]
        ids = model_inputs.pop("input_ids")
        out = generate(
            self.model,
            ids,
            pad_token_id=tokenizer.pad_token_id,
            **model_inputs,
            **sampling_kwargs(max_new_tokens=max_new_tokens, temperature=temperature, stop_token_ids=stop),
        )
        return tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
