"""Models: the only from_pretrained, devices and dtypes, accepted inputs, the fast forward, inference."""
