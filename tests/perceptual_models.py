"""`py:` models and a synthetic table for the perceptual-score tests."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

POSITIVE = {f"good answer {k}" for k in range(6)}


def socialiq_table(n: int = 2000, seed: int = 0) -> pa.Table:
    """Rows in the Social-IQ answers layout; the label is 1 exactly for the POSITIVE answer texts, and
    a random 30 % of rows have their label flipped, so the answer is informative but not perfect."""
    rng = np.random.default_rng(seed)
    answers = [f"{'good' if rng.random() < 0.55 else 'bad'} answer {rng.integers(6)}" for _ in range(n)]
    labels = np.array([a in POSITIVE for a in answers], dtype=np.int8)
    flip = rng.random(n) < 0.3
    labels[flip] = 1 - labels[flip]
    return pa.table({"id": [f"v{i // 7}/q0/a{i}" for i in range(n)],
                     "video_id": [f"v{rng.integers(40)}" for _ in range(n)],
                     "question_index": pa.array(np.zeros(n, dtype=np.int32)),
                     "question": [f"question {rng.integers(25)}" for _ in range(n)],
                     "answer_index": pa.array(np.arange(n, dtype=np.int32)), "answer": answers,
                     "label": pa.array(labels)})


class AnswerLookup:
    """Reads the answer only: +1 for a POSITIVE answer text, -1 otherwise."""

    input_columns = ("answer",)

    def predict(self, table: pa.Table) -> list[float]:
        return [1.0 if a in POSITIVE else -1.0 for a in table.column("answer").to_pylist()]


class VideoAndAnswer:
    """Reads video and answer: flips the answer lookup for videos with an odd number."""

    input_columns = ("video_id", "answer")

    def predict(self, table: pa.Table) -> list[float]:
        out = []
        for v, a in zip(table.column("video_id").to_pylist(), table.column("answer").to_pylist()):
            s = 1.0 if a in POSITIVE else -1.0
            out.append(-s if int(v[1:]) % 2 else s)
        return out


class ReadsMissingColumn:
    input_columns = ("question", "transcript")

    def predict(self, table: pa.Table) -> list[float]:
        return [0.0] * table.num_rows


def answer_lookup() -> AnswerLookup:
    return AnswerLookup()


def video_and_answer() -> VideoAndAnswer:
    return VideoAndAnswer()


def reads_missing_column() -> ReadsMissingColumn:
    return ReadsMissingColumn()


class SentimentAndVideo:
    """Reads video and answer of any Social-IQ table: the answer's VADER sentiment (Gat et al.'s
    NLTK-Sentiment row, the demo's baseline), nudged by 1e-3 up or down by the video id's CRC-32 parity."""

    input_columns = ("video_id", "answer")

    def __init__(self):
        from evaluator.socialiq.task import AnswerSentiment

        self.sentiment = AnswerSentiment()

    def predict(self, table: pa.Table) -> list[float]:
        import zlib

        return [s + (1e-3 if zlib.crc32(v.encode()) % 2 else -1e-3)
                for s, v in zip(self.sentiment.predict(table), table.column("video_id").to_pylist())]
