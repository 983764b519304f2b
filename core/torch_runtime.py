"""The torch runtime every model runner shares (the builders' SBERT and NLI, the evaluator's models and the
shortcut labels' training): the device a name stands for, and transformers' loading bars kept quiet."""

from __future__ import annotations


def quiet_model_loading() -> None:
    """Model loading prints per-weight progress bars; builds report their own progress."""
    from transformers.utils import logging

    logging.disable_progress_bar()


def torch_device(name: str):
    """`auto` is CUDA when present, else CPU; anything else is passed to torch as is."""
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)
