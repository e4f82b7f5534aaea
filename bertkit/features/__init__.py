"""Features: pooling, extraction, the on-disk store and the `bertkit embed` command."""
