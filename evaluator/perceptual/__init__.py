"""The perceptual score (Gat et al., NeurIPS 2021, Eq. 1-5): the engine (`score.py`), its report (`report.py`)
and the `vlbench perceptual` command (`run.py`)."""
