"""An olmOCR ``pipeline`` (the list of steps a ``dataset.train[i]`` / ``dataset.eval[i]`` entry runs on each page)
as honing's ``data.pdf_pages`` options and ``data.pdf_longest_side``. A step honing does not have is refused in one
line naming it; a step honing does in its own way (the chat template, the processor) gets one note."""

from __future__ import annotations

from typing import Any

from honing.interop.configs.olmocr_augment import augment_like_olmocr
from honing.interop.configs.translation import Translation

# olmOCR's step defaults (olmocr/train/config.py)
DEFAULT_LONGEST_SIDE = 1024
DEFAULT_ANCHOR_LEN = 6000
DEFAULT_ROTATION = 0.5
DEFAULT_FLIP_RATE = 1e-4
PROMPT_STEPS = {
    "FinetuningPrompt": "plain",
    "NewYamlFinetuningPromptWithAnchoring": "front_matter",
    "NewYamlFinetuningPromptWithNoAnchoring": "front_matter",
}
FLAG_STEPS = {
    "FilterOutRotatedDocuments": "skip_rotated",
    "DatasetTextRuleFilter": "text_rules",
    "ReformatLatexBoldItalic": "latex_bold_italic",
    "LatexBracketNormalizer": "latex_brackets",
}
TABLE_TRANSFORMATIONS = ("annotate_dims", "firstrowpreview")
# steps of forks, not of allenai/olmocr's pipeline (olmocr/train/dataloader.py): why each is not read
FORK_STEPS = {
    "ChandraHTMLPrompt": "a step of the fork zzeennoo/olmocr (Chandra's OCR prompt for HTML replies), not of "
    "olmOCR's pipeline; use one of olmOCR's prompt steps",
}


def pipeline_options(t: Translation, key: str, steps: Any) -> tuple[dict[str, Any], int | None]:
    """The ``data.pdf_pages`` options and the rendering size (None: no ``PDFRenderer``) of one source's pipeline."""
    options: dict[str, Any] = {}
    longest_side = None
    if not isinstance(steps, list) or not steps:
        t.refuse(key, f"{steps!r}: expected a list of pipeline steps")
        return options, None
    names = []
    for index, step in enumerate(steps):
        where = f"{key}[{index}]"
        if not isinstance(step, dict) or not isinstance(step.get("name"), str):
            t.refuse(where, f"{step!r}: expected a step with a name")
            continue
        if step.get("enabled", True) is False:
            continue
        if "verbose" in step:  # posicube's KolmOCR fork: a step's log switch
            t.note(f"{where}.verbose", "not needed: a fork's switch for the step's logs; the rows are the same")
        name, settings = step["name"], {k: v for k, v in step.items() if k not in ("name", "enabled", "verbose")}
        names.append(name)
        longest_side = read_step(t, where, name, settings, options, longest_side)
    if "PDFRenderer" not in names:
        t.refuse(key, "no PDFRenderer step: honing trains on the page's image, so the pipeline must render it")
    if not any(name in PROMPT_STEPS or name in FORK_STEPS for name in names):  # a fork's prompt: refused as a step
        t.refuse(key, f"no prompt step (one of {', '.join(PROMPT_STEPS)})")
    if options.pop("no_anchor", False):  # the prompt has no room for anchor text: none is made
        options.pop("anchor_text_len", None)
    elif any(name in PROMPT_STEPS for name in names) and "anchor_text_len" not in options:
        t.refuse(key, "the prompt step takes anchor text: olmOCR needs a StaticLengthDocumentAnchoring step before it")
    return options, longest_side


def read_step(
    t: Translation, where: str, name: str, settings: dict[str, Any], options: dict[str, Any], longest_side: Any
) -> Any:
    """One step into ``options``; returns the rendering size, changed by a ``PDFRenderer``."""
    taken: set[str] = set()

    def setting(key: str, default: Any) -> Any:
        taken.add(key)
        return settings.get(key, default)

    if name == "FrontMatterParser":
        kind = setting("front_matter_class", None)
        use_class = setting("use_page_response_class", True)
        if kind not in (None, "PageResponse") or (kind is None and use_class is False):
            t.refuse(where, f"{name} without PageResponse: honing reads the page's front matter as PageResponse")
    elif name == "PDFRenderer":
        longest_side = number(t, f"{where}.target_longest_image_dim", setting("target_longest_image_dim", None))
        longest_side = DEFAULT_LONGEST_SIDE if longest_side is None else longest_side
    elif name == "StaticLengthDocumentAnchoring":
        length = number(t, f"{where}.target_anchor_text_len", setting("target_anchor_text_len", DEFAULT_ANCHOR_LEN))
        if length is not None:
            options["anchor_text_len"] = max(int(length), -1)
    elif name in PROMPT_STEPS:
        options["prompt"] = PROMPT_STEPS[name]
        if name == "NewYamlFinetuningPromptWithNoAnchoring":
            options["no_anchor"] = True
    elif name in ("FrontMatterOutputFormat", "JSONOutputFormat"):
        options["reply"] = "json" if name == "JSONOutputFormat" else "front_matter"
    elif name == "InstructUserMessages":
        options["prompt_first"] = bool(setting("prompt_first", False))
    elif name in FLAG_STEPS:
        options[FLAG_STEPS[name]] = True
    elif name == "TableTransformation":
        transformation = setting("transformation", "annotate_dims")
        if transformation not in TABLE_TRANSFORMATIONS:
            t.refuse(where, f"{name} {transformation!r}: expected one of {', '.join(TABLE_TRANSFORMATIONS)}")
        options["tables"] = transformation
    elif name == "RotationAugmentation":
        options["rotation_probability"] = number(t, f"{where}.probability", setting("probability", DEFAULT_ROTATION))
    elif name == "AugraphyBasicAugmentations":
        augment_like_olmocr(t, where, number(t, f"{where}.probability", setting("probability", None)))
    elif name == "RandomTokenFlipper":
        options["token_flip_rate"] = number(
            t, f"{where}.token_flip_rate", setting("token_flip_rate", DEFAULT_FLIP_RATE)
        )
        masked(t, where, setting("masking_index", -100))
    elif name == "Tokenizer":
        masked(t, where, setting("masking_index", -100))
        end = setting("end_of_message_token", "<|im_end|>")
        t.note(
            f"{where}.end_of_message_token",
            f"{end!r}: the reply ends as the model's chat template ends an assistant turn (Qwen-VL: <|im_end|>)",
        )
    elif name in FORK_STEPS:
        t.refuse(where, f"pipeline step {name!r} is not available: {FORK_STEPS[name]}")
        return longest_side
    else:
        t.refuse(where, f"pipeline step {name!r} is not available in honing's olmOCR reader")
        return longest_side
    for extra in sorted(set(settings) - taken):
        t.refuse(f"{where}.{extra}", f"not a setting of olmOCR's {name} step")
    return longest_side


def masked(t: Translation, where: str, index: Any) -> None:
    """olmOCR's ``masking_index``: honing leaves tokens out of the loss with -100 only."""
    if index != -100:
        t.refuse(f"{where}.masking_index", f"{index!r}: honing leaves tokens out of the loss with -100")


def number(t: Translation, key: str, value: Any) -> Any:
    """``value`` as a number, or None with one refusal line naming ``key``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        t.refuse(key, f"{value!r}: expected a number")
        return None
    return value
