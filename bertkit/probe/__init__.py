"""Probes on frozen features: fitting per layer, problem shapes, inputs, saved probes, `bertkit probe`."""
