"""CWRPO trainer: config, policy, update, checkpoints, metrics and the training loop."""
