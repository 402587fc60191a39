"""Plain text for pretraining: documents from files, the token stream, prepared token shards and their rows."""
