"""A trained model out of honing: Hugging Face folders (``hf_folder``: merged LoRA, adapters), written a layer at a
time (``streamed``, ``safetensors_writer``), with a model card (``model_card``), or as GGUF for llama.cpp (``gguf``)."""
