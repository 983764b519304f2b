"""Crowd-counting errors (DISCO; Gat et al., NeurIPS 2021, Table 5 reports 1 - MAPE): per-sample absolute, squared and
absolute percentage errors, and MAE, RMSE, MAPE (a fraction) and 1 - MAPE over a set."""

from __future__ import annotations

import numpy as np


def counting_errors(predicted: np.ndarray, truth: np.ndarray) -> dict[str, np.ndarray]:
    """Per sample: |p - t|, (p - t)^2 and |p - t| / t (NaN where t = 0: no relative error exists)."""
    p, t = np.asarray(predicted, np.float64), np.asarray(truth, np.float64)
    ape = np.full(t.shape, np.nan)
    np.divide(np.abs(p - t), t, out=ape, where=t > 0)
    return {"ae": np.abs(p - t), "se": (p - t) ** 2, "ape": ape}


def counting_metrics(predicted: np.ndarray, truth: np.ndarray) -> dict[str, float | int | None]:
    e = counting_errors(predicted, truth)
    valid = ~np.isnan(e["ape"])
    mape = float(e["ape"][valid].mean()) if valid.any() else None
    return {"mae": float(e["ae"].mean()), "rmse": float(np.sqrt(e["se"].mean())), "mape": mape,
            "one_minus_mape": None if mape is None else 1.0 - mape, "zero_count_samples": int((~valid).sum())}
