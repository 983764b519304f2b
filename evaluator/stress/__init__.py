"""The test-set stress test (Brown et al., *Benchmark Designers Should "Train on the Test Set"*, arXiv 2511.04655,
2025): how far a split can be answered without its images, item by item, and Iterative Bias Pruning."""

CONFIG = "stress_test"  # the config of a built folder that holds the stress test's scores
DEBIASED = "debiased"  # the config that holds the rows Iterative Bias Pruning kept
