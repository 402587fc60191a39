"""Train modules, one per method family."""
