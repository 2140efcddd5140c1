"""SQLite dataset responses served (the seeds' "Dataset Responses (Optional)", engine.md 9.2-9.4).

The recorded dataset (``support.recorded_dataset``, simulated tokenizer: the server's default)
is served by in-process apps built as ``python app.py --dataset-path ...`` builds them;
start-up errors go through ``app.main`` (exit status and stderr).
"""
from __future__ import annotations

import sqlite3

import pytest

from data.dataset import build_dataset
from support import sse_events
from support.recorded_dataset import (ACCENTS, ACCENTS_ANSWER, ANSWERS, FRANCE, FRANCE_ANSWER, GREETING,
                                      GREETING_ANSWER, IDS_ANSWER, IDS_PROMPT, MODEL, PAIRS, STORY, TOK, pieces)


@pytest.fixture(scope="module")
def base(app_client, db_path):
    return app_client("--dataset-path", db_path)


@pytest.fixture(scope="module")
def client(base):
    with base.openai(api_key="unused", max_retries=0) as c:
        yield c           # closed afterwards: an idle keep-alive connection delays server shutdown


# ---- served responses --------------------------------------------------------------------------
def test_chat_prompt_in_dataset_gets_the_stored_response(client):
    r = client.chat.completions.create(model=MODEL, messages=FRANCE, max_tokens=50)
    assert r.choices[0].message.content == FRANCE_ANSWER
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.completion_tokens == 7
    r = client.chat.completions.create(model=MODEL, messages=FRANCE)           # no cap: room left
    assert (r.choices[0].message.content, r.choices[0].finish_reason) == (FRANCE_ANSWER, "stop")


def test_chat_keeps_the_exact_text(client):
    r = client.chat.completions.create(model=MODEL, messages=ACCENTS, max_completion_tokens=8)
    assert r.choices[0].message.content == ACCENTS_ANSWER
    assert r.choices[0].finish_reason == "length"          # exactly the cap
    assert r.usage.completion_tokens == 8


def test_completions_prompt_in_dataset_gets_the_stored_response(client):
    r = client.completions.create(model=MODEL, prompt=GREETING, max_tokens=100)
    assert (r.choices[0].text, r.choices[0].finish_reason) == (GREETING_ANSWER, "stop")
    assert r.usage.completion_tokens == 13
    r = client.completions.create(model=MODEL, prompt=IDS_PROMPT, max_tokens=100)   # token-id prompt
    assert (r.choices[0].text, r.choices[0].finish_reason) == (IDS_ANSWER, "stop")


def test_small_max_tokens_trims_the_stored_response(client):
    r = client.completions.create(model=MODEL, prompt=GREETING, max_tokens=3)
    assert (r.choices[0].text, r.choices[0].finish_reason) == ("Hello! I ", "length")
    assert r.usage.completion_tokens == 3
    r = client.chat.completions.create(model=MODEL, messages=FRANCE, max_tokens=4)
    assert (r.choices[0].message.content, r.choices[0].finish_reason) == ("The capital of France ", "length")


def test_several_matches_prefer_one_long_enough(client):
    for _ in range(5):
        r = client.completions.create(model=MODEL, prompt=STORY, max_tokens=8)
        assert (r.choices[0].text, r.choices[0].finish_reason) == ("Once upon a time there was a simulator ",
                                                                   "length")


def test_ignore_eos_pads_to_exactly_max_tokens(client):
    r = client.chat.completions.create(model=MODEL, messages=FRANCE, max_tokens=20,
                                       extra_body={"ignore_eos": True})
    text = r.choices[0].message.content
    assert text.startswith(FRANCE_ANSWER) and len(text) > len(FRANCE_ANSWER)
    assert (r.usage.completion_tokens, r.choices[0].finish_reason) == (20, "length")
    r = client.completions.create(model=MODEL, prompt=GREETING, max_tokens=5, extra_body={"ignore_eos": True})
    assert (r.choices[0].text, r.usage.completion_tokens) == ("Hello! I am a ", 5)


def test_unknown_prompt_gets_a_stored_response_within_the_cap(client):
    fitting = {a for a in ANSWERS if len(pieces(a)) <= 6}
    for i in range(8):
        r = client.chat.completions.create(model=MODEL, max_tokens=6,
                                           messages=[{"role": "user", "content": f"unknown question {i}"}])
        assert r.choices[0].message.content in fitting
        assert r.choices[0].finish_reason == "stop"          # every fitting answer is shorter than 6
        assert r.usage.completion_tokens == len(pieces(r.choices[0].message.content))
    r = client.completions.create(model=MODEL, prompt="nobody asked this", max_tokens=1)
    assert r.choices[0].text in {pieces(a)[0] for a in ANSWERS}
    assert (r.choices[0].finish_reason, r.usage.completion_tokens) == ("length", 1)


def test_streamed_chat_replays_the_stored_response(base):
    body = {"model": MODEL, "messages": ACCENTS, "stream": True, "max_tokens": 30,
            "stream_options": {"include_usage": True}}
    r = base.post("/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 200
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    chunks = [e for e in events[:-1] if e["choices"]]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == ACCENTS_ANSWER
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert events[-2]["usage"]["completion_tokens"] == 8


def test_seed_makes_dataset_choices_reproducible(app_client, db_path):
    def run(base):
        out = []
        with base.openai(api_key="unused", max_retries=0) as c:
            for i in range(10):
                r = c.completions.create(model=MODEL, prompt=f"never seen {i}", max_tokens=50)
                out.append(r.choices[0].text)
            for _ in range(4):
                r = c.completions.create(model=MODEL, prompt=STORY, max_tokens=100)
                out.append(r.choices[0].text)
        return out

    a = run(app_client("--dataset-path", db_path, "--seed", "42", "--max-num-seqs", "3"))
    b = run(app_client("--dataset-path", db_path, "--seed", "42", "--max-num-seqs", "4"))
    assert a == b
    assert set(a[:10]) <= set(ANSWERS) and len(set(a[:10])) > 1


def test_dataset_in_memory_with_custom_table(app_client, tmp_path_factory):
    path = tmp_path_factory.mktemp("mem") / "recorded.sqlite3"
    build_dataset(path, PAIRS, TOK, table="recorded")
    base = app_client("--dataset-path", str(path), "--dataset-in-memory", "--dataset-table-name", "recorded")
    with base.openai(api_key="unused", max_retries=0) as c:
        r = c.chat.completions.create(model=MODEL, messages=FRANCE, max_tokens=50)
        assert (r.choices[0].message.content, r.choices[0].finish_reason) == (FRANCE_ANSWER, "stop")
        r = c.completions.create(model=MODEL, prompt=GREETING, max_tokens=3)
    assert (r.choices[0].text, r.choices[0].finish_reason) == ("Hello! I ", "length")
    cfg = base.get("/admin/config", timeout=10).json()
    assert (cfg["dataset-in-memory"], cfg["dataset-table-name"]) == (True, "recorded")


def test_empty_dataset_falls_back_to_predefined_sentences(app_client, tmp_path_factory):
    path = tmp_path_factory.mktemp("empty") / "empty.sqlite3"
    build_dataset(path, [], TOK)
    base = app_client("--dataset-path", str(path))
    r = base.post("/v1/completions", json={"model": MODEL, "prompt": GREETING, "max_tokens": 10,
                                           "ignore_eos": True}, timeout=30)
    assert r.status_code == 200
    body = r.json()
    assert body["usage"]["completion_tokens"] == 10 and body["choices"][0]["finish_reason"] == "length"
    assert body["choices"][0]["text"] and body["choices"][0]["text"] != GREETING_ANSWER


# ---- start-up errors ---------------------------------------------------------------------------
def _make_db(path, ddl: str) -> str:
    con = sqlite3.connect(path)
    con.execute(ddl)
    con.commit()
    con.close()
    return str(path)


class _Exit:
    def __init__(self, returncode, stderr):
        self.returncode, self.stderr = returncode, stderr


def _start(*flags: str) -> _Exit:
    """``python app.py --model MODEL [flags]`` through ``app.main``: exit status and stderr.
    (tests/server/test_startup_errors.py runs the real process on the same path.)"""
    import contextlib
    import io

    import app

    def serve(*args, **kwargs):
        raise AssertionError("the configuration was accepted and the server would start")
    err = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stderr(err):
        mp.setattr(app, "serve", serve)
        try:
            rc = app.main(["--model", MODEL, *flags])
        except SystemExit as e:
            rc = e.code
    return _Exit(rc, err.getvalue())


def test_startup_error_missing_file(tmp_path):
    missing = str(tmp_path / "nope.sqlite3")
    r = _start("--dataset-path", missing)
    assert r.returncode != 0
    assert f"database file does not exist: {missing}" in r.stderr


@pytest.mark.parametrize("ddl,flags,message", [
    ("CREATE TABLE llmd (id INTEGER, prompt_hash TEXT, gen_tokens JSON, n_gen_tokens INTEGER)", (),
     "failed to verify database: column prompt_hash has incorrect type: expected BLOB, got TEXT"),
    ("CREATE TABLE llmd (id INTEGER, prompt_hash BLOB, gen_tokens JSON)", (),
     "failed to verify database: missing expected column in llmd table: n_gen_tokens"),
    ("CREATE TABLE llmd (id INTEGER, prompt_hash BLOB, gen_tokens JSON, n_gen_tokens INTEGER)",
     ("--dataset-table-name", "other"), "failed to verify database: missing expected column in other table: id"),
])
def test_startup_error_wrong_schema(tmp_path, ddl, flags, message):
    path = _make_db(tmp_path / "bad.sqlite3", ddl)
    r = _start("--dataset-path", path, *flags)
    assert r.returncode != 0
    assert message in r.stderr


def test_startup_error_not_a_database(tmp_path):
    path = tmp_path / "junk.sqlite3"
    path.write_bytes(b"this is not a database file, just some text " * 50)
    r = _start("--dataset-path", str(path))
    assert r.returncode != 0
    assert "failed to verify database: file is not a database" in r.stderr


def test_startup_error_echo_mode_with_dataset(db_path):
    r = _start("--mode", "echo", "--dataset-path", db_path)
    assert r.returncode != 0
    assert "dataset cannot be defined in echo mode" in r.stderr
