"""DISCO (Hu et al. 2020): reader of images, audio clips and density maps, and the builder."""
