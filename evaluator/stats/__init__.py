"""Confidence intervals and paired tests (`bootstrap.py`: the cluster bootstrap, paired resampling and the
permutation test) and CircularEval's report (`circular.py`)."""
