"""VisDial v1.0 (Das et al., CVPR 2017): reader of the dialog and dense-annotation files, and the builder."""
