"""Measuring models: timing discipline (`timing`), the models under test (`contenders`), their timed steps (`steps`),
the measurements (`measure`: size, latency, throughput, memory, training step) and the claims and tables
(`report`) - what `bertkit bench`, distill's report and the benchmark scripts use."""
