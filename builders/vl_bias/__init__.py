"""VL-Bias (Zhang, Wang, Sang, ACM MM 2022): the target and template words, the image reader and the builder."""
