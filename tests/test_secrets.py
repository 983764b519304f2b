"""Keys stay secret (core/sanitise.py's `environment_secrets`, `looks_like_credential`, `MaskedStream`; the model
options' `check_no_credentials`): the value of HF_TOKEN, OPENAI_API_KEY or the variable --api-key-env names is
masked in every line vlbench prints, whichever flag it was pasted into; a model spec or option holding a key, or
a KEY=VALUE argument named as a secret, is refused before anything is written (the prediction record, the
response cache's keys and the suite's logs list them). The keys here are made up, in the published shapes."""

from __future__ import annotations

import pytest
from helpers import assert_one_error_line

HF_KEY = "hf_" + "QxV7mN2pL9kR4tZ8wB3cY6dF1gH5jK0sAe"  # an HF token's shape: hf_ and 34 letters and digits
OPENAI_KEY = "sk-proj-" + "Zt4Kq9Lm2Nv8Wx3Yb7Cd1Ef6Gh5Jk0Pa"
PLAIN_KEY = "endpoint-pass-7Hq2Lz9Vw4"  # no published shape: known only as a key variable's value


@pytest.fixture
def keys(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", HF_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("MY_ENDPOINT_TOKEN", PLAIN_KEY)


def _nothing_shown(out: str, err: str) -> None:
    for key in (HF_KEY, OPENAI_KEY, PLAIN_KEY):
        for piece in (key, key[-12:], key.upper()):
            assert piece not in out and piece not in err


@pytest.mark.parametrize("flags, needle", [
    (["--model", f"hf:{HF_KEY}"], "--model: holds what looks like a key"),
    (["--model", f"openai:{PLAIN_KEY}", "--api-key-env", "MY_ENDPOINT_TOKEN"], "--model: holds what looks like"),
    (["--model", "openai:m", "--system-prompt", f"my key is {OPENAI_KEY}"], "--system-prompt: holds"),
    (["--model", "openai:m", "--chat-template-kwarg", f"note={PLAIN_KEY}", "--api-key-env", "MY_ENDPOINT_TOKEN"],
     "--chat-template-kwarg: holds"),
    (["--model", "openai:m", "--chat-template-kwarg", "api_key=x"], "--chat-template-kwarg api_key: names a secret"),
    (["--model", "openai:m", "--api-key-env", OPENAI_KEY], "--api-key-env: holds"),
    (["--model", "openai:m", "--judge", f"openai:{HF_KEY}"], "--judge: holds"),
])
def test_a_key_in_a_flag_is_refused_and_never_printed(flags, needle, keys, built, cli, tmp_path):
    """Refused in one line that names the flag, never the value; nothing written."""
    out = tmp_path / "p.json"
    code, stdout, err = cli("predict", "cosim-q", "--data", built("cosim-q"), *flags, "--out", out,
                            "--base-url", "http://127.0.0.1:9/v1", "--no-cache") \
        if flags[1].startswith("openai:") else cli("predict", "cosim-q", "--data", built("cosim-q"), *flags,
                                                   "--out", out)
    assert_one_error_line(code, err, [needle, "keys go in the environment"])
    _nothing_shown(stdout, err)
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_an_engine_arg_holding_a_key_is_refused():
    """vllm: engine arguments: a name that says secret (before: token, key, ... split at `_` only) or a value
    that is a key."""
    from core.errors import ModelError
    from evaluator.models.options import ModelOptions, check_no_credentials
    from evaluator.models.vllm_engine import parse_engine_args

    with pytest.raises(ModelError, match="a secret is not taken"):
        parse_engine_args(["hf-token=abc"])
    options = ModelOptions(engine_args=parse_engine_args([f"hf_overrides={{\"note\": \"{HF_KEY}\"}}"]))
    with pytest.raises(ModelError, match="--engine-arg: holds what looks like a key") as raised:
        check_no_credentials("vllm:m", options)
    assert HF_KEY not in str(raised.value)
    check_no_credentials("vllm:m", ModelOptions(engine_args=parse_engine_args(["max_num_batched_tokens=64"])))


def test_every_line_printed_masks_the_keys(keys, cli, built, tmp_path, monkeypatch):
    """A key pasted where vlbench echoes it back (a missing --data folder named by it, the --split it asks for) is
    masked in the line printed, in any letter case and in part."""
    monkeypatch.setenv("VLBENCH_API_KEY", PLAIN_KEY)
    code, out, err = cli("evaluate", "cosim-q", "--data", tmp_path / HF_KEY, "--predictions", tmp_path / "x.json")
    assert code == 2 and "***" in err
    _nothing_shown(out, err)
    code, out, err = cli("evaluate", "cosim-q", "--data", built("cosim-q"), "--split", PLAIN_KEY.upper(),
                         "--predictions", tmp_path / "x.json")
    assert code == 2 and "***" in err
    _nothing_shown(out, err)


def test_the_masks_hold_short_values_and_ordinary_names_alone(monkeypatch):
    """A variable's value shorter than 8 characters (`none`, `1`) is no key, nor a variable vlbench never reads
    (GPG_KEY); names are split at `_`, `-` and `.` (`max_num_batched_tokens` names no secret)."""
    from core.sanitise import environment_secrets, names_a_secret

    monkeypatch.setenv("VLBENCH_API_KEY", "none")
    monkeypatch.setenv("GPG_KEY", "7169605F62C751356D054A26A821E680E5FA6305")
    monkeypatch.setenv("SOME_TOKEN", PLAIN_KEY)
    assert environment_secrets() == ()
    assert environment_secrets(["SOME_TOKEN"]) == (PLAIN_KEY,)
    assert names_a_secret("hf_token") and names_a_secret("api-key") and names_a_secret("DB.PASSWORD")
    assert not names_a_secret("max_num_batched_tokens") and not names_a_secret("keyframes")
