"""Built-in callbacks, one per file."""
