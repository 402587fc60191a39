"""The ``data`` section (sources per split, how rows are cut, batched and masked) and the ``tokenizer`` section."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from honing.config.image_schema import ImageTransformsSection
from honing.config.mixture_schema import MixtureSection
from honing.config.pdf_pages_schema import PdfPagesSection
from honing.config.section import Section


class SourceSection(Section):
    """One data source: a file, folder, glob, saved or hub ``datasets`` name (local or any fsspec URL),
    or ``generated:TASK`` for a task the project generates (see ``honing.data.generated.tasks``)."""

    path: str
    """A file, folder or glob, local or any fsspec URL, a ``datasets`` name, or ``generated:TASK``."""
    # pretraining reads text / jsonl; fine-tuning reads conversation / alpaca / sharegpt /
    # prompt_completion / text (others are refused per method); auto detects from the file name or the first row.
    format: Literal[
        "auto",
        "text",
        "jsonl",
        "conversation",
        "alpaca",
        "sharegpt",
        "prompt_completion",
        "prompt",
        # preference pairs (DPO): honing.data.preference.pairs
        "preference",
        "preference_prompt",
        "preference_sharegpt",
        "preference_transcript",
        # image conversations with <image> placeholders (LLaMA-Factory's files; vl_sft)
        "mllm",
        # a folder written by `honing prepare` (pretraining): memory-mapped token shards
        "tokens",
        # olmOCR's data (vl_sft, shaped by data.pdf_pages): PDF + front-matter markdown folders; OpenAI batch responses
        "olmocr_pages",
        "olmocr_batch",
    ] = "auto"
    """How the rows are read; ``auto`` detects it from the file name or the first row (methods read some only)."""
    weight: float = 1.0
    """How many times the source's rows are used per epoch (a seeded fraction of them for the remainder)."""
    proportion: float | None = Field(default=None, gt=0)
    """The source's share of the split's ``mixture`` draws (relative to the other sources'); None on every source
    of a mixture: the sources take turns, one row each."""
    text_field: str = "text"
    """Pretraining: the field of a JSONL row that holds the document's text."""
    max_samples: int | None = Field(default=None, ge=1)
    """Read at most this many rows of the source (the first ones, or a random subset by ``sample_seed``); None: all
    of them."""
    sample_seed: int | None = Field(default=None, ge=0)
    """With ``max_samples``: a random subset of the source's valid rows, the ones ``datasets``'
    ``shuffle(seed=sample_seed).take(max_samples)`` keeps (Oumi's ``shuffle`` with ``sample_count``), in file order;
    the whole source is read to choose. None: the first ``max_samples`` rows."""
    subset: str | None = Field(default=None, min_length=1)
    """A configuration of a dataset read with ``datasets.load_dataset`` (a hub name or ``folder:split``), as
    ``load_dataset(path, subset)`` names it, e.g. ``sample-10BT`` of ``HuggingFaceFW/fineweb-edu``; None: its
    default one."""
    name: str | None = Field(default=None, pattern=r"^[\w.-]+$")
    """A validation source's name in its own metrics (``eval/<name>/loss``); None: its file's stem."""
    columns: dict[str, str] = Field(default_factory=dict)
    """The rows' own column for each of honing's names (``{instruction: question, output: answer}``,
    ``{messages: dialogue}``); ``role`` / ``content`` (``from`` / ``value``) name the keys inside each message
    (docs/data.md#column-mappings); empty: the rows use honing's names."""
    roles: dict[str, str] = Field(default_factory=dict)
    """The rows' speaker names as honing's (``{human: user, bot: assistant}``), in each message's ``role`` or
    ``from``; empty: the rows use honing's (and ShareGPT's) names."""
    dataset: str | None = Field(default=None, min_length=1)
    """A named data set (``countdown``, ``gsm8k``, ``alpaca``, ... or its hub id, docs/data.md#named-data-sets): the
    rows at ``path`` (its hub id, or a local file) are in the data set's own columns, and its builder turns each into
    a prompt or a conversation; None: the rows' keys name their format, or a ``path`` that is a registered hub id
    names the data set."""
    pdf_pages: PdfPagesSection | None = None
    """An olmOCR source's own pipeline options (its prompt, filters, augmentations), where its olmOCR ``pipeline``
    differs from the other sources' (an eval set without augmentation); None: ``data.pdf_pages``. The run-wide
    ``token_flip_rate`` stays ``data.pdf_pages``'s (refused here, as is this key on a source of another format)."""

    @model_validator(mode="after")
    def _dataset_or_columns(self) -> SourceSection:
        if self.dataset is not None and self.columns:
            raise ValueError(
                f"give a source's columns or its dataset, not both: the named data set {self.dataset!r} reads its own "
                "columns (remove columns)"
            )
        return self

    @model_validator(mode="after")
    def _seed_needs_count(self) -> SourceSection:
        if self.sample_seed is not None and self.max_samples is None:
            raise ValueError("sample_seed chooses max_samples rows at random: set max_samples, or remove sample_seed")
        return self

    @model_validator(mode="after")
    def _dataset_or_format(self) -> SourceSection:
        if self.dataset is not None and self.format != "auto":
            raise ValueError(
                f"give a source's format or its dataset, not both: the named data set {self.dataset!r} builds rows "
                f"whose format honing detects (remove format: {self.format})"
            )
        return self


class SplitSection(Section):
    """A set of sources for one split (train or validation)."""

    sources: list[SourceSection] = Field(min_length=1)
    """The split's sources, read together (each by its weight, or mixed by ``mixture``)."""
    mixture: MixtureSection | None = None
    """Sample the sources by their ``proportion`` (docs/data.md#mixtures); None: every source's rows, each repeated
    by its weight."""

    @model_validator(mode="after")
    def _proportions_need_a_mixture(self) -> SplitSection:
        given = [index for index, source in enumerate(self.sources) if source.proportion is not None]
        if self.mixture is None and given:
            raise ValueError(
                f"sources[{given[0]}].proportion needs the split's mixture (add mixture: {{stop: first_exhausted}} "
                "beside sources) or remove it"
            )
        if self.mixture is not None and given and len(given) < len(self.sources):
            missing = next(i for i in range(len(self.sources)) if i not in given)
            raise ValueError(f"sources[{missing}] has no proportion; a mixture gives one to every source or to none")
        weighted = [index for index, source in enumerate(self.sources) if source.weight != 1.0]
        if self.mixture is not None and weighted:
            raise ValueError(
                f"sources[{weighted[0]}].weight is {self.sources[weighted[0]].weight:g}: in a mixture a source's share "
                "is its proportion (remove weight)"
            )
        return self


class DataSection(Section):
    """What the model reads and how it is batched."""

    train: SplitSection
    """The training data."""
    validation: SplitSection | None = None
    """The validation data; None: ``validation_split`` of the training documents, or no validation."""
    validation_split: float = Field(default=0.0, ge=0.0, lt=1.0)
    """The fraction of training documents held out for validation when ``validation`` is not set; 0: none."""
    seq_len: int = Field(default=256, ge=2)
    """Tokens per row: pretraining cuts rows of this length, fine-tuning's examples are cut or packed to it."""
    global_batch_size: int = Field(default=16, ge=1)
    """Rows per optimizer step, over all ranks (gradient accumulation makes up what micro-batches leave)."""
    micro_batch_size: int | None = Field(default=None, ge=1)
    """Rows per forward pass on one rank; None: the rank's whole share of the global batch in one pass."""
    batch_size_per_rank: int | None = Field(default=None, ge=1)
    """Rows per optimizer step on each data-parallel rank (a Hugging Face run's per-device batch x gradient
    accumulation steps): the global batch is this x the data-parallel ranks of the run; None: ``global_batch_size``."""
    shuffle: bool = True
    """Shuffle the training rows each epoch, in an order set by ``trainer.seed``; false: in file order."""
    cache_dir: str | None = None
    """Where tokenized data and prepared rows are cached; None: ``$HONING_CACHE_DIR`` (``~/.cache/honing``)."""
    document_masking: bool = False
    """Pretraining: position_ids restart at each document, so no token attends across documents."""
    text_document_separator: str | None = Field(default=None, min_length=1)
    """Pretraining: what splits a text file into documents, e.g. ``"\\n\\n"``; None: each file is one document
    (``honing prepare`` and training from raw text split the same way)."""
    num_workers: int = Field(default=0, ge=0)
    """Worker processes that read and collate whole batches ahead of training (0: in the training process); the
    batches, their order and a resume's position are the same for any number."""
    # fine-tuning only (refused for pretraining: honing.config.methods.FINETUNE_ONLY)
    chat_template: str | None = None
    """Fine-tuning: a named chat template (``chatml``, ``llama3``, ``zephyr``, ``plain_roles``, ``eos_separated``) or
    inline Jinja; None: the tokenizer's own."""
    chat_template_fallback: str | None = None
    """Fine-tuning on text, with ``chat_template`` unset: the named template (or Jinja) used when the tokenizer has no
    chat template of its own (Oumi's rule, whose fallback is its ``default``: ``plain_roles``); None: such a tokenizer
    is refused, asking for ``chat_template``."""
    chat_template_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Prompt methods (grpo, rloo, ppo, online_dpo, vl_grpo): variables given to the chat template at every
    rendering of the run (prompts, tool turns), as ``apply_chat_template``'s extra keyword arguments, e.g.
    ``{enable_thinking: false}`` for Qwen3 (TRL's ``chat_template_kwargs``); refused for the other methods."""
    train_on: Literal["assistant", "all"] = "assistant"
    """Fine-tuning: the loss is on the assistant's turns only (``assistant``) or on every token (``all``)."""
    packing: bool = True
    """Fine-tuning: several examples per row, each attending only to itself; false: one padded example per row."""
    group_by_length: bool = True
    """Fine-tuning without packing: batch rows of similar length together, so less of a batch is padding."""
    overlong: Literal["truncate", "drop"] = "truncate"
    """Fine-tuning: an example longer than ``seq_len`` is cut to it (``truncate``) or left out (``drop``)."""
    max_prompt_length: int | None = Field(default=None, ge=1)
    """Preference pairs and KTO rows (dpo, orpo, cpo, kto): a prompt longer than this keeps its last tokens, before
    the pair is fitted to ``seq_len`` (earlier TRL's ``max_prompt_length``); None: only ``seq_len`` cuts."""
    max_completion_length: int | None = Field(default=None, ge=1)
    """Preference pairs and KTO rows: a reply longer than this keeps its first tokens, before the pair is fitted to
    ``seq_len`` (earlier TRL's ``max_completion_length``); None: only ``seq_len`` cuts."""
    cache_rows: bool = True
    """Fine-tuning: tokenized rows are prepared once into ``cache_dir`` (worker processes, one rank per node) and
    read from there by every rank and every later run with the same inputs; false: each rank tokenizes in memory."""
    min_pixels: int | None = Field(default=None, ge=1)
    """Vision-language SFT: the image processor's lower resize bound in pixels (Qwen-VL's name); None: its own."""
    max_pixels: int | None = Field(default=None, ge=1)
    """Vision-language SFT: the image processor's upper resize bound in pixels (Qwen-VL's name); None: its own."""
    pdf_longest_side: int | None = Field(default=None, ge=1)
    """PDF pages render with this longest side in pixels (olmOCR renders 1024-1288); None: 72 dpi, a pixel a
    point."""
    bad_rows: Literal["fail", "skip"] = "fail"
    """Fine-tuning: a malformed row stops the run naming its file and line (``fail``), or is left out (``skip``)."""
    image_transforms: ImageTransformsSection | None = None
    """Vision-language SFT: each image resized and augmented before its processor sees it (a fixed size, a small
    rotation / zoom / shift, brightness, contrast, JPEG re-encoding; docs/data.md#image-transforms); None: as read."""
    pdf_pages: PdfPagesSection | None = None
    """Vision-language SFT: how PDF pages (sources of format ``olmocr_pages`` / ``olmocr_batch``) become rows: the
    instruction, its anchor text, the reply's form, filters and augmentations (olmOCR's pipeline steps); None: the
    defaults."""

    def rows_per_step(self, dp_size: int) -> int:
        """Rows per optimizer step over all ranks: ``batch_size_per_rank`` x ``dp_size`` when it is set."""
        return self.batch_size_per_rank * dp_size if self.batch_size_per_rank else self.global_batch_size

    @model_validator(mode="after")
    def _fallback_without_template(self) -> DataSection:
        if self.chat_template is not None and self.chat_template_fallback is not None:
            raise ValueError(
                "chat_template_fallback: read only when chat_template is unset (it is the template for a tokenizer "
                "without one); remove one of the two"
            )
        return self

    @model_validator(mode="after")
    def _micro_divides_global(self) -> DataSection:
        if self.batch_size_per_rank is not None:
            if "global_batch_size" in self.model_fields_set:
                raise ValueError(
                    "give data.global_batch_size or data.batch_size_per_rank, not both (an override removes one: "
                    "~data.batch_size_per_rank)"
                )
            if self.micro_batch_size is not None and self.batch_size_per_rank % self.micro_batch_size:
                raise ValueError(
                    f"data.micro_batch_size ({self.micro_batch_size}) must divide "
                    f"data.batch_size_per_rank ({self.batch_size_per_rank})"
                )
            return self
        if self.micro_batch_size is not None and self.global_batch_size % self.micro_batch_size:
            raise ValueError(
                f"data.micro_batch_size ({self.micro_batch_size}) must divide "
                f"data.global_batch_size ({self.global_batch_size})"
            )
        return self


class TokenizerSection(Section):
    """Which tokenizer: byte-level, character, BPE trained here, or a pretrained one
    (``auto``: the model's own when ``model.name_or_path`` is set, else byte-level)."""

    kind: Literal["auto", "byte", "char", "bpe", "pretrained"] = "auto"
    """``auto``, ``byte``, ``char`` (vocabulary from the text), ``bpe`` (trained here) or ``pretrained`` (``path``)."""
    vocab_size: int = Field(default=4096, ge=300)
    """The vocabulary size a tokenizer trained here (``bpe``) gets."""
    path: str | None = None
    """A pretrained tokenizer's folder or hub name, required by ``kind: pretrained``."""
    trust_remote_code: bool = False
    """Run the tokenizer folder's own Python code (only for a folder you trust)."""
    special_tokens: dict[Literal["bos_token", "eos_token", "unk_token", "pad_token"], str] = Field(default_factory=dict)
    """The tokenizer's bos / eos / unk / pad token set to these texts; a text not in its vocabulary is added as a
    special token and the embeddings grow to fit (axolotl's ``special_tokens``); its own token is a no-op."""
    added_tokens: list[str] = Field(default_factory=list)
    """Tokens added to the vocabulary (not split by the tokenizer); the embeddings grow to fit (axolotl's
    ``tokens``); one already in the vocabulary is a no-op."""
