"""Tasks generated in code (text, OCR images, preference pairs), so every example runs offline."""
