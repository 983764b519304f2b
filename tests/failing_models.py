"""`py:` models for the suite's tests: a model that fails with an exception of its own on one benchmark."""

from __future__ import annotations


class FailsOnVqa:
    """Answers "yes" to every question, except that VQA's tables (they have a question_type column) make it
    raise, as a model whose forward pass breaks on one benchmark's inputs does."""

    def predict(self, table) -> list:
        if "question_type" in table.column_names:
            raise RuntimeError("shape mismatch in the cross-attention mask\nsecond line")
        return ["yes"] * table.num_rows
