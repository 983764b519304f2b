"""VCR scoring: Q->A, QA->R and Q->AR accuracy."""
