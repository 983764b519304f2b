"""VQA v2 and VQA-CP v2: the shared reader of the official files and card code, the vqa-v2 builder
(v2), the vqa-cp builder (cp) and the re-split of Agrawal et al., CVPR 2018 (cp_split)."""
