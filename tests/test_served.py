"""Served models (`openai:MODEL --base-url URL`), letter choice and the response cache.

The happy path runs against a real OpenAI-compatible server, `transformers serve`, serving the tiny
LLaVA of pipelines/tiny_models.py on CPU: the same model asked in-process (`hf:`) and over HTTP gives
the same generations and, by letter, the same choices. Faults come from a pass-through proxy in front
of that server; the error cases a real server cannot be made to produce on demand (401, a refusal, no
choices) from a canned endpoint. Every server listens on loopback and is started and stopped by a
fixture; sockets may connect to 127.0.0.1 only.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import assert_one_error_line, response_cache_rows
from served_helpers import CannedEndpoint, HostileEndpoint, Proxy, chat_answer, transformers_serve

from core.errors import ModelError
from evaluator.models.ask import letter_prompt, parse_letter
from evaluator.models.backend import Turn
from evaluator.models.options import ModelOptions
from evaluator.models.response_cache import ResponseCache
from evaluator.models.served import ServedVLM, image_url

pytestmark = pytest.mark.allow_hosts(["127.0.0.1"])
SECRET = "sk-test-secret-0123456789"


@pytest.fixture(autouse=True)
def _no_network():
    """Overrides conftest's: sockets may be made, and connect to loopback only (the module's mark)."""
    yield


# ---------------------------------------------------------------------------------------------
# Letter choice: the prompt and the parsing rules (evaluator/models/ask.py's docstring)

OPTIONS = ["a red bus", "a dog", "two cats", "nothing"]


@pytest.mark.parametrize("answer,chosen", [
    ("B", 1), ("B.", 1), ("(C)", 2), ("D) nothing", 3), ("A: a red bus", 0), ("  b", None),  # rule 1
    ("B\nThe man is sad.", 1), ("C \n because", 2),  # rule 1: the letter alone on the first line
    ("I think (C) is right", 2), ("The answer is D", 3), ("Answer: B", 1),  # rule 2
    ("It shows two cats.", 2), ("A dog", 1), ("A dog and a red bus", None),  # rule 3; two options named: none
    ("E", None), ("", None), ("no idea", None),
])
def test_letter_answers_are_read_by_the_documented_rules(answer, chosen):
    assert parse_letter(answer, OPTIONS) == chosen


def test_letter_prompt_lists_the_options_then_asks_for_the_letter():
    assert letter_prompt("What is it?", ["x", "y"]) == \
        "What is it?\nA. x\nB. y\nAnswer with the option's letter from the given choices directly."


# ---------------------------------------------------------------------------------------------
# Requests: images, retries, errors (a canned endpoint)

def test_images_travel_as_data_urls_of_their_own_bytes(tmp_path):
    import base64
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (8, 6), (10, 20, 30)).save(buffer, format="JPEG")
    (tmp_path / "a.jpg").write_bytes(buffer.getvalue())
    url = image_url(tmp_path / "a.jpg")
    assert url.startswith("data:image/jpeg;base64,") and base64.b64decode(url.split(",", 1)[1]) == buffer.getvalue()
    frame = Image.new("RGB", (4, 4), (1, 2, 3))
    decoded = Image.open(io.BytesIO(base64.b64decode(image_url(frame).split(",", 1)[1])))
    assert image_url(frame).startswith("data:image/png;base64,") and decoded.getpixel((0, 0)) == (1, 2, 3)


def _served(url: str, **options) -> ServedVLM:
    return ServedVLM("tiny", ModelOptions(base_url=url, **{"retries": 0, **options}))


def test_the_request_carries_the_turn_and_the_key_only_in_its_header(tmp_path, monkeypatch):
    monkeypatch.setenv("VLBENCH_TEST_KEY", SECRET)
    (tmp_path / "img.png").write_bytes(image_url_png())
    with CannedEndpoint(200, chat_answer("Yes.")) as endpoint:
        vlm = _served(endpoint.url, api_key_env="VLBENCH_TEST_KEY", system_prompt="Be brief.", max_new_tokens=5)
        assert vlm.generate([Turn("Is it red?", (tmp_path / "img.png",))]) == ["Yes."]
        headers, body = endpoint.requests[0]
        record = json.dumps(vlm.describe())
    assert headers["Authorization"] == f"Bearer {SECRET}" and SECRET not in json.dumps(body) and SECRET not in record
    assert body["model"] == "tiny" and body["max_tokens"] == 5 and body["temperature"] == 0.0
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}
    content = body["messages"][1]["content"]
    assert content[0]["type"] == "image_url" and content[1] == {"type": "text", "text": "Is it red?"}


def image_url_png() -> bytes:
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (5, 5), (200, 0, 0)).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.mark.parametrize("status,payload,needle", [
    (401, {"error": {"message": "Incorrect API key provided: sk-test-secret-0123456789"}}, "key was refused (401)"),
    (404, {"error": {"message": "The model `tiny` does not exist"}}, "not found (404)"),
    (400, {"error": {"message": "This model does not support image inputs"}}, "does not support image inputs"),
    (200, {"id": "x", "choices": []}, "no choices"),
    (200, chat_answer(None, refusal="I can't help with that."), "refused"),
])
def test_a_refused_request_is_one_error_naming_the_endpoint_never_the_key(status, payload, needle, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    with CannedEndpoint(status, payload) as endpoint:
        with pytest.raises(ModelError) as err:
            _served(endpoint.url, retries=3).generate([Turn("q", ())], names=["row 7"])
        assert len(endpoint.requests) == 1  # a refusal is not retried
    message = str(err.value)
    assert endpoint.url in message and "row 7" in message and needle in message
    # a server that echoes the key in its error message: the line shows it, so the key is masked there
    assert SECRET not in message


@pytest.mark.parametrize("status,payload,where", [
    # the key echoed after 190 characters: a bound applied before masking would cut it and show its start
    (401, {"error": {"message": "x" * 190 + f" key {SECRET}"}}, "error"),
    (401, {"error": {"message": f"Bad key {SECRET.upper()}"}}, "error"),  # in another case
    (401, {"error": {"message": f"Bad key {SECRET[:14]}..."}}, "error"),  # in part
    (200, chat_answer(None, refusal=f"no, {SECRET}"), "error"),
    (200, {**chat_answer("fine"), "model": f"tiny-{SECRET}", "system_fingerprint": SECRET.swapcase()}, "record"),
    (200, chat_answer(f"the key is {SECRET}"), "answer"),
])
def test_the_key_never_shows_where_a_server_echoes_it(status, payload, where, monkeypatch):
    """A server that echoes the key, whole, cut, in another case, in a refusal, in the model name it reports or
    in an answer: the line, the record and the answer (then --log-samples and the response cache) never
    hold it (core.sanitise masks it before anything is bounded)."""
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    with CannedEndpoint(status, payload) as endpoint:
        vlm = _served(endpoint.url)
        if where == "error":
            with pytest.raises(ModelError) as err:
                vlm.generate([Turn("q", ())], names=["row 1"])
            shown = str(err.value)
            assert "***" in shown
        else:
            shown = json.dumps(vlm.generate([Turn("q", ())])) + json.dumps(vlm.describe())
    for secret in (SECRET, SECRET.upper(), SECRET.swapcase(), SECRET[:14]):
        assert secret not in shown


def test_masking_spares_a_key_s_public_prefix_and_reads_a_long_answer_once():
    """Every OpenAI project key starts `sk-proj-`, exactly MIN_SECRET_RUN characters: text holding only that
    prefix stays (a path `.../sk-proj-keys`), a run that reaches PRIVATE_RUN characters past it is masked,
    wherever it starts; an answer of 4 MB made of the prefix (masked in place, one span at a time, it took
    92 s) comes back unchanged, and one made of the key comes back as masks only."""
    from core.sanitise import MASK, mask_secrets

    key = "sk-proj-AbCdEfGh1234567890XyZ_qwertyuiop"
    assert mask_secrets("see https://x/sk-proj-keys", [key]) == "see https://x/sk-proj-keys"
    assert mask_secrets(f"a {key[:12]} b {key[:11]} c {key[20:28]} d", [key]) == f"a {MASK} b {key[:11]} c {MASK} d"
    prefixes = "sk-proj-" * (1 << 19)
    assert mask_secrets(prefixes, [key]) == prefixes
    assert set(mask_secrets(key * (1 << 17), [key]).split(MASK)) == {""}


def test_a_servers_escape_sequences_never_reach_the_terminal(cli, built, tmp_path, monkeypatch):
    """An error text with a title change, a screen clear and a NUL: the line holds none of them."""
    monkeypatch.setenv("VLBENCH_CACHE", str(tmp_path / "cache"))
    hostile = "bad\x1b]0;owned\x07\x1b[2J\x00request\r\nmore"
    with CannedEndpoint(400, {"error": {"message": hostile}}) as endpoint:
        code, _, err = cli("predict", "socialiq", "--data", built("socialiq"), "--out", tmp_path / "p.json",
                           "--limit", "1", "--model", "openai:tiny", "--base-url", endpoint.url,
                           "--choice-mode", "loglik")
    line = assert_one_error_line(code, err, ("bad", "request"))
    assert not any(c in line for c in "\x1b\x07\x00\r")


@pytest.mark.parametrize("args,needle,hidden", [
    (("--base-url", "http://127.0.0.1:9/v1?api_key=hunter2secret"), "a query or fragment (not shown)", "hunter2"),
    (("--base-url", "http://127.0.0.1:9/v1#token=hunter2secret"), "a query or fragment (not shown)", "hunter2"),
    (("--base-url", "http://[::1/v1"), "not a URL", None),
    (("--base-url", "http://127.0.0.1:99999/v1"), "not a URL", None),
    (("--base-url", "http://127.0.0.1:9/v1", "--request-timeout", "inf"), "--request-timeout in (0, 86400]", None),
])
def test_bad_endpoints_are_one_line_that_shows_no_secret(args, needle, hidden, cli, built, tmp_path):
    code, _, err = cli("predict", "vqa-v2", "--data", built("vqa-v2"), "--out", tmp_path / "p.json",
                       "--model", "openai:tiny", *args)
    line = assert_one_error_line(code, err, (needle,))
    assert hidden is None or hidden not in line


@pytest.mark.parametrize("mode,needle", [
    ("trickle", "no whole answer within 1 s"), ("endless", "no whole answer within 1 s"),
    ("slow-headers", "no whole answer within 1 s"), ("gzip-bomb", "larger than 64 MiB"),
    ("deep-json", "not JSON"), ("message-list", "message is not an object"),
])
def test_a_hostile_server_cannot_hang_or_crash_a_run(mode, needle):
    """--request-timeout bounds a whole answer (headers and body), the body is capped once decoded, and
    any JSON shape is read safely: each ends as one ModelError (the run's one line), never a hang."""
    import threading

    found: list = []
    with HostileEndpoint(mode) as endpoint:
        def ask() -> None:
            try:
                # the gzip bomb is given time to inflate past the cap even on a loaded machine
                seconds = 30.0 if mode == "gzip-bomb" else 1.0
                _served(endpoint.url, request_timeout=seconds).generate([Turn("q", ())], names=["row 0"])
            except Exception as exc:  # noqa: BLE001 -- what the run would end with
                found.append(exc)

        asking = threading.Thread(target=ask, daemon=True)
        asking.start()
        asking.join(timeout=60)  # a hang detector, not a timing: the server keeps going for 20 s
        assert not asking.is_alive(), f"{mode}: the request was still running after 60 s"
    assert len(found) == 1 and isinstance(found[0], ModelError) and needle in str(found[0]), found


def test_a_key_an_http_header_cannot_carry_is_one_line(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-clé-secrète")
    with pytest.raises(ModelError, match=r"\$OPENAI_API_KEY: the key has characters an HTTP header") as err:
        _served("http://127.0.0.1:9/v1")
    assert "clé" not in str(err.value)


def test_retries_back_off_and_the_last_failure_names_the_row(monkeypatch):
    import evaluator.models.served as served

    monkeypatch.setattr(served, "BACKOFF_SECONDS", 0.01)
    with Proxy("http://127.0.0.1:9/v1", faults=[429, 503, 500, 429]) as proxy:
        with pytest.raises(ModelError, match=r"row 3: HTTP 429: injected 429, 4 tries"):
            _served(proxy.url, retries=3).generate([Turn("q", ())], names=["row 3"])
        assert proxy.faulted == 4 and proxy.forwarded == 0


def test_an_unreachable_endpoint_is_one_error():
    with pytest.raises(ModelError, match=r"http://127.0.0.1:9/v1: row 0: connection failed"):
        _served("http://127.0.0.1:9/v1").generate([Turn("q", ())], names=["row 0"])


@pytest.mark.parametrize("url", ["localhost:8000/v1", "ftp://host/v1", "http://user:pw@host/v1", "http:///v1"])
def test_a_malformed_base_url_is_refused(url):
    with pytest.raises(ModelError, match="--base-url"):
        _served(url)


# ---------------------------------------------------------------------------------------------
# The response cache

def test_the_cache_checks_each_entry_and_keeps_only_what_succeeded(tmp_path, capsys):
    path = tmp_path / "responses.sqlite3"
    with CannedEndpoint(200, chat_answer("blue")) as endpoint:
        vlm = _served(endpoint.url, response_cache=path)
        assert vlm.generate([Turn("a", ()), Turn("b", ())]) == ["blue", "blue"]
        assert vlm.cache.stored == 2 and len(endpoint.requests) == 2
        again = _served(endpoint.url, response_cache=path)
        assert again.generate([Turn("a", ()), Turn("b", ())]) == ["blue", "blue"]
        assert again.cache.hits == 2 and len(endpoint.requests) == 2
        with sqlite3.connect(path) as db:  # one entry edited on disk: asked again, with one warning
            db.execute("UPDATE responses SET value = ? WHERE rowid = 1", (json.dumps({"content": "red"}),))
        third = _served(endpoint.url, response_cache=path)
        assert third.generate([Turn("a", ()), Turn("b", ())]) == ["blue", "blue"]
        assert third.cache.damaged == 1 and len(endpoint.requests) == 3
        assert "damaged entry" in capsys.readouterr().err
        endpoint.payload = chat_answer("")  # an empty answer is never cached
        fourth = _served(endpoint.url, response_cache=path)
        assert fourth.generate([Turn("c", ())]) == [""] and fourth.cache.stored == 0
        sampled = _served(endpoint.url, response_cache=path, gen_kwargs=(("temperature", 0.7),))
        assert sampled.cache is None  # sampling is not deterministic: nothing cached


@pytest.mark.parametrize("damage", ["list", "number", "no-field", "not-json", "deep"])
def test_an_entry_not_of_the_shape_written_is_asked_again(damage, tmp_path, capsys):
    """An entry whose checksum holds but whose value is not what vlbench writes (another version, an edit
    that recomputed the checksum): one warning, the request asked again, never a traceback."""
    path = tmp_path / "responses.sqlite3"
    with CannedEndpoint(200, chat_answer("blue")) as endpoint:
        _served(endpoint.url, response_cache=path).generate([Turn("a", ())])
        text = {"list": "[1, 2]", "number": '{"content": 7}', "no-field": '{"other": "x"}', "not-json": "{not json",
                "deep": "[" * 100_000 + "]" * 100_000}[damage]
        digest = hashlib.sha256(text.encode()).hexdigest()  # the checksum holds: only the shape is wrong
        with sqlite3.connect(path) as db:
            db.execute("UPDATE responses SET value = ?, digest = ?", (text, digest))
        again = _served(endpoint.url, response_cache=path)
        assert again.generate([Turn("a", ())]) == ["blue"] and len(endpoint.requests) == 2


def test_a_cache_that_cannot_be_written_or_read_or_is_another_layout(tmp_path, capsys):
    """A write lock another process holds past the timeout, a database that refuses writes: one error line
    (the answers could not be kept, which --resume promises); a read that fails: a warning and a re-ask;
    another table layout: one error line."""
    path = tmp_path / "responses.sqlite3"
    with CannedEndpoint(200, chat_answer("blue")) as endpoint:
        vlm = _served(endpoint.url, response_cache=path)
        vlm.generate([Turn("a", ())])
        vlm.cache._db.execute("PRAGMA busy_timeout = 50")
        with sqlite3.connect(path, isolation_level=None) as other:  # another process holds the write lock
            other.execute("BEGIN EXCLUSIVE")
            try:
                with pytest.raises(ModelError, match="cannot keep answers .*database is locked"):
                    vlm.generate([Turn("b", ())])
            finally:
                other.execute("ROLLBACK")
        # SQLite's own read-only mode (root ignores a file's permissions, so they cannot show this here)
        readonly = _served(endpoint.url, response_cache=path)
        readonly.cache._db.execute("PRAGMA query_only = ON")
        with pytest.raises(ModelError, match="cannot keep answers .*readonly"):
            readonly.generate([Turn("c", ())])
        broken = _served(endpoint.url, response_cache=path)
        broken.cache._db.execute("DROP TABLE responses")  # every read now fails inside SQLite
        assert broken.cache.get("anything") is None and broken.cache.damaged == 1
        assert "damaged entry" in capsys.readouterr().err
    other = tmp_path / "other.sqlite3"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE responses (key TEXT, answer TEXT)")
    with pytest.raises(ModelError, match="has the columns key, answer, not vlbench's"):
        ResponseCache(other)


def test_a_cache_file_that_is_not_sqlite_is_one_error(tmp_path):
    (tmp_path / "responses.sqlite3").write_bytes(b"not a database, " * 64)
    with pytest.raises(ModelError, match="response cache .*--no-cache"):
        ResponseCache(tmp_path / "responses.sqlite3")


# ---------------------------------------------------------------------------------------------
# Bad usage on the command line: one line, exit 2, nothing written

@pytest.mark.parametrize("args,needle", [
    (("--model", "openai:tiny"), "needs --base-url"),
    (("--model", "openai:tiny", "--base-url", "http://127.0.0.1:9/v1", "--revision", "main"), "--revision"),
    (("--model", "baseline:random", "--base-url", "http://127.0.0.1:9/v1"), "--base-url"),
    (("--model", "baseline:random", "--choice-mode", "letter"), "--choice-mode"),
])
def test_bad_served_usage_is_one_line(args, needle, cli, built, tmp_path):
    code, _, err = cli("predict", "vcr", "--data", built("vcr"), "--out", tmp_path / "p.json", *args)
    assert_one_error_line(code, err, (needle,))
    assert not (tmp_path / "p.json").exists()


def test_a_refused_run_writes_nothing_but_the_cache_of_what_succeeded(cli, built, sample_sources, tmp_path,
                                                                      monkeypatch):
    """Three answers, then the key is refused: one line naming the endpoint (not the key), exit 2, no
    prediction file; the three answers are in the cache, and the rerun asks only for the rest."""
    monkeypatch.setenv("VLBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    args = ("predict", "vqa-v2", "--data", built("vqa-v2"), "--images", sample_sources / "coco", "--limit", "6",
            "--model", "openai:tiny", "--concurrency", "1", "--out", tmp_path / "p.json")
    refused = (401, {"error": {"message": f"Incorrect API key provided: {SECRET}"}})
    with CannedEndpoint(200, chat_answer("yes"), after=3, then=refused) as endpoint:
        code, out, err = cli(*args, "--base-url", endpoint.url)
        assert_one_error_line(code, err, (endpoint.url, "key was refused (401)"))
        assert SECRET not in err + out and not (tmp_path / "p.json").exists()
        assert not (tmp_path / "p.meta.json").exists()
        with sqlite3.connect(tmp_path / "cache" / "responses.sqlite3") as db:
            assert db.execute("SELECT COUNT(*) FROM responses").fetchone()[0] == 3
        endpoint.then, endpoint.requests = None, []  # the key is accepted again
        code, _, err = cli(*args, "--base-url", endpoint.url)
        assert code == 0, err
        assert len(endpoint.requests) == 3  # the three refused rows only


# ---------------------------------------------------------------------------------------------
# Against a real server: transformers serve

@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    from pipelines.tiny_models import write_tiny_llava, write_tiny_llava_answering

    root = tmp_path_factory.mktemp("served-models")
    return {"random": write_tiny_llava(root / "random"), "letter-b": write_tiny_llava_answering(root / "b", "B")}


@pytest.fixture(scope="module")
def server(models, tmp_path_factory):
    """One `transformers serve` per tiny model, started once for the module."""
    logs = tmp_path_factory.mktemp("serve-logs")
    with transformers_serve(models["random"], logs / "random.log") as random_url, \
            transformers_serve(models["letter-b"], logs / "b.log") as letter_url:
        yield {"random": random_url, "letter-b": letter_url}


@pytest.fixture(scope="module")
def cosim_images(built, tmp_path_factory) -> Path:
    """A small image for every `img_fn` of the COSIM-Q sample build (the sample has no image files)."""
    import pyarrow.parquet as pq
    from PIL import Image

    folder = tmp_path_factory.mktemp("cosim-images")
    keys = pq.read_table(built("cosim-q") / "default" / "val-00000-of-00001.parquet", columns=["img_fn"])
    for k, name in enumerate(sorted(set(keys.column(0).to_pylist()))):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (24 + k % 13, 30), (k * 37 % 255, 90, 160)).save(folder / name)
    return folder


def _samples(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow  # a real server process and two runs of the VQA v2 sample
def test_served_and_in_process_generations_agree(cli, server, models, built, sample_sources, tmp_path, monkeypatch):
    """Greedy answers of the same tiny LLaVA asked through `transformers serve` and loaded here: the same
    prompts (chat template, image inside the message) give the same outputs, row by row."""
    monkeypatch.setenv("VLBENCH_CACHE", str(tmp_path / "cache"))
    common = ("--data", built("vqa-v2"), "--images", sample_sources / "coco", "--limit", "40", "--max-new-tokens",
              "4", "--log-samples")
    code, _, err = cli("predict", "vqa-v2", "--model", f"openai:{models['random']}", "--base-url", server["random"],
                       "--out", tmp_path / "served.json", *common)
    assert code == 0, err
    code, _, err = cli("predict", "vqa-v2", "--model", f"hf:{models['random']}", "--out", tmp_path / "local.json",
                       *common)
    assert code == 0, err
    served, local = _samples(tmp_path / "served.samples.jsonl"), _samples(tmp_path / "local.samples.jsonl")
    assert [s["output"] for s in served] == [s["output"] for s in local]
    assert len({s["output"] for s in served}) > 1  # the answers depend on the rows
    assert (tmp_path / "served.json").read_text() == (tmp_path / "local.json").read_text()
    record = json.loads((tmp_path / "served.meta.json").read_text())
    assert record["model"] == f"openai:{models['random']}" and record["endpoint"] == server["random"]
    assert record["served_model"].startswith(str(models["random"])) and record["requests"] == 40
    assert record["cache"]["stored"] == 40 and record["asked"]["generation"]["greedy"] is True
    # a second run is answered from the cache alone
    code, _, err = cli("predict", "vqa-v2", "--model", f"openai:{models['random']}", "--base-url", server["random"],
                       "--out", tmp_path / "again.json", *common)
    assert code == 0, err
    again = json.loads((tmp_path / "again.meta.json").read_text())
    assert again["requests"] == 0 and again["cache"]["hits"] == 40
    assert (tmp_path / "again.json").read_text() == (tmp_path / "served.json").read_text()


@pytest.mark.slow  # a real server process and two runs of the COSIM-Q sample
def test_served_and_in_process_letter_choices_agree(cli, server, models, built, cosim_images, tmp_path, monkeypatch):
    """Multiple choice by letter: a tiny LLaVA that answers "B" whatever it is shown picks option B
    through the server and in-process (`hf: --choice-mode letter`), and the files are equal."""
    monkeypatch.setenv("VLBENCH_CACHE", str(tmp_path / "cache"))
    common = ("--data", built("cosim-q"), "--images", cosim_images, "--limit", "24", "--log-samples")
    code, _, err = cli("predict", "cosim-q", "--model", f"openai:{models['letter-b']}", "--base-url",
                       server["letter-b"], "--out", tmp_path / "served.json", *common)
    assert code == 0, err
    code, _, err = cli("predict", "cosim-q", "--model", f"hf:{models['letter-b']}", "--choice-mode", "letter",
                       "--out", tmp_path / "local.json", *common)
    assert code == 0, err
    served = _samples(tmp_path / "served.samples.jsonl")
    assert {s["output"] for s in served} == {"B"} and {s["choice"] for s in served} == {"B"}
    assert all(s["prediction"] == [0.0, 1.0, 0.0, 0.0] for s in served)
    assert all(s["prompt"].endswith("Answer with the option's letter from the given choices directly.") for s in served)
    assert (tmp_path / "served.json").read_text() == (tmp_path / "local.json").read_text()
    for name in ("served", "local"):
        asked = json.loads((tmp_path / f"{name}.meta.json").read_text())["asked"]
        assert asked["choice_mode"] == "letter" and asked["unparsed_outputs"] == 0


@pytest.mark.slow  # a real server process
def test_a_server_without_prompt_logprobs_is_refused_for_loglik(cli, server, models, built, tmp_path, monkeypatch):
    """`transformers serve` returns no prompt log-probabilities: Social-IQ (scored by log-likelihood only,
    so a served model is asked for them) stops at the first request with one line quoting the server's
    answer, and writes nothing."""
    monkeypatch.setenv("VLBENCH_CACHE", str(tmp_path / "cache"))
    code, _, err = cli("predict", "socialiq", "--data", built("socialiq"), "--out", tmp_path / "p.json", "--limit",
                       "3", "--model", f"openai:{models['random']}", "--base-url", server["random"])
    line = assert_one_error_line(code, err, ("--choice-mode loglik", server["random"], "cannot score continuations"))
    # the server's own answer, quoted (measured: HTTP 422 "Unexpected fields in the request: {'return_token_ids'}")
    assert "422" in line and "return_token_ids" in line
    assert not (tmp_path / "p.json").exists()


@pytest.mark.slow  # a real server behind a fault-injecting proxy
def test_faults_are_retried_and_the_answers_are_right(cli, server, models, built, sample_sources, tmp_path,
                                                      monkeypatch):
    """429s, 500s, an answer slower than --request-timeout and a dropped connection, in front of the
    real server: the run retries them and writes what a clean run writes."""
    monkeypatch.setenv("VLBENCH_CACHE", str(tmp_path / "cache"))
    common = ("vqa-v2", "--data", built("vqa-v2"), "--images", sample_sources / "coco", "--limit", "12",
              "--max-new-tokens", "4", "--model", f"openai:{models['random']}")
    code, _, err = cli("predict", *common, "--base-url", server["random"], "--out", tmp_path / "clean.json",
                       "--no-cache")
    assert code == 0, err
    faults = [429, 500, ("delay", 3.0), "drop", 503, 429]
    with Proxy(server["random"], faults=faults) as proxy:
        code, _, err = cli("predict", *common, "--base-url", proxy.url, "--out", tmp_path / "faulty.json",
                           "--concurrency", "4", "--request-timeout", "2", "--retries", "6")
        assert code == 0, err
        assert proxy.faulted == len(faults)
    assert (tmp_path / "faulty.json").read_text() == (tmp_path / "clean.json").read_text()
    record = json.loads((tmp_path / "faulty.meta.json").read_text())
    assert record["retries"] >= 5 and record["requests"] == 12 + record["retries"]


@pytest.mark.slow  # a vlbench process killed mid-run, then resumed
def test_a_killed_run_resumes_from_the_cache(server, models, built, sample_sources, tmp_path):
    """SIGKILL while requests are in flight: the rerun asks the server only for what the first run did
    not store (counted at the proxy), and writes the clean run's file."""
    env = {**os.environ, "VLBENCH_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(Path(__file__).parents[1])}
    rows = 30
    args = [sys.executable, "-m", "pipelines.cli", "predict", "vqa-v2", "--data", str(built("vqa-v2")), "--images",
            str(sample_sources / "coco"), "--limit", str(rows), "--max-new-tokens", "4", "--model",
            f"openai:{models['random']}", "--concurrency", "2"]
    with Proxy(server["random"], delay=0.3) as proxy:
        run = subprocess.Popen([*args, "--base-url", proxy.url, "--out", str(tmp_path / "p.json")], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for _ in range(600):  # bounded: at most 60 s for a third of the rows to be answered
            if proxy.forwarded >= rows // 3 or run.poll() is not None:
                break
            time.sleep(0.1)
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=30)
        assert run.returncode == -signal.SIGKILL and not (tmp_path / "p.json").exists()
        proxy.wait_idle()  # the killed run's last requests are still forwarded: count them before the rerun
        with sqlite3.connect(tmp_path / "cache" / "responses.sqlite3") as db:
            stored = db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
        assert 0 < stored < rows  # what was answered before the kill; those in flight were lost
        before = proxy.forwarded
        done = subprocess.run([*args, "--base-url", proxy.url, "--out", str(tmp_path / "p.json")], env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        assert proxy.forwarded - before == rows - stored  # only what was missing
    clean = subprocess.run([*args, "--base-url", server["random"], "--out", str(tmp_path / "clean.json"),
                            "--no-cache"], env=env, capture_output=True, text=True, timeout=300)
    assert clean.returncode == 0, clean.stderr
    assert (tmp_path / "p.json").read_text() == (tmp_path / "clean.json").read_text()


@pytest.mark.slow  # a vlbench process
def test_sigterm_stops_a_served_run_at_once(built, sample_sources, tmp_path):
    """Requests in flight are not waited for: the run ends with exit 143 at once, writing nothing."""
    env = {**os.environ, "VLBENCH_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(Path(__file__).parents[1])}
    with CannedEndpoint(200, chat_answer("yes"), delay=60) as endpoint:
        command = [sys.executable, "-m", "pipelines.cli", "predict", "vqa-v2", "--data", str(built("vqa-v2")),
                   "--images", str(sample_sources / "coco"), "--limit", "8", "--model", "openai:tiny", "--base-url",
                   endpoint.url, "--out", str(tmp_path / "p.json")]
        run = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for _ in range(300):  # bounded: until the requests are in flight (at most 30 s)
            if len(endpoint.requests) >= 8 or run.poll() is not None:
                break
            time.sleep(0.1)
        sent = time.monotonic()
        run.send_signal(signal.SIGTERM)
        _, err = run.communicate(timeout=30)
        assert run.returncode == 143 and time.monotonic() - sent < 10, err
        assert "terminated" in err and not (tmp_path / "p.json").exists()


# ---------------------------------------------------------------------------------------------
# The same cache for in-process models: predict --resume

@pytest.mark.slow  # five runs of a tiny LLaVA on the VQA v2 and COSIM-Q samples
def test_resume_reuses_an_hf_models_answers_and_scores(cli, built, sample_sources, cosim_images, tmp_path,
                                                       monkeypatch):
    from pipelines.tiny_models import write_tiny_llava

    monkeypatch.setenv("VLBENCH_CACHE", str(tmp_path / "cache"))
    model = write_tiny_llava(tmp_path / "llava")
    common = ("vqa-v2", "--data", built("vqa-v2"), "--images", sample_sources / "coco", "--max-new-tokens", "4",
              "--model", f"hf:{model}")

    def run(name: str, *extra) -> dict:
        code, _, err = cli("predict", *common, "--out", tmp_path / f"{name}.json", *extra)
        assert code == 0, err
        return json.loads((tmp_path / f"{name}.meta.json").read_text())

    assert run("first", "--limit", "10", "--resume")["cache"] == {
        "file": str(tmp_path / "cache" / "responses.sqlite3"), "hits": 0, "stored": 10, "damaged": 0}
    assert run("second", "--limit", "20", "--resume")["cache"]["hits"] == 10  # the first ten rows are not asked
    assert "cache" not in run("plain", "--limit", "20")
    assert (tmp_path / "second.json").read_text() == (tmp_path / "plain.json").read_text()
    write_tiny_llava(model, seed=1)  # other weights in the same folder: nothing is reused
    assert run("other", "--limit", "20", "--resume")["cache"]["hits"] == 0
    # scores (multiple choice by log-likelihood) too
    scored = ("cosim-q", "--data", built("cosim-q"), "--images", cosim_images, "--limit", "12", "--model",
              f"hf:{model}", "--resume")
    for name in ("s1", "s2"):
        code, _, err = cli("predict", *scored, "--out", tmp_path / f"{name}.json")
        assert code == 0, err
    assert json.loads((tmp_path / "s2.meta.json").read_text())["cache"]["hits"] == 12
    assert (tmp_path / "s1.json").read_text() == (tmp_path / "s2.json").read_text()


@pytest.mark.parametrize("args,needle", [
    (("--model", "baseline:random", "--resume"), "--resume"),
    (("--model", "hf:x", "--resume", "--no-cache"), "--no-cache"),
])
def test_resume_misuse_is_one_line(args, needle, cli, built, tmp_path):
    code, _, err = cli("predict", "vcr", "--data", built("vcr"), "--out", tmp_path / "p.json", *args)
    assert_one_error_line(code, err, (needle,))


@pytest.mark.slow  # a predict process killed half-way, then resumed
def test_a_killed_hf_predict_resumes_at_its_last_batch(built, sample_sources, tmp_path):
    """`predict --resume` with an in-process model, SIGKILLed once some batches are stored: the rerun
    takes exactly those rows from the cache and writes the file an uninterrupted run writes."""
    from pipelines.tiny_models import write_tiny_llava

    model = write_tiny_llava(tmp_path / "llava", hidden=64, layers=2, image_size=64)
    env = {**os.environ, "VLBENCH_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(Path(__file__).parents[1])}
    args = [sys.executable, "-m", "pipelines.cli", "predict", "vqa-v2", "--data", str(built("vqa-v2")), "--images",
            str(sample_sources / "coco"), "--max-new-tokens", "8", "--batch-size", "4", "--model", f"hf:{model}"]
    cache = tmp_path / "cache" / "responses.sqlite3"

    def stored() -> int:
        return response_cache_rows(cache)

    run = subprocess.Popen([*args, "--resume", "--out", str(tmp_path / "p.json")], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    for _ in range(1200):  # bounded: at most 120 s for 40 rows to be stored
        if stored() >= 40 or run.poll() is not None:
            break
        time.sleep(0.1)
    run.send_signal(signal.SIGKILL)
    run.wait(timeout=30)
    assert run.returncode == -signal.SIGKILL and not (tmp_path / "p.json").exists(), "killed too late"
    before = stored()
    assert 40 <= before < 400
    done = subprocess.run([*args, "--resume", "--out", str(tmp_path / "p.json")], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "p.meta.json").read_text())["cache"]["hits"] == before
    clean = subprocess.run([*args, "--out", str(tmp_path / "clean.json")], env=env, capture_output=True, text=True,
                           timeout=600)
    assert clean.returncode == 0, clean.stderr
    assert (tmp_path / "p.json").read_text() == (tmp_path / "clean.json").read_text()


# ---------------------------------------------------------------------------------------------
# Log-likelihoods from prompt log-probabilities: the checks on one answer (the whole path runs against a
# real vLLM server in tests/test_vllm.py)

def _scoring_answer(ids: list[int], tokens: list[str], logprobs: list[float]) -> dict:
    """A chat-completions answer in the shape vLLM 0.32 gives for prompt_logprobs=0, return_token_ids=true
    (the first position has no log-probability)."""
    entries = [None] + [{str(i): {"logprob": lp, "rank": 1, "decoded_token": t}}
                        for i, t, lp in zip(ids[1:], tokens[1:], logprobs[1:])]
    return {"choices": [{"message": {"content": "x"}}], "prompt_token_ids": ids, "prompt_logprobs": entries}


def test_scored_tokens_are_those_after_the_turns_own_and_read_as_the_continuation():
    vlm = _served("http://127.0.0.1:9/v1")
    context = [5, 6, 7]  # "...ASSISTANT:"
    ids, tokens = [5, 6, 7, 40, 41, 42, 43], ["U", "S", ":", " ", "Y", "e", "s"]
    answer = _scoring_answer(ids, tokens, [0.0, -1.0, -2.0, -0.5, -0.25, -0.125, -0.0625])
    # hand-computed: the lead " " and "Yes" are the continuation's tokens
    assert vlm._continuation_logprobs(answer, "row 0", context, "Yes") == [-0.5, -0.25, -0.125, -0.0625]
    closing = _scoring_answer(ids + [3], tokens + ["</s>"], [0.0, -1.0, -2.0, -0.5, -0.25, -0.125, -0.0625, -0.01])
    with pytest.raises(ModelError, match="writes more after an assistant answer"):
        vlm._continuation_logprobs(closing, "row 0", context, "Yes")
    missing = _scoring_answer(ids, tokens, [0.0, -1.0, -2.0, -0.5, -0.25, -0.125, -0.0625])
    missing["prompt_logprobs"][5] = {"99": {"logprob": -1.0}}  # not the prompt's token
    with pytest.raises(ModelError, match="no log-probability for prompt token 5"):
        vlm._continuation_logprobs(missing, "row 0", context, "Yes")
    without = {"choices": [{"message": {"content": "x"}}], "prompt_token_ids": ids}
    with pytest.raises(ModelError, match="no prompt log-probabilities"):
        vlm._continuation_logprobs(without, "row 0", context, "Yes")
    # a server's JSON may hold a 400-digit integer (no float holds it) or -1e999 (read as infinite)
    for hostile in (json.loads("-" + "9" * 400), json.loads("-1e999"), 0.5, True):
        bad = _scoring_answer(ids, tokens, [0.0, -1.0, -2.0, -0.5, hostile, -0.125, -0.0625])
        with pytest.raises(ModelError, match="prompt token 4 .* expected a finite number <= 0"):
            vlm._continuation_logprobs(bad, "row 0", context, "Yes")


def test_a_scoring_run_records_the_model_the_server_ran():
    """The record names the model a server says answered on the log-likelihood path too (read from the
    scoring answers, as from the generation answers)."""
    vlm = _served("http://127.0.0.1:9/v1")
    answer = {**_scoring_answer([5, 6, 7, 40], ["U", "S", ":", "Y"], [0.0, -1.0, -2.0, -0.5]),
              "model": "tiny-llava-served", "system_fingerprint": "fp-1"}
    assert vlm._continuation_logprobs(answer, "row 0", [5, 6, 7], "Y") == [-0.5]
    assert (vlm.describe()["served_model"], vlm.system_fingerprint) == ("tiny-llava-served", "fp-1")


# -- several endpoints of one model (--base-url repeated) -----------------------------------------------------------

class PromptHash(CannedEndpoint):
    """A replica of one deterministic served model: a letter chosen by the prompt's SHA-256 (so every replica
    answers a prompt alike), named `model`; counts the requests it answers."""

    def __init__(self, model: str = "replica"):
        super().__init__()
        self.model = model

    def answer(self, path, body, headers):
        text = json.loads(body)["messages"][-1]["content"][-1]["text"]
        self.requests.append(text)
        letter = "ABCD"[hashlib.sha256(text.encode()).digest()[0] % 4]
        return 200, json.dumps({**chat_answer(letter), "model": self.model}).encode(), {}


def _cosim_run(cli, cosim, out: Path, *urls, extra=()) -> dict:
    folder, images, _ = cosim
    code, _, err = cli("predict", "cosim-q", "--data", folder, "--images", images, "--model", "openai:replica",
                       *[a for url in urls for a in ("--base-url", url)], "--no-cache", "--out", out, *extra)
    assert code == 0, err
    return {"predictions": out.read_bytes(), "record": json.loads(out.with_name(out.stem + ".meta.json").read_text())}


def test_several_endpoints_share_the_requests_and_answer_as_one_does(cli, cosim, tmp_path):
    """Three replicas: each answers some of the requests (each worker thread asks its own), the predictions are
    one replica's alone, byte for byte, and the record names every endpoint in the order given."""
    with PromptHash() as a, PromptHash() as b, PromptHash() as c:
        alone = _cosim_run(cli, cosim, tmp_path / "one" / "p.json", a.url)
        asked = len(a.requests)
        a.requests.clear()
        three = _cosim_run(cli, cosim, tmp_path / "three" / "p.json", a.url, b.url, c.url,
                           extra=("--concurrency", 2))
    assert three["predictions"] == alone["predictions"]
    assert all(server.requests for server in (a, b, c))
    assert len(a.requests) + len(b.requests) + len(c.requests) == asked == three["record"]["requests"]
    assert three["record"]["endpoints"] == [a.url, b.url, c.url] and "endpoint" not in three["record"]
    assert three["record"]["options"]["base_url"] == [a.url, b.url, c.url]
    assert alone["record"]["endpoint"] == a.url and alone["record"]["options"]["base_url"] == a.url


def test_a_failed_request_moves_to_another_endpoint(cli, cosim, tmp_path):
    """One endpoint answers every request with a 503 and another is a closed port: each request they get moves on
    to the next endpoint until the healthy one answers; the predictions are the healthy one's alone, and the record
    counts the retries."""
    from served_helpers import free_port

    closed = f"http://127.0.0.1:{free_port()}/v1"
    with PromptHash() as healthy, CannedEndpoint(503, {"error": {"message": "overloaded"}}) as failing:
        alone = _cosim_run(cli, cosim, tmp_path / "one" / "p.json", healthy.url)
        moved = _cosim_run(cli, cosim, tmp_path / "moved" / "p.json", failing.url, closed, healthy.url,
                           extra=("--retries", 2))
    assert moved["predictions"] == alone["predictions"]
    assert failing.requests and moved["record"]["retries"] > 0
    assert moved["record"]["requests"] == alone["record"]["requests"] + moved["record"]["retries"]


def test_endpoints_that_serve_different_models_are_one_error_line(cli, cosim, tmp_path):
    folder, images, _ = cosim
    with PromptHash("model-a") as a, PromptHash("model-b") as b:
        code, _, err = cli("predict", "cosim-q", "--data", folder, "--images", images, "--model", "openai:replica",
                           "--base-url", a.url, "--base-url", b.url, "--no-cache", "--out", tmp_path / "p.json")
        again = cli("predict", "cosim-q", "--data", folder, "--images", images, "--model", "openai:replica",
                    "--base-url", a.url, "--base-url", a.url, "--out", tmp_path / "q.json")
    assert_one_error_line(code, err, ["serve different models", "model-a", "model-b"])
    assert_one_error_line(again[0], again[2], ["--base-url", a.url, "given twice"])
    assert not (tmp_path / "p.json").exists()
