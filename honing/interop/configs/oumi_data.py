"""Oumi's ``data`` section as honing's: each dataset a source, the collator and its kwargs as packing and label
masking, the datasets' own options (hub split slices, ``limit``, processor bounds, packing length) as data keys.

Oumi's options that only steer its own loading machinery (torchdata, transform workers, returning tensors or
conversations, a shuffle before the trainer's own shuffle) get one note each; an option honing cannot honour is
refused by name.
"""

from __future__ import annotations

import os
import re
from typing import Any

from honing.interop.configs.mixture_keys import oumi_mixture
from honing.interop.configs.oumi_columns import CLASS_COLUMNS, CLASS_KWARGS, class_source
from honing.interop.configs.oumi_trl_kwargs import SKIP_PREPARE
from honing.interop.configs.translation import Keys, Translation

# Oumi dataset names that are file formats, read from dataset_path: name -> honing's source format
FORMAT_DATASETS = {
    "text_sft": "conversation",
    "text_sft_jsonl": "conversation",
    "vl_sft": "conversation",
    "vl_sft_jsonl": "conversation",
    "vision_language_jsonl": "conversation",
    "preference_pairs_jsonl": "preference",
    "text": "auto",
}
# Oumi's data set names (its registry's, and the hub ids its documents name) -> honing's named data set, which builds
# rows from the data set's own columns: set on a source read from dataset_path (a local file in the hub's columns);
# a hub id as the path names the data set itself (honing.data.named)
NAMED_DATASETS = {
    "Jiayi-Pan/Countdown-Tasks-3to4": "countdown",
    "d1shs0ap/countdown": "countdown",
    "openai/gsm8k": "gsm8k",
    "hendrycks/competition_math": "math",
    "lighteval/MATH": "math",
    "DigitalLearningGmbH/MATH-lighteval": "math",
    "HuggingFaceH4/MATH-500": "math",
    "oumi-ai/oumi-letter-count": "letter_count",
    "oumi-ai/oumi-letter-count-clean": "letter_count",
    "trl-lib/tldr": "tldr",
    "tatsu-lab/alpaca": "alpaca",
    "yahma/alpaca-cleaned": "alpaca",
    "HuggingFaceH4/ultrachat_200k": "ultrachat",
    "hiyouga/geometry3k": "geometry3k",
}
# datasets' packaged builders, which read their rows from data_files (Oumi has no class of these names)
PACKAGED_BUILDERS = frozenset({"text", "json", "csv", "parquet", "arrow"})
# Oumi's registered pretraining datasets (documents packed into rows, whatever the trainer)
PRETRAINING_DATASETS = frozenset(
    {"text", "HuggingFaceFW/fineweb-edu", "allenai/c4", "allenai/dolma", "EleutherAI/pile", "roneneldan/TinyStories",
     "Salesforce/wikitext", "wikimedia/wikipedia", "togethercomputer/RedPajama-Data-1T",
     "togethercomputer/RedPajama-Data-V2", "cerebras/SlimPajama-627B", "gmongaras/SlimPajama-627B_Reupload",
     "bigcode/starcoderdata", "bigcode/the-stack", "PleIAs/YouTube-Commons", "nampdn-ai/tiny-textbooks",
     "tiiuae/falcon-refinedweb"}
)  # fmt: skip
# Oumi's registered image datasets (the ones a split's collator or a dataset's processor_name does not reveal)
VISION_DATASETS = frozenset(
    {"vl_sft", "vl_sft_jsonl", "vision_language_jsonl", "vision_dpo_jsonl", "hf_vision", "coco_captions",
     "mnist_sft", "merve/vqav2-small", "HuggingFaceM4/the_cauldron", "HuggingFaceM4/Docmatix",
     "HuggingFaceM4/llava-instruct-mix-vsft", "allenai/pixmo-cap", "allenai/pixmo-cap-qa",
     "allenai/pixmo-ask-model-anything", "nlphuji/flickr30k", "openbmb/RLAIF-V-Dataset", "hiyouga/geometry3k",
     "lmms-lab/multimodal-open-r1-8k-verified"}
)  # fmt: skip

STREAMING_NOTE = (
    "honing reads sources whole (the same rows); for a corpus larger than memory, `honing prepare` streams it into "
    "token shards first"
)
# collator_name -> the rows it trains on: every token, or the assistant's turns only
COLLATORS = {
    "text_with_padding": "all",
    "text_completions_only_with_padding": "assistant",
    "vision_language_with_padding": "all",
    "vision_language_sft": "all",
    "dpo_with_padding": None,
}
# Oumi's _sample_dataset repeats a data set smaller than sample_count until it has that many rows
SAMPLE_COUNT_NOTE = (
    "at most that many rows (max_samples); where the data set has fewer, Oumi repeats its rows to reach the count and "
    "honing reads each once (give the source a weight to repeat it)"
)
TEMPLATE_KWARGS_NOTE = "honing finds the assistant's turns from the chat template (data.train_on: assistant)"
# an Oumi split "train[:1000]": datasets' slice syntax, which a streamed hub dataset does not take
HEAD_SLICE = re.compile(r"^(?P<split>[\w.-]+)\[:(?P<rows>\d+)\]$")


def train_datasets(raw_data: Any) -> list[dict[str, Any]]:
    """The datasets of ``data.train`` in a raw Oumi config (mappings only)."""
    train = raw_data.get("train") if isinstance(raw_data, dict) else None
    items = train.get("datasets") if isinstance(train, dict) else None
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


def reads_images(raw_data: Any) -> bool:
    """True when Oumi's training data holds images: an image dataset, a vision collator or a processor named."""
    train = raw_data.get("train") if isinstance(raw_data, dict) else None
    collator = str(train.get("collator_name") or "") if isinstance(train, dict) else ""
    for item in train_datasets(raw_data):
        kwargs = item.get("dataset_kwargs")
        if str(item.get("dataset_name")) in VISION_DATASETS or (
            isinstance(kwargs, dict) and "processor_name" in kwargs
        ):
            return True
    return collator.startswith("vision")


def reads_documents(raw_data: Any, next_token_trainer: bool) -> bool:
    """True when Oumi trains on documents packed into rows: a pretraining dataset, a packed split, or (for its own
    and transformers' trainers) a streamed or plain-text one."""
    train = raw_data.get("train") if isinstance(raw_data, dict) else None
    train = train if isinstance(train, dict) else {}
    datasets = train_datasets(raw_data)
    if train.get("pack") or any(item.get("pack") for item in datasets):
        return True
    if any(str(item.get("dataset_name")) in PRETRAINING_DATASETS for item in datasets):
        return True
    return next_token_trainer and any(item.get("streaming") or item.get("stream") for item in [train, *datasets])


def translate_data(t: Translation, data: Keys, method: str) -> None:
    """``data.train`` / ``data.validation``: datasets as sources, collators as packing and label masking."""
    for split in ("train", "validation"):  # GRPO's held-out prompts are sampled and scored by its rewards
        if data.has(split):
            translate_split(t, t.section(data.take(split), data.key(split)), split, method)
        data.take(split)
    data.note("test", "unused by oumi train, as here (it reads the train and validation splits)")
    data.done()


def translate_split(t: Translation, split_keys: Keys, split: str, method: str) -> None:
    """One split's datasets, collator, packing, mixture and target column."""
    items = split_keys.take("datasets", [])
    if not isinstance(items, list):
        t.refuse(split_keys.key("datasets"), f"{items!r}: expected a list of datasets")
        items = []
    sources = []
    for index, item in enumerate(items):
        source = translate_dataset(t, t.section(item, f"{split_keys.key('datasets')}[{index}]"), method)
        if source is not None:
            sources.append(source)
    if not sources:
        t.refuse(split_keys.key("datasets"), "expected at least one dataset")
    t.set(f"data.{split}", {"sources": sources})
    oumi_mixture(t, split_keys, items, sources, split)
    translate_collator(t, split_keys, split, method)
    pack = split_keys.take("pack")
    if pack is not None:
        set_pack(t, split_keys.key("pack"), bool(pack), method)
    text_field = split_keys.take("target_col")
    if text_field is not None:
        for source in sources:
            source["text_field"] = text_field
    if split_keys.take("stream"):
        t.note(split_keys.key("stream"), STREAMING_NOTE)
        if split == "train" and not any(isinstance(item, dict) and item.get("shuffle") for item in items):
            t.default("data.shuffle", False, "a streamed Oumi dataset reaches the trainer in file order")
    split_keys.note("use_torchdata", "not needed: honing reads and prepares rows with its own loader")
    split_keys.note(
        "experimental_use_torch_datapipes", "not needed: honing reads and prepares rows with its own loader"
    )
    for name in ("use_async_dataset", "experimental_use_async_dataset"):  # Oumi 0.1's names
        split_keys.note(
            name,
            "not needed: an older Oumi's choice of the class that packs pretraining text (a background thread or "
            "not, the same rows); honing packs documents in its own loader",
        )
    split_keys.done()


def translate_collator(t: Translation, split_keys: Keys, split: str, method: str) -> None:
    """``collator_name`` / ``collator_kwargs`` / ``train_target``: padding (no packing) and which tokens train."""
    collator = split_keys.take("collator_name")
    kwargs = t.section(split_keys.take("collator_kwargs"), split_keys.key("collator_kwargs"))
    collator = collator if collator is None or isinstance(collator, str) else repr(collator)
    if collator is not None and collator not in COLLATORS:
        t.refuse(
            split_keys.key("collator_name"), f"{collator!r} is not available; expected one of: {', '.join(COLLATORS)}"
        )
    elif collator is not None and method == "vl_dpo":
        t.note(split_keys.key("collator_name"), "image pairs are batched by honing's own collate (padded rows)")
    elif collator == "dpo_with_padding" or (collator is not None and method == "dpo"):
        t.note(
            split_keys.key("collator_name"),
            "pairs are batched by honing's DPO collate (packed, the same log-probs as padded rows)",
        )
    elif collator is not None and split == "train" and method in ("sft", "vl_sft"):
        t.set("data.packing", False)  # a padding collator: one example per row
        train_on = COLLATORS[collator]
        if kwargs.take("train_on_completions_only"):
            train_on = "assistant"
        if train_on == "assistant":
            t.set("data.train_on", "assistant")
    target = split_keys.take("train_target")
    if target is not None and str(target).lower() != "all_assistant_turns":
        t.refuse(
            split_keys.key("train_target"),
            f"{target!r} is not available: honing trains on every assistant turn (data.train_on: assistant) "
            "or on every token",
        )
    elif target is not None and method in ("sft", "vl_sft"):  # every assistant turn: honing's train_on assistant
        t.set("data.train_on", "assistant")
    for name in ("response_template", "instruction_template", "end_of_turn_template"):
        kwargs.note(name, TEMPLATE_KWARGS_NOTE)
    kwargs.take("train_on_completions_only")
    kwargs.allow("ignore_index", (-100,), "is not available: honing marks positions without loss as -100")
    kwargs.note("max_variable_sized_dims", "not needed: honing pads each image input to its batch's largest")
    kwargs.note("process_individually", "not needed: honing processes each image conversation on its own")
    kwargs.note("allow_multi_image_inputs", "not needed: honing's rows take any number of images")
    kwargs.note("main_image_feature", "not needed: honing passes every image input the processor makes")
    check_processor(t, kwargs)
    kwargs.done("honing's collates take no extra arguments")


def check_processor(t: Translation, kwargs: Keys) -> None:
    """``processor_name``: another processor than the model's becomes ``tokenizer.path`` for a vision-language
    method (the processor honing builds the image rows with); for a text method it is refused."""
    processor = kwargs.take("processor_name")
    model = t.get("model.name_or_path")
    if processor is not None and processor != model and str(t.get("method")).startswith("vl_"):
        # Oumi builds the image rows' processor from processor_name (Qwen2.5-VL's DPO recipe names Qwen2-VL's); so does
        # honing from tokenizer.path
        t.set("tokenizer.kind", "pretrained")
        t.set("tokenizer.path", processor)
    elif processor is not None and processor != model:
        t.refuse(kwargs.key("processor_name"), f"{processor!r}: honing uses the model's own processor ({model!r})")


def slice_problem(split: str) -> str | None:
    """Why ``datasets`` cannot read the sliced split ``split`` (``train[1:2:3]``), or None when it can."""
    from datasets import ReadInstruction

    try:
        ReadInstruction.from_spec(split)
    except (ValueError, AssertionError) as error:
        return str(error)
    return None


def translate_dataset(t: Translation, item: Keys, method: str) -> dict[str, Any] | None:
    """One Oumi dataset as a honing source: a format read from ``dataset_path``, or a hub name and split."""
    name = item.take("dataset_name")
    if not isinstance(name, str):
        t.refuse(item.key("dataset_name"), "required key is missing" if name is None else f"{name!r}: expected a name")
        return None
    path, split = item.take("dataset_path"), str(item.take("split", "train"))
    if path is not None and not isinstance(path, str):
        t.refuse(item.key("dataset_path"), f"{path!r}: expected a path")
        return None
    rows = None
    head = HEAD_SLICE.match(split)
    if head:  # "train[:1000]": the first rows of the split
        split, rows = head["split"], int(head["rows"])
    elif "[" in split:  # train[90%:]: honing's source path takes datasets' own slices (honing.data.split_slices)
        problem = slice_problem(split)
        if problem:
            t.refuse(item.key("split"), f"{split!r} is no split slice datasets reads ({problem})")
    kwargs_raw = item.peek("dataset_kwargs")
    if isinstance(kwargs_raw, dict) and kwargs_raw.get("data_files") is not None:
        files = data_files_path(t, f"{item.key('dataset_kwargs')}.data_files", kwargs_raw["data_files"], name, split)
        if files is None:
            return None
        if path is not None and path != files:
            t.note(item.key("dataset_path"), f"unused: Oumi reads {name!r} from dataset_kwargs.data_files ({files!r})")
        path = files
    classed = class_source(t, item, name, path, split)
    if classed is not None:  # a dataset class reading a hub data set in its own columns
        source: dict[str, Any] = classed
    elif name in CLASS_COLUMNS:  # refused in class_source
        return None
    elif path is None:
        if name in FORMAT_DATASETS:
            t.refuse(item.key("dataset_path"), f"required for the file format {name!r}")
            return None
        source = {"path": f"{name}:{split}"}
    else:
        # a folder saved by datasets holds splits; a file is one split already
        source = {"path": f"{path}:{split}" if os.path.isdir(path) and item.has("split") else path}
        if "[" in split and not os.path.isdir(path):
            t.refuse(item.key("split"), f"{split!r}: {path!r} is a file, one split: slices apply to dataset folders")
        if name in NAMED_DATASETS:  # the file holds the hub data set's own columns, as Oumi's class reads them
            source["dataset"] = NAMED_DATASETS[name]
    fmt = FORMAT_DATASETS.get(name, "auto")
    if fmt != "auto":
        source["format"] = fmt
    sample_count = item.number("sample_count", int)
    if sample_count is not None:
        rows = min(rows, sample_count) if rows else sample_count
        t.note(item.key("sample_count"), SAMPLE_COUNT_NOTE)
    subset = item.take("subset")
    if subset is not None:  # the hub dataset's configuration: load_dataset(name, subset), as Oumi passes it
        if not isinstance(subset, str) or not subset:
            t.refuse(item.key("subset"), f"{subset!r}: expected a dataset configuration's name")
        elif path is not None and not (os.path.isdir(path) and item.has("split")):
            t.refuse(item.key("subset"), f"{subset!r}: a subset is read from a hub dataset or a dataset folder")
        else:
            source["subset"] = subset
    item.take("mixture_proportion")  # read with the split (mixture_keys.oumi_mixture)
    sample_seed = translate_order(t, item)
    if sample_seed is not None:
        source["sample_seed"] = sample_seed
    item.note(
        "trust_remote_code", "the tokenizer and processor are loaded with model.trust_remote_code, as the model is"
    )
    item.note("transform_num_workers", "not needed: honing prepares rows in its own worker processes")
    # Oumi 0.1's hook for a registered preprocessing function: unset, it asks for nothing
    for name in ("preprocessing_function_name", "preprocessing_function_kwargs"):
        if item.peek(name):
            item.refuse(name, "not available: Oumi 0.1's registered preprocessing function; give rows honing reads")
        item.take(name)
    kwargs = t.section(item.take("dataset_kwargs"), item.key("dataset_kwargs"))
    rows = translate_dataset_kwargs(t, kwargs, rows, method)
    if rows is not None:
        source["max_samples"] = rows
    # the pretraining example sets these per dataset
    item.copy("max_length", "data.seq_len", int)
    if item.has("pack"):
        set_pack(t, item.key("pack"), bool(item.take("pack")), method)
    for name_ in ("streaming", "stream"):
        if item.take(name_):
            t.note(item.key(name_), STREAMING_NOTE)
    item.done()
    return source


def data_files_path(t: Translation, key: str, files: object, name: str, split: str) -> str | None:
    """``data_files`` (Oumi hands dataset_kwargs to ``datasets.load_dataset`` for a name it has no class for) as the
    source's path: the one file or glob the split reads; None, refused, for anything honing cannot read so."""
    if isinstance(files, dict):  # {split: files}
        files = files.get(split)
    files = [files] if isinstance(files, str) else files
    if not (isinstance(files, list) and files and all(isinstance(file, str) and file for file in files)):
        t.refuse(key, f"{files!r}: expected a file, a glob, a list of them or {{{split}: files}}")
        return None
    if name not in PACKAGED_BUILDERS:
        t.refuse(key, f"not available: honing reads the hub data set {name!r} whole, not a chosen part of its files; "
                      "download them and give their path as dataset_path")  # fmt: skip
        return None
    if len(files) > 1:
        t.refuse(key, f"{len(files)} files in one dataset: a honing source reads one file, folder or glob; give a "
                      "glob, or list each file as a dataset of its own")  # fmt: skip
        return None
    return files[0]


def translate_order(t: Translation, item: Keys) -> int | None:
    """A dataset's ``shuffle`` / ``seed`` / ``shuffle_buffer_size``: Oumi shuffles it once before sampling, and the
    trainer's sampler shuffles the rows again each epoch (honing's loader: ``data.shuffle``, by ``trainer.seed``).
    With ``sample_count``, Oumi's shuffle picks a random subset: its seed, returned as the source's ``sample_seed``."""
    item.note("shuffle_buffer_size", "not needed: honing reads sources whole, not through a streaming shuffle buffer")
    shuffle = bool(item.take("shuffle"))
    if not (shuffle and item.has("sample_count")):
        if shuffle:
            t.note(
                item.key("shuffle"),
                "the rows are shuffled each epoch by honing's loader (data.shuffle, seeded by trainer.seed), as by "
                "the trainer's sampler after Oumi's own shuffle",
            )
        item.note("seed", "unused without shuffle and sample_count: the training order follows trainer.seed")
        return None
    seed = item.take("seed")
    if seed is None:  # datasets' shuffle(seed=None): another subset each run; honing fixes one
        t.note(item.key("seed"), "null: Oumi draws another random subset each run; honing draws one, by seed 0")
        return 0
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        t.refuse(item.key("seed"), f"{seed!r}: expected an integer >= 0")
        return None
    return seed


def translate_dataset_kwargs(t: Translation, kwargs: Keys, rows: int | None, method: str) -> int | None:
    """A dataset's ``dataset_kwargs``: Oumi's dataset classes' arguments; returns the rows to read (``limit``)."""
    for name in (*CLASS_KWARGS, "data_files"):  # read with the dataset's class or path (translate_dataset)
        kwargs.take(name)
    limit = kwargs.number("limit", int)
    if limit is not None:
        rows = min(rows, limit) if rows else limit
    kwargs.copy("seq_length", "data.seq_len", int)  # Oumi's pretraining datasets: the packed row length
    if kwargs.take("assistant_only") and method in ("sft", "vl_sft"):
        t.set("data.train_on", "assistant")
    for name in ("response_template", "instruction_template"):
        kwargs.note(name, TEMPLATE_KWARGS_NOTE)
    if kwargs.has("system_prompt"):  # hf_vision's fixed system prompt
        kwargs.refuse("system_prompt", "not available: honing reads a row's system prompt from a column "
                      "(system_prompt_column)")  # fmt: skip
    for name in ("return_tensors", "return_conversations", "return_conversation", "return_conversations_format"):
        kwargs.note(name, "not needed: honing's rows go to its own collate, which makes the tensors")
    kwargs.note("skip_prepare_dataset", SKIP_PREPARE)  # users copy trainer_kwargs.dataset_kwargs' key here
    check_processor(t, kwargs)
    processor_kwargs = t.section(kwargs.take("processor_kwargs"), kwargs.key("processor_kwargs"))
    for name in ("min_pixels", "max_pixels"):
        if processor_kwargs.has(name) and method in ("vl_sft", "vl_grpo", "vl_dpo"):
            processor_kwargs.copy(name, f"data.{name}", int)
    processor_kwargs.done("honing passes no extra keyword arguments to the processor")
    kwargs.done("not an argument honing's readers take")
    return rows


def set_pack(t: Translation, key: str, pack: bool, method: str) -> None:
    """``pack``: documents cut from one stream into rows of ``data.seq_len`` (Oumi's packing is pretraining's)."""
    if method == "pretrain":
        if not pack:
            t.refuse(key, "false is not available: pretraining rows are always cut from one stream of documents")
    elif method in ("sft", "vl_sft"):
        t.set("data.packing", pack)
    elif pack:
        t.refuse(key, f"true is not available for method {method!r}")
