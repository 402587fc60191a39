"""What this layer plugs into the core's extension points (``honing.extensions``), by path: the core calls them by
a generic name and imports each module only when a run uses it. Imported by ``honing`` itself (the root package), so
every use of honing has them; it imports nothing but ``honing.extensions``."""

from __future__ import annotations

from honing import extensions

# verl's rewards: ``grpo.rewards: [{name: "verl:countdown"}]``, and a user's compute_score(data_source,
# solution_str, ground_truth, extra_info) imported by path
extensions.register_reward_scheme("verl", "honing.interop.verl_rewards:resolve")
extensions.register_reward_adapter("honing.interop.verl_rewards:adapt")

# olmOCR's data layouts (PDF + front-matter markdown folders; OpenAI batch responses), read as data.pdf_pages says
for source_format in ("olmocr_pages", "olmocr_batch"):
    extensions.register_source_format(source_format, "honing.interop.olmocr_rows:OLMOCR_SOURCES")

# VeOmni's recipe steps as its document writes them (freeze_module(self), build_model_assets keeping the processor,
# build_data_transform, build_data_collate_info's dict), adapted once as each recipe class is defined
extensions.register_recipe_adapter("honing.interop.veomni_recipe:adapt_recipe_steps")

# callbacks written with OLMo-core's or VeOmni's event names answer honing's as a recipe's Trainer registers them
extensions.register_callback_adapter("honing.interop.callback_names:with_honing_event_names")
