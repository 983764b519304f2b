"""VCR v1.0 itself (Zellers et al., CVPR 2019): Q->A and QA->R with rendered tags."""
