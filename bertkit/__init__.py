"""bertkit: the classic BERT transfer-learning workflow from one command line."""

__version__ = "0.1.0"
