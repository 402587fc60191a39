"""Vision-language rows: images and PDF pages, the model's processor, padded and packed batches."""
