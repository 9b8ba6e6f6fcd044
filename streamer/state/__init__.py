"""State: the worker's model checkpoints."""
