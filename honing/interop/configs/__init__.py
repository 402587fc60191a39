"""Other systems' config files read as honing's, at honing's edge: an Oumi training config, an olmOCR
``TrainConfig`` YAML, the verl overrides inside an Oumi GRPO config, an axolotl YAML or a LLaMA-Factory training YAML
(with its ``dataset_info.json``), recognised by shape and translated to honing's config by pure functions from a
dict to a dict (``dialects``, ``oumi``, ``olmocr``, ``verl``, ``axolotl``, ``llamafactory``; the last two walk their
schemas' generated key tables, ``*_keys.py``, through a verdict per key, ``*_table.py``).

``load_any_config`` is what the CLI reads a user's config file with; ``honing convert FILE`` (``convert_file``)
writes a translation as a honing YAML. This package imports nothing of honing but ``honing.config``.
"""

from honing.interop.configs.convert import convert_file, translation_yaml
from honing.interop.configs.dialects import detect_dialect, translate, translate_or_refuse
from honing.interop.configs.loading import load_any_config
from honing.interop.configs.translation import Translation

__all__ = [
    "Translation",
    "convert_file",
    "detect_dialect",
    "load_any_config",
    "translate",
    "translate_or_refuse",
    "translation_yaml",
]
