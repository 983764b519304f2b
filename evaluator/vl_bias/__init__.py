"""VL-Bias scoring: CounterBias (Zhang, Wang, Sang, ACM MM 2022, Eq. 1-13), its run and report,
and the counterfactual-image attack."""
