"""``honing prepare`` for the fine-tuning methods: a split's rows, through the method's row kind, into a local
folder that training then reads memory-mapped."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from honing.data.prepared_rows import is_prepared_folder
from honing.data.splits import prepare_kind
from honing.errors import ConfigError
from honing.recipes.build_run import configure_storage, run_assets

if TYPE_CHECKING:
    from honing.recipes.base import Recipe


def prepare_split(
    spec: Recipe, out_dir: str, *, split: str = "train", workers: int | None = None, progress: bool = False
) -> tuple[Any, bool]:
    """The split's rows into the local folder ``out_dir`` (kept as they are when it already holds them), through
    ``spec``'s row kind; whether anything was built."""
    config = spec.config
    if "://" in out_dir:
        raise ConfigError(f"--out {out_dir!r}: prepared rows are read memory-mapped; give a local folder")
    section = config.data.train if split == "train" else config.data.validation
    if section is None:
        raise ConfigError(f"data.{split}: not set, so there is nothing to prepare")
    if any(is_prepared_folder(source.path) for source in section.sources):
        raise ConfigError(f"data.{split}.sources: these are already prepared folders")
    configure_storage(config.storage)
    kind = spec.row_kind(run_assets(spec))
    return prepare_kind(kind, out_dir, kind.source_fields(section.sources), workers=workers, progress=progress)
