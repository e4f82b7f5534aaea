"""Training: objectives, checkpoints, the fine-tuning loop and `bertkit finetune` / `bertkit distill`."""
