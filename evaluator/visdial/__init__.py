"""VisDial evaluation: the task and the retrieval metrics."""
