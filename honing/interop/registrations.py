"""What this layer plugs into the core's extension points (``honing.extensions``), by path: the core calls them by
a generic name and imports each module only when a run uses it. Imported by ``honing`` itself (the root package), so
every use of honing has them; it imports nothing but ``honing.extensions``."""

from __future__ import annotations

from honing import extensions

# verl's rewards: ``grpo.rewards: [{name: "verl:countdown"}]``, and a user's compute_score(data_source,
# solution_str, ground_truth, extra_info) imported by path
extensions.register_reward_scheme("verl", "honing.interop.verl_rewards:resolve")
extensions.register_reward_adapter("honing.interop.verl_rewards:adapt")

# olmOCR's data layouts (a folder of PDF + front-matter markdown pages; OpenAI batch responses), shaped by data.olmocr
for source_format in ("olmocr_pages", "olmocr_batch"):
    extensions.register_source_format(source_format, "honing.interop.olmocr_rows:OLMOCR_SOURCES")
