"""Data in: sources (files, hub datasets), columns, labels and problem shapes, splits, GLUE presets."""
