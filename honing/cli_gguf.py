"""``honing export SOURCE OUT.gguf --gguf``: which model SOURCE names (a Hugging Face folder, a run folder's ``hf/``,
or a ``stepN/`` checkpoint, exported to a Hugging Face folder first) and the checks of the file to write; the
conversion itself is ``honing.export.gguf``."""

from __future__ import annotations

import argparse
import os
import tempfile

from honing.cli_checks import is_url
from honing.errors import ConfigError

#: the first bytes of every GGUF file: an existing file without them is not replaced
GGUF_MAGIC = b"GGUF"


def check_gguf_out(path: str) -> None:
    """Refuse, naming OUT_DIR, a path the GGUF file must not be written to: a folder, or a file that is not an
    earlier GGUF export (it would be lost)."""
    if is_url(path):
        raise ConfigError(f"OUT_DIR: {path} is remote; with --gguf give a local path of the .gguf file to write")
    if os.path.isdir(path):
        raise ConfigError(f"OUT_DIR: {path} is a folder; with --gguf give the path of the .gguf file to write")
    if os.path.isfile(path):
        with open(path, "rb") as handle:
            if handle.read(len(GGUF_MAGIC)) != GGUF_MAGIC:
                raise ConfigError(f"OUT_DIR: {path} is a file that is not a GGUF file; give a new path to write")


def model_folder(source: str) -> str | None:
    """The Hugging Face folder SOURCE names, or None when it is a checkpoint (to export first)."""
    from honing.train.checkpoint import Checkpointer

    if Checkpointer.dir_is_checkpoint(source):
        return None
    if os.path.isfile(os.path.join(source, "config.json")):
        return source
    if os.path.isfile(os.path.join(source, "hf", "config.json")):
        return os.path.join(source, "hf")
    if not os.path.exists(source):
        raise ConfigError(f"CHECKPOINT: {source} does not exist")
    raise ConfigError(
        f"CHECKPOINT: {source} is not a model folder (config.json), a run folder (hf/ inside) or a honing checkpoint"
    )


def run_export_gguf(args: argparse.Namespace) -> int:
    """Write SOURCE's model as the GGUF file OUT; prints what was written."""
    from honing.export.gguf import OUT_TYPES, export_gguf, import_gguf

    import_gguf()  # a missing package is said before any model is read
    out_type = args.outtype or "f16"
    if out_type not in OUT_TYPES:
        raise ConfigError(f"--outtype: expected one of {', '.join(OUT_TYPES)}, got {out_type!r}")
    check_gguf_out(args.out_dir)
    folder = model_folder(args.checkpoint)
    parent = os.path.dirname(os.path.abspath(args.out_dir))
    os.makedirs(parent, exist_ok=True)
    partial = f"{args.out_dir}.partial"  # written whole, then moved: a failed export leaves no half file behind
    try:
        if folder is None:
            from honing.run.checkpoint_model import export_checkpoint

            with tempfile.TemporaryDirectory(dir=parent) as staging:
                result = export_gguf(export_checkpoint(args.checkpoint, staging), partial, out_type=out_type)
        else:
            result = export_gguf(folder, partial, out_type=out_type)
        os.replace(partial, args.out_dir)
    finally:
        if os.path.exists(partial):
            os.remove(partial)
    print(
        f"exported {args.checkpoint} to {args.out_dir} ({result.architecture}, {result.tensors} tensors, "
        f"{result.out_type}); run it with llama.cpp: llama-cli -m {args.out_dir}"
    )
    return 0
