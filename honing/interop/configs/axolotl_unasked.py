"""axolotl keys that users' files set but that ask axolotl for nothing in that file: noted in one line each, not
refused (found on configs users wrote, benchmarks/held_out_configs.py)."""

from __future__ import annotations

from honing.interop.configs.key_tables import key_table
from honing.interop.configs.translation import Keys, Translation

KEYS = key_table("axolotl").keys

# axolotl generates text at evaluation only with one of these; without them the lengths below are read by nothing
SAMPLING_SWITCHES = ("eval_table_size", "generate_samples", "do_causal_lm_eval", "eval_causal_lm_metrics")
SAMPLING_LENGTHS = ("eval_max_new_tokens", "eval_table_max_new_tokens")


def note_unasked(t: Translation, top: Keys) -> None:
    """Take the keys of ``top`` that ask for nothing here (before ``finish`` refuses them), each with a note."""
    for name, value in top.values.items():
        if value is None and name not in KEYS[""] and name not in top.taken:
            top.take(name)  # an older axolotl's key left empty (`debug:`): axolotl reads null as unset
            t.note(name, "null, and not a key of axolotl's schema today: asks for nothing")
    if not any(top.peek(name) for name in SAMPLING_SWITCHES):
        for name in SAMPLING_LENGTHS:
            if top.has(name):
                t.note(name, f"{top.take(name)!r}: unused, axolotl samples no text at evaluation without "
                             f"{' / '.join(SAMPLING_SWITCHES)}")  # fmt: skip
    base = top.peek("base_model")
    if top.has("base_model_config") and top.peek("base_model_config") == base:
        top.take("base_model_config")
        t.note("base_model_config", "the base model's own config (honing loads it too)")
