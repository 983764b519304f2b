"""Social-IQ 1.0 (Zadeh et al., CVPR 2019): reader of the QA files and folds, and the builder."""
