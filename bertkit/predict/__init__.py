"""Using a trained model: `bertkit predict` and `bertkit evaluate`."""
