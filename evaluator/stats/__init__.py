"""Paired comparisons and confidence intervals: the cluster bootstrap, exact intervals, paired tests."""
