"""Text to tokens: truncation, long-text windows, length-aware batches, the token-length report."""
