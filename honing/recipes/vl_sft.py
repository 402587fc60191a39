"""Vision-language SFT: image conversations through the model's own processor, loss on the reply text only.

By default LoRA trains the language model (olmOCR's target modules) and the vision tower stays frozen;
``model.lora: null`` fine-tunes every weight, ``model.freeze_vision`` / ``model.freeze_projector`` and
``optim.vision_lr`` steer the rest. Per-family knowledge (which keys the model takes, where its vision
tower is) lives in ``honing.models.vl_families``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

import torch

from honing.cache import content_hash
from honing.config.schema import LoraSection
from honing.data.chat.conversation import resolve_chat_template
from honing.data.chat.templates import NAMED_TEMPLATES
from honing.data.finetune_rows import BadRowReport
from honing.data.formats import Conversation
from honing.data.prepared_rows import REJECTED
from honing.data.report import DataReport
from honing.data.vision.batches import VLCollator
from honing.data.vision.images import load_image as load_image_item
from honing.data.vision.packing import PackedVLCollator, VLPackedDataset
from honing.data.vision.prepared_rows import fit_vl_row, image_stamps, vl_row
from honing.data.vision.rows import VLDataset, VLExample, image_token_ids, process, tokenize_vl_conversations
from honing.distributed import is_rank0
from honing.errors import ConfigError, DataError
from honing.models import apply_lora
from honing.models.parallel import fsdp_shards
from honing.models.param_names import matches, named_parameters
from honing.models.quantize import check_has_lora, quantize_base
from honing.models.vl_families import (
    VLFamily,
    family_for,
    lora_targets,
    part_patterns,
    position_ids_for_packing,
    set_pixel_limits,
)
from honing.recipes.sft import SFTRecipe

log = logging.getLogger(__name__)

VISION_EXTRA = "pip install 'honing[vision]'"


class VLSFTRecipe(SFTRecipe):
    """Image conversations → the processor's ids and pixels, assistant-only labels → padded rows → LoRA or full."""

    family: VLFamily

    # --- model assets -----------------------------------------------------------------
    def build_processor(self) -> Any:
        """The model's own ``AutoProcessor`` (image processor, tokenizer, chat template); for a model built from
        ``model.config``, a tiny processor of its family assembled here (``honing.models.tiny_vl``). The image
        size bounds of ``data.min_pixels`` / ``data.max_pixels`` are set on it, so they are saved with it."""
        require_vision_extra()
        from transformers import AutoProcessor

        cfg = self.config
        name = cfg.tokenizer.path or cfg.model.name_or_path
        if cfg.tokenizer.kind == "pretrained" and name is None:
            raise ConfigError("tokenizer.kind: 'pretrained' needs tokenizer.path or model.name_or_path (a processor)")
        if cfg.data.chat_template in NAMED_TEMPLATES:
            raise ConfigError(
                f"data.chat_template: {cfg.data.chat_template!r} is a text-only template and cannot place images; "
                "leave it unset (the processor's own template) or give an inline Jinja template"
            )
        model_type = self.model_type()
        if name is None:
            from honing.models.tiny_vl import build_tiny_processor

            # the cache's own folder, published by a rename: every rank may read it while one builds it
            name = build_tiny_processor(model_type, None, cache_dir=self.cache_dir())
        try:
            processor = AutoProcessor.from_pretrained(name, trust_remote_code=cfg.tokenizer.trust_remote_code)
        except (OSError, ValueError) as error:
            reason = " ".join(str(error).split())
            raise ConfigError(f"cannot load the processor of {name!r}: {reason}") from None
        if getattr(processor, "tokenizer", None) is None or getattr(processor, "image_processor", None) is None:
            raise ConfigError(f"{name!r} has no image processor and tokenizer: vl_sft needs a multimodal processor")
        self.family = family_for(model_type, processor=processor)
        set_pixel_limits(processor, self.family, cfg.data.min_pixels, cfg.data.max_pixels)
        self.chat_template = resolve_chat_template(processor, cfg.data.chat_template)
        processor.chat_template = self.chat_template  # saved with the processor in checkpoints and exports
        return processor

    def model_type(self) -> str:
        """``model.config.model_type``, or the pretrained model's."""
        cfg = self.config.model
        if cfg.name_or_path is None:
            model_type = (cfg.config or {}).get("model_type")
            if not model_type:
                raise ConfigError(
                    "model.config.model_type: vl_sft builds a random model from its family's tiny config; set it "
                    "(e.g. qwen2_vl) or set model.name_or_path"
                )
            return model_type
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(cfg.name_or_path, trust_remote_code=cfg.trust_remote_code).model_type

    def build_model(self) -> torch.nn.Module:
        """``AutoModelForImageTextToText`` from ``model.name_or_path`` or ``model.config``; LoRA on the language
        model by default (``model.lora: null`` trains every weight)."""
        from transformers import AutoModelForImageTextToText

        cfg = self.config.model
        dtype = getattr(torch, cfg.dtype) if cfg.dtype else (torch.bfloat16 if self.precision == "bf16" else None)
        dtype = dtype or torch.float32
        lora = self.lora_section()
        shards = fsdp_shards(self.config.parallel.strategy, self.parallel_dims)
        check_has_lora(cfg.quantize, lora)  # before a long load that would be refused
        if cfg.name_or_path:
            model = self.load_pretrained(dtype, shards=shards, auto_class=AutoModelForImageTextToText)
        else:
            from honing.models.tiny_vl import tiny_vl_config

            options = dict(cfg.config or {})
            model_type = options.pop("model_type")
            model_config = tiny_vl_config(model_type, vocab_size=len(self.tokenizer), **options)
            model = AutoModelForImageTextToText.from_config(
                model_config, dtype=dtype, attn_implementation=self.attention_to_build()
            )
        self.family = family_for(model.config.model_type, model=model, processor=self.processor)
        rows = model.get_input_embeddings().weight.shape[0]
        if len(self.tokenizer) > rows:
            model.resize_token_embeddings(len(self.tokenizer))
        # QLoRA: the language model's linears; the vision tower keeps its dtype
        quantize_base(model, cfg.quantize, lora, device=self.device, shards=shards)
        model = self.set_attention(model.to(self.device))
        if lora is not None:
            targets = lora.target_modules
            if "target_modules" not in lora.model_fields_set:
                targets = lora_targets(self.family)  # the language model's linears, never the vision tower's
                # the config saved with the run (and read back by best-model export and `honing merge`) says
                # what was applied
                self.config.model.lora = lora.model_copy(update={"target_modules": targets})
            model = apply_lora(
                model,
                rank=lora.rank,
                alpha=lora.alpha,
                dropout=lora.dropout,
                bias=lora.bias,
                target_modules=targets,
                task_type=lora.task_type,
                modules_to_save=lora.modules_to_save,
            )
        return model

    def lora_section(self) -> LoraSection | None:
        """``model.lora`` as set; LoRA with its defaults when the key is absent (``model.lora: null``: none)."""
        cfg = self.config.model
        if "lora" in cfg.model_fields_set:
            return cfg.lora
        return LoraSection()

    def freeze_module(self, model: torch.nn.Module) -> None:
        """``model.freeze_layers`` patterns, then the vision tower (``model.freeze_vision``, on by default) and
        the projector (``model.freeze_projector``)."""
        super().freeze_module(model)
        cfg = self.config.model
        patterns = []
        if cfg.freeze_vision:
            patterns += part_patterns(self.family, "vision")
        elif cfg.config is not None and is_rank0():
            log.warning(
                "model.freeze_vision: false on a model built from model.config: its vision tower is random, and a "
                "random tower trained from scratch tends to collapse into one constant vector for every image "
                "(measured here: image embeddings' spread 0.03 after 60 steps at lr 1e-3, loss stuck at chance); "
                "a frozen random tower or a pretrained one (model.name_or_path) learns"
            )
        if cfg.freeze_projector:
            patterns += part_patterns(self.family, "projector")
        for name, param in named_parameters(model):
            if matches(name, patterns):
                param.requires_grad_(False)

    def extra_param_groups(self) -> list[dict[str, Any]]:
        """``optim.vision_lr``: the vision tower in a group of its own (refused while the tower is frozen)."""
        vision_lr = self.config.optim.vision_lr
        if vision_lr is None:
            return []
        if self.config.model.freeze_vision:
            raise ConfigError(
                "optim.vision_lr: the vision tower is frozen (model.freeze_vision: true); set "
                "model.freeze_vision: false to train it at its own learning rate"
            )
        return [{"params": part_patterns(self.family, "vision"), "lr": vision_lr}]

    # --- data -------------------------------------------------------------------------
    row_method = "vl_sft"

    def row_settings(self) -> dict[str, Any]:
        """The text settings, the processor (image sizes, patches, pixel bounds) and how PDF pages render."""
        return {
            **super().row_settings(),
            "processor": content_hash([self.processor.to_json_string()]),
            "pdf_longest_side": self.config.data.pdf_longest_side,
        }

    def input_stamps(self, fields: list[dict[str, Any]]) -> list[str]:
        """The local image and PDF files the rows name, with their sizes and modification times."""
        return image_stamps(self.read_items(fields)[0])

    def read_items(self, fields: list[dict[str, Any]]) -> tuple[list[list[tuple[Any, str]]], BadRowReport]:
        """The sources' examples (read once per set of sources: the cache key reads them for their images)."""
        key = json.dumps(fields, sort_keys=True)
        if getattr(self, "_read", (None,))[0] != key:
            self._read = (key, super().read_items(fields))
        return self._read[1]

    def build_rows(self, items: list[Any]) -> list[dict[str, Any] | DataError]:
        """Rows through the processor (many per call), images opened now (a bad image rejects its row here, never
        mid-epoch); each row keeps its rendered text and image references, not pixels, and where its last image
        token is (a cut must not split an image)."""
        loaded: list[Any] = []
        for example in items:
            try:
                if not isinstance(example, Conversation):
                    raise DataError("vl_sft trains on conversations; got a plain-text row")
                messages, image_items = example.to_vl_messages()
                loaded.append(((messages, [self.load_image(item) for item in image_items]), image_items))
            except DataError as error:
                loaded.append(error)
        ready = [entry[0] for entry in loaded if not isinstance(entry, DataError)]
        data = self.config.data
        results = iter(
            tokenize_vl_conversations(self.processor, ready, chat_template=self.chat_template, train_on=data.train_on)
        )
        image_ids, cut = image_token_ids(self.processor), self.row_cut()
        rows: list[dict[str, Any] | DataError] = []
        for entry in loaded:
            item = entry if isinstance(entry, DataError) else next(results)
            rows.append(item if isinstance(item, DataError) else vl_row(item, entry[1], image_ids, cut))
        return rows

    def tokenize_rows(self, table: Any, indices: Sequence[int], split: str) -> list[VLExample]:
        """The rows ``indices`` fitted to ``data.seq_len`` (``fit_vl_row``) as VL examples; the rest counted."""
        data = self.config.data
        report, tokenized = DataReport(), []
        for index in indices:
            row = table.row(index)
            try:
                if row["status"] == REJECTED:
                    raise DataError(row["reason"])
                item, fate = fit_vl_row(row, data.seq_len, data.overlong)
            except DataError as error:
                if data.bad_rows == "fail":
                    raise DataError(f"{row['origin']}: {error}") from None
                report.reject(f"{row['origin']}: {error}")
                continue
            if item is None:
                report.dropped += 1
                continue
            report.truncated += fate == "truncated"
            report.add(len(item.input_ids), sum(label != -100 for label in item.labels[1:]))
            report.add_images(len(item.images), item.image_tokens, item.pixels_before, item.pixels_after)
            tokenized.append(item)
        self.data_reports[split] = report
        self.print(report.summary(split))
        if not tokenized:
            raise DataError(f"no {split} example is left to train on (see the data report above)")
        return tokenized

    def rows(self, tokenized: list[Any], split: str) -> tuple[Any, Any]:
        """Padded rows (length-grouped) by default; packed rows with per-document rope positions when
        ``data.packing: true`` and the family has them (Qwen-VL). Images are re-processed when batched."""
        data, family = self.config.data, self.family
        report = self.data_reports[split]
        dataset = VLDataset(tokenized, self.processor, self.load_image)
        if self.packs():
            packed = VLPackedDataset(
                tokenized,
                data.seq_len,
                rows=dataset,
                rope_positions=lambda ids, types, grid: position_ids_for_packing(self.model, ids, types, grid),
                pad_token_id=self.tokenizer.pad_token_id,
            )
            report.rows, report.row_length = len(packed), data.seq_len
            report.packing_efficiency = packed.packing_efficiency
            self.print(
                f"packed into {len(packed):,} rows of {data.seq_len} tokens "
                f"({packed.packing_efficiency:.1%} real tokens)"
            )
            return packed, PackedVLCollator(self.tokenizer.pad_token_id, family.model_input_keys)
        report.rows, report.row_length = len(tokenized), max(report.lengths)
        image_token_id = self.tokenizer.convert_tokens_to_ids(family.image_token) if family.image_only_batches else None
        return dataset, VLCollator(
            self.processor, self.tokenizer.pad_token_id, family.model_input_keys, image_token_id=image_token_id
        )

    def packs(self) -> bool:
        """Whether rows are packed: only when ``data.packing`` is set true (VL rows are padded by default), and
        only for a family with per-document rope positions; otherwise setting it is refused."""
        data = self.config.data
        if "packing" not in data.model_fields_set or not data.packing:
            return False
        if not self.family.packing:
            raise ConfigError(
                f"data.packing: {self.family.model_type} has no per-document rope positions, so packed image "
                "rows would not train as they do alone; set data.packing: false (rows are padded and length-grouped)"
            )
        return True

    def packed_rows(self) -> bool:
        """False: packed image rows carry multimodal rope positions, which the varlen kernels are not tested with,
        so ``auto`` keeps sdpa and its dense per-document mask for them."""
        return False

    def groups_by_length(self) -> bool:
        """Padded rows are length-grouped with ``data.group_by_length``; packed ones are not."""
        return self.config.data.group_by_length and not self.packs()

    # --- generation ---------------------------------------------------------------------
    def held_out_answers(self) -> list[tuple[Any, str]]:
        """Validation conversations as ((messages before the last assistant turn, their image items), answer)."""
        out = []
        for example, _ in self.examples()[1]:
            if not isinstance(example, Conversation) or example.messages[-1].role != "assistant":
                continue
            prompt = Conversation(messages=example.messages[:-1], metadata=example.metadata)
            out.append((prompt, example.messages[-1].text()))
        return out

    def load_image(self, item: Any) -> Any:
        """One image item as an RGB image; PDF pages at ``data.pdf_longest_side`` when set."""
        return load_image_item(item, pdf_longest_side=self.config.data.pdf_longest_side)

    def answer(self, prompt: Any, *, max_new_tokens: int, temperature: float = 0.0) -> str:
        """The model's reply to an image conversation (greedy unless ``temperature``), stopped at end of turn."""
        from honing.models.generation import end_of_turn_ids, generate, sampling_kwargs

        messages, items = prompt.to_vl_messages()
        images = [self.load_image(item) for item in items]
        tokenizer = self.tokenizer
        text = self.processor.apply_chat_template(
            messages, chat_template=self.chat_template, tokenize=False, add_generation_prompt=True
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


def require_vision_extra() -> None:
    """One line naming the extra to install when torchvision (the image processors' backend) is missing."""
    try:
        import torchvision  # noqa: F401
    except (ImportError, RuntimeError) as error:
        raise ConfigError(
            f"method vl_sft needs torchvision for the model's image processor ({error}); {VISION_EXTRA}"
        ) from None
