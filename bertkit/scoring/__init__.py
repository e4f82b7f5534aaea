"""Scores: the built-in and `evaluate` metrics and the per-problem-shape facts (outputs, decisions)."""
