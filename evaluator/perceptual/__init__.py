"""The perceptual score (Gat et al., NeurIPS 2021, Eq. 1-5): the engine and its report."""
