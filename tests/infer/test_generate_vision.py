"""A vision-language export (the VL-SFT example, a few steps) answers an image prompt through ``honing generate
--image``: the same greedy text as transformers' ``generate`` with the model's processor; PDF pages work too."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torchvision", reason="the vision extra is not installed (pip install 'honing[vision]')")

from honing.cli import main  # noqa: E402
from tests.infer.conftest import train_example  # noqa: E402

pytestmark = pytest.mark.slow
PROMPT = "Transcribe the text in the image."


@pytest.fixture(scope="module")
def vl_run(tmp_path_factory):
    """The VL-SFT example (a tiny Qwen2-VL) after 2 steps."""
    return train_example(
        "vl-sft.yaml",
        tmp_path_factory.mktemp("vl") / "run",
        "trainer.max_duration=2steps",
        'data.train.sources=[{path: "generated:ocr?samples=16&seed=0"}]',
        'data.validation.sources=[{path: "generated:ocr?samples=2&seed=1"}]',
        "data.global_batch_size=4",
        "callbacks.generation_eval.num_prompts=1",
        "callbacks.evaluator.interval=1",
    )


def strip_image(path, text="AC3X"):
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (28 * len(text), 28), "white")
    ImageDraw.Draw(image).text((4, 8), text, fill="black")
    image.save(path)
    return image


def transformers_answer(folder, image, max_new_tokens):
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    model = AutoModelForImageTextToText.from_pretrained(folder).eval()
    processor = AutoProcessor.from_pretrained(folder)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": PROMPT}]}]
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    inputs = processor(text=[text], images=[image], return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
    return processor.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)


def test_vl_export_answers_an_image_prompt(vl_run, tmp_path, capsys):
    image = strip_image(tmp_path / "strip.png")
    expected = transformers_answer(vl_run / "hf", image, 6)
    assert expected  # something to compare: the random tower's answer is a few bytes
    capsys.readouterr()
    args = ["generate", str(vl_run), "--prompt", PROMPT, "--image", str(tmp_path / "strip.png")]
    assert main([*args, "--max-new-tokens", "6"]) == 0
    assert capsys.readouterr().out == expected + "\n"
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": PROMPT, "images": [str(tmp_path / "strip.png")]}) + "\n")
    assert main(["generate", str(vl_run / "hf"), "--file", str(prompts), "--max-new-tokens", "6"]) == 0
    assert json.loads(capsys.readouterr().out)["completion"] == expected
    assert (vl_run / "hf" / "README.md").exists()  # the VL export has its model card too


def test_a_pdf_page_is_an_image_prompt(vl_run, tmp_path, capsys):
    from honing.data.formats import ContentItem
    from honing.data.vision.images import load_image

    strip_image(tmp_path / "strip.png").save(tmp_path / "page.pdf")  # a one-page PDF of the strip
    page = load_image(ContentItem(type="pdf", content=str(tmp_path / "page.pdf"), page=1))
    expected = transformers_answer(vl_run / "hf", page, 6)
    capsys.readouterr()
    args = ["generate", str(vl_run), "--prompt", PROMPT, "--image", str(tmp_path / "page.pdf"), "--pdf-page", "1"]
    assert main([*args, "--max-new-tokens", "6"]) == 0
    assert capsys.readouterr().out == expected + "\n"
    assert main([*args[:-1], "2"]) == 2  # a page the file does not have: one line, exit 2
    assert "page 2" in capsys.readouterr().err


def test_eval_refuses_a_vision_language_model_in_one_line(vl_run, capsys):
    pytest.importorskip("lm_eval", reason="lm-eval is not installed (pip install 'honing[eval]')")
    assert main(["eval", str(vl_run), "--tasks", "anything.yaml"]) == 2
    assert capsys.readouterr().err == (
        f"honing: error: honing eval: {vl_run / 'hf'} is a vision-language model; lm-eval runs text ones here\n"
    )
