"""VCR-Visor evaluation: the task and APQ / HPQ."""
