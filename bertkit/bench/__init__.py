"""Benchmarks: timing, measures, quality runs, claims and reports (`bertkit bench`)."""
