"""The pinned judge (`--judge SPEC`, evaluator/models/judge.py) on COSIM-Q's sample rows, with two loopback
OpenAI-compatible servers: the model answers by letter where the right choice is listed first and in words
elsewhere ("I pick the third one": no letter, no option's text, so the rules read nothing); the judge reads
such an answer's ordinal and names its letter, and answers "A" with "A". Goldens from the split's labels:
without the judge the model is right exactly where the right choice is first; with it, everywhere, the judge
having decided every answer the rules could not read, and agreeing with the rules on every one they did.
"""

from __future__ import annotations

import json
import re

import pytest
from helpers import assert_one_error_line
from served_helpers import LoopbackServer

from evaluator.models.judge import judge_reply

pytestmark = pytest.mark.allow_hosts(["127.0.0.1"])
ORDINALS = ["first", "second", "third", "fourth"]


@pytest.fixture(autouse=True)
def _no_network():
    """Overrides conftest's: sockets may be made, and connect to loopback only (the module's mark)."""
    yield


def _chat(content: str) -> bytes:
    return json.dumps({"id": "x", "object": "chat.completion", "model": "m", "choices": [
        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}]}).encode()


class WordyModel(LoopbackServer):
    """Names the right option by its letter when it is listed first (unless `words_only`), else by its ordinal in
    words."""

    def __init__(self, right: dict[frozenset, str], words_only: bool = False):
        super().__init__()
        self.right, self.words_only = right, words_only

    def answer(self, path, body, headers):
        text = json.loads(body)["messages"][-1]["content"][-1]["text"]
        options = [line[3:] for line in text.splitlines() if re.match(r"[A-D]\. ", line)]
        at = options.index(self.right[frozenset(options)])
        return 200, _chat("A" if at == 0 and not self.words_only else f"I pick the {ORDINALS[at]} one"), {}


class OrdinalJudge(LoopbackServer):
    """Replies with the letter the answer names (a letter, or an ordinal), Z when it names none; or with
    `always` whatever it is asked."""

    def __init__(self, always: str | None = None):
        super().__init__()
        self.always, self.requests = always, 0

    def answer(self, path, body, headers):
        self.requests += 1
        text = json.loads(body)["messages"][-1]["content"][-1]["text"]
        answer = text.split("The model's answer: ", 1)[1].split("\n\n", 1)[0]
        named = next((f"{'ABCD'[i]}" for i, o in enumerate(ORDINALS) if o in answer), answer if answer in "ABCD"
                     else "Z")
        return 200, _chat(self.always or named), {}


def _right(table) -> dict[frozenset, str]:
    right = {}
    for choices, label in zip(table.column("choices").to_pylist(), table.column("label").to_pylist()):
        assert right.setdefault(frozenset(choices), choices[label]) == choices[label]
    return right


def _predict(cli, cosim, model_url, out, *extra):
    folder, images, _ = cosim
    code, _, err = cli("predict", "cosim-q", "--data", folder, "--images", images, "--model", "openai:wordy",
                       "--base-url", model_url, "--out", out, *extra)
    return code, err


def _accuracy(cli, cosim, out) -> float:
    code, stdout, err = cli("evaluate", "cosim-q", "--data", cosim[0], "--predictions", out, "--bootstrap", "0")
    assert code == 0, err
    return json.loads(stdout)["accuracy"]


@pytest.mark.parametrize("reply,options,read", [
    ("B", 4, 1), (" (C) ", 4, 2), ("D.", 4, 3), ("Z", 4, None), ("E", 4, "unread"), ("B because", 4, "unread"),
    ("", 4, "unread"), ("a", 4, "unread"),
])
def test_the_judges_reply_is_one_letter(reply, options, read):
    assert judge_reply(reply, options) == read


def test_the_judge_decides_what_the_rules_cannot_read(cli, cosim, tmp_path, monkeypatch):
    monkeypatch.setenv("VLBENCH_CACHE", str(tmp_path / "cache"))
    _, _, table = cosim
    labels = table.column("label").to_pylist()
    first = sum(x == 0 for x in labels)
    with WordyModel(_right(table)) as model, OrdinalJudge() as judge:
        code, err = _predict(cli, cosim, model.url, tmp_path / "rules.json", "--no-cache")
        assert code == 0, err
        code, err = _predict(cli, cosim, model.url, tmp_path / "judged.json", "--judge", "openai:judge",
                             "--judge-base-url", judge.url)
        assert code == 0, err
        asked = judge.requests
        code, err = _predict(cli, cosim, model.url, tmp_path / "again.json", "--judge", "openai:judge",
                             "--judge-base-url", judge.url)
        assert code == 0, err
        assert judge.requests == asked  # every verdict from the cache
    assert _accuracy(cli, cosim, tmp_path / "rules.json") == round(100 * first / len(labels), 4)
    assert _accuracy(cli, cosim, tmp_path / "judged.json") == 100
    record = json.loads((tmp_path / "judged.meta.json").read_text())["asked"]
    assert record["judge"]["asked"] == record["judge"]["decided"] == len(labels) - first
    assert record["judge"]["agreement"] == {**record["judge"]["agreement"], "sample": 50, "agreed": 50, "rate": 1.0}
    assert record["unparsed_outputs"] == 0
    assert asked == 50 + len(labels) - first  # the agreement sample, then the unread answers
    assert json.loads((tmp_path / "rules.meta.json").read_text())["asked"]["unparsed_outputs"] == len(labels) - first
    # pinned by what the server reported (the test server names its model "m"), also on the rerun that the cache
    # answered whole, and the report shows it
    again = json.loads((tmp_path / "again.meta.json").read_text())["asked"]["judge"]
    assert record["judge"]["pinned"] == again["pinned"] == {"served_model": "m"}
    code, _, err = cli("evaluate", "cosim-q", "--data", cosim[0], "--predictions", tmp_path / "again.json",
                       "--bootstrap", "0", "--report", tmp_path / "report")
    assert code == 0, err
    report = (tmp_path / "report" / "report.md").read_text()
    assert "`openai:judge` (pinned: served_model `m`)" in report
    assert "the letter was read from each answer" in report and "log-likelihoods" not in report


def test_a_judge_that_decides_nothing_says_so_in_one_line(cli, cosim, tmp_path):
    """A model that never names a letter (no agreement sample: the rules read nothing) and a judge whose every reply
    is outside the letters: the answers stay unread (all wrong), the run finishes, and one line names the judge and
    what it did."""
    _, _, table = cosim
    with WordyModel(_right(table), words_only=True) as model, OrdinalJudge(always="I cannot tell.") as judge:
        code, err = _predict(cli, cosim, model.url, tmp_path / "p.json", "--no-cache", "--judge", "openai:judge",
                             "--judge-base-url", judge.url)
    assert code == 0, err
    notes = [line for line in err.splitlines() if "--judge" in line]
    assert notes == [f"note: --judge openai:judge decided none of the {table.num_rows:,} answers the rules could "
                     f"not read ({table.num_rows:,} replies with no option letter, 0 'none of the options'); they "
                     "stay unread and are scored wrong"], err
    assert "NaN" not in err
    assert _accuracy(cli, cosim, tmp_path / "p.json") == 0


def test_a_judge_that_answers_nothing_parseable_is_one_line(cli, cosim, tmp_path):
    _, _, table = cosim
    with WordyModel(_right(table)) as model, OrdinalJudge(always="I cannot tell.") as judge:
        code, err = _predict(cli, cosim, model.url, tmp_path / "p.json", "--no-cache", "--judge", "openai:judge",
                             "--judge-base-url", judge.url)
    assert_one_error_line(code, err, ["--judge openai:judge: answers nothing parseable"])
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("bench,extra,needle", [
    ("vqa-v2", ("--model", "openai:m"), "--judge reads letter answers"),
    ("cosim-q", ("--model", "openai:m", "--choice-mode", "loglik"), "--judge reads letter answers"),
    ("cosim-q", ("--model", "baseline:random"), "--judge: baseline:random does not read it"),
    ("cosim-q", ("--model", "openai:m", "--judge", "baseline:random"), "a judge is an openai:, hf: or vllm: model"),
])
def test_a_judge_where_it_cannot_apply_is_one_line(bench, extra, needle, cli, built, tmp_path):
    judge = () if "--judge" in extra else ("--judge", "openai:j")
    served = ("--base-url", "http://127.0.0.1:9/v1") if "openai:m" in extra else ()
    code, _, err = cli("predict", bench, "--data", built(bench), "--out", tmp_path / "p.json", *served, *judge,
                       *extra)
    assert_one_error_line(code, err, [needle])
    assert not any(tmp_path.iterdir())


def test_an_hf_judge_in_process(cli, cosim, tmp_path, monkeypatch):
    """`--judge hf:DIR`: a tiny LLaVA whose greedy decoding always writes "B" (its generation config's sequence
    bias) is the judge, run by transformers in-process. Golden from the split's labels: the rules read the
    first-listed answers ("A"); every other row is decided as B, so the accuracy is that of the rows whose right
    choice is first or second; the record names the judge."""
    from pipelines.tiny_models import write_tiny_llava_answering

    monkeypatch.setenv("VLBENCH_CACHE", str(tmp_path / "cache"))
    judge = write_tiny_llava_answering(tmp_path / "judge", "B")
    _, _, table = cosim
    labels = table.column("label").to_pylist()
    with WordyModel(_right(table)) as model:
        code, err = _predict(cli, cosim, model.url, tmp_path / "judged.json", "--judge", f"hf:{judge}")
    assert code == 0, err
    assert _accuracy(cli, cosim, tmp_path / "judged.json") == round(100 * sum(x in (0, 1) for x in labels)
                                                                    / len(labels), 4)
    record = json.loads((tmp_path / "judged.meta.json").read_text())["asked"]["judge"]
    assert record["asked"] == record["decided"] == sum(x != 0 for x in labels)
    assert record["agreement"]["agreed"] == 0  # it says B where the rules read A
    assert record["model"] == f"hf:{judge}"
    import hashlib

    from core.hashing import sha256_file

    digest = hashlib.sha256()  # the folder's content, computed here: every file's relative path and SHA-256
    for path in sorted(p for p in judge.rglob("*") if p.is_file()):
        digest.update(f"{path.relative_to(judge).as_posix()}\0{sha256_file(path)}\n".encode())
    assert record["pinned"] == {"folder_sha256": digest.hexdigest()}
