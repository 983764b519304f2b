"""GQA-OOD (Kervadec et al., CVPR 2021): reader of GQA v1.2 questions, the selection rules, the builder and its card."""
