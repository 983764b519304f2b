"""DISCO evaluation: the task and the counting errors."""
