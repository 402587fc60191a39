"""Why axolotl keys are moot or refused: the reasons its verdict tables share."""

OWN_LOOP = "not needed: honing runs its own loop, not the transformers Trainer this setting tunes"
INTERNAL = "axolotl's own bookkeeping, filled in by axolotl as it runs; nothing to translate"
DEPRECATED = "a deprecated axolotl key; use its replacement (axolotl's docs name it)"
TRACKER = "not available: honing logs to W&B, TensorBoard and metrics.jsonl"
PREPROCESS = "not needed: honing prepares rows once into its cache (data.cache_dir) on the first run"
KERNEL = (
    "not needed: a fused kernel of the same maths; honing's chunked loss (model.chunked_loss) never holds full logits"
)
LOADER = "not needed: honing's loader (data.num_workers) reads and collates whole batches ahead of training"
NO_METHOD = "not available: honing has no such training method"
NO_OPTIMIZER = "not available: honing's optimizers are AdamW, SGD, Adafactor and Muon (optim.name)"
GENERATION = "not available: honing samples text during training with callbacks.sample (its own keys)"
ATTENTION = "not available: honing's attention kernels are sdpa, flex_attention, eager and flash_attention_2"
PARALLEL_MESH = "not translated: give honing's mesh (parallel.dp_replicate, dp_shard, tp, cp, ep)"
QUANT = "not available: honing quantizes a QLoRA base to NF4 or int8 (torchao) only"
EXPORT = "not needed: honing exports hf/ (merged when LoRA, safetensors) and adapter/ at the end of every run"
HUB = "not available in a training config: `honing push SAVE_FOLDER/hf REPO` uploads a finished model"
TOKENS = "not available: honing trains with the tokenizer's own vocabulary"
MODEL_AND_OPTIMIZER = (
    "not needed: the model trained is the same; honing's checkpoints also hold the optimizer and data position (for "
    "exact resume), so they are larger than model-only ones"
)
