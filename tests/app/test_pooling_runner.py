"""The pooling runner (``--runner pooling``, issue 24): each pooling route's request and
response shapes (vLLM's entrypoints/pooling protocols), determinism and relatedness of the
outputs, the limits, usage, metrics, and which routes a pooling model serves."""
from __future__ import annotations

import base64
import json
import math
import struct

import gevent
import pytest

from support import error_type_400

from support import metric, scrape

EMBED = ("--runner", "pooling", "--convert", "embed")
CLASSIFY = ("--runner", "pooling", "--convert", "classify")
SCORE = ("--runner", "pooling", "--convert", "score")
DOCS = ["a cat is a small animal", "the stock market fell today", "what is a cat"]
QUERY = "what is a cat"


@pytest.fixture(scope="module")
def embed(app_client):
    return app_client(*EMBED)


@pytest.fixture(scope="module")
def classify(app_client):
    return app_client(*CLASSIFY)


@pytest.fixture(scope="module")
def cross(app_client):
    return app_client(*SCORE)


def norm(v):
    return math.sqrt(sum(x * x for x in v))


def err(r, status, param):
    assert r.status_code == status, r.text
    e = r.json()["error"]
    assert e["param"] == param and e["code"] == status and e["type"] == error_type_400(e["message"])
    return e["message"]


# ---- flags ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("flags, kind", [
    ((), None), (("--runner", "generate"), None), (("--runner", "pooling"), "embed"),
    (("--runner", "pooling", "--convert", "none"), "embed"), (("--convert", "classify"), "classify"),
    (("--task", "embed"), "embed"), (("--task", "embedding"), "embed"), (("--task", "classify"), "classify"),
    (("--task", "score"), "score"), (("--task", "generate"), None), (SCORE, "score"),
    (("--task", "embed", "--runner", "generate"), None), (("--task", "reward"), "embed"),
    (("--task", "transcription"), None), (("--runner", "draft"), None), (("--convert", "reward"), "embed")])
def test_runner_convert_and_task_resolve_as_vllm(flags, kind):
    from generation.config.cli import load_config
    cfg = load_config(["--model", "m", *flags], env={})
    assert cfg.pooling_kind == kind
    assert "runner" not in cfg.ignored_flags and "task" not in cfg.ignored_flags


def test_bad_runner_is_a_config_error():
    from generation.config.cli import load_config
    from generation.config.values import ConfigError
    with pytest.raises(ConfigError):
        load_config(["--runner", "ranker"], env={})


# ---- routes a model serves -------------------------------------------------------------------------

GENERATION = ["/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages", "/inference/v1/generate"]
POOLING = ["/pooling", "/classify", "/score", "/v1/score", "/rerank", "/v1/rerank", "/v2/rerank", "/v2/embed",
           "/v1/embeddings"]


@pytest.mark.parametrize("flags, served", [
    (EMBED, {"/pooling", "/score", "/v1/score", "/rerank", "/v1/rerank", "/v2/rerank", "/v2/embed", "/v1/embeddings"}),
    (CLASSIFY, {"/pooling", "/classify"}),
    (SCORE, {"/pooling", "/classify", "/score", "/v1/score", "/rerank", "/v1/rerank", "/v2/rerank"}),
    ((), {"/v1/embeddings"})])
def test_routes_follow_the_supported_tasks(app_client, flags, served):
    c = app_client(*flags)
    rules = {r.rule for r in c.app.url_map.iter_rules()}
    assert {p for p in POOLING if p in rules} == served
    for path in GENERATION:
        assert (path in rules) == (not flags)
    if flags:     # vLLM registers no generation router for a pooling model: FastAPI's 404
        r = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 404 and r.json() == {"detail": "Not Found"}
    assert c.get("/v1/models").status_code == 200 and c.post("/tokenize", json={"prompt": "hi"}).status_code == 200


# ---- /pooling ------------------------------------------------------------------------------------------

def test_pooling_embed_shape_and_usage(embed):
    r = embed.post("/pooling", json={"input": ["hello world", "a cat"]})
    assert r.status_code == 200
    b = r.json()
    assert set(b) == {"id", "object", "created", "model", "data", "usage"}
    assert b["id"].startswith("pooling-") and b["object"] == "list" and b["model"] == "test-model"
    assert [(d["index"], d["object"]) for d in b["data"]] == [(0, "pooling"), (1, "pooling")]
    assert len(b["data"][0]["data"]) == 384 and abs(norm(b["data"][0]["data"]) - 1) < 1e-5
    assert b["usage"] == {"prompt_tokens": 4, "total_tokens": 4, "completion_tokens": 0,
                          "completion_tokens_details": None}
    assert embed.post("/pooling", json={"input": ["hello world"]}).json()["data"][0]["data"] == b["data"][0]["data"]


@pytest.mark.parametrize("fixture, n", [("embed", 384), ("classify", 2)])
def test_pooling_encodings_every_task(request, fixture, n):
    """vLLM 0.34's /pooling encodes any task's output (pooling/pooling/serving.py:101-135):
    base64 in every EmbedDType, bytes / bytes_only as /v1/embeddings' (a json.dumps metadata
    header, pooling/utils.py:170-205)."""
    import ml_dtypes
    import numpy as np
    c = request.getfixturevalue(fixture)
    full = c.post("/pooling", json={"input": ["hi", "yo"]}).json()
    want = np.asarray([d["data"] for d in full["data"]], dtype=np.float32)
    b = c.post("/pooling", json={"input": ["hi", "yo"], "encoding_format": "base64", "embed_dtype": "bfloat16"}).json()
    got = [np.frombuffer(base64.b64decode(d["data"]), dtype=ml_dtypes.bfloat16).astype(np.float32) for d in b["data"]]
    assert np.allclose(got, want, atol=1e-2) and b["id"].startswith("pooling-")
    r = c.post("/pooling", json={"input": ["hi", "yo"], "encoding_format": "bytes", "request_id": "x"})
    assert r.status_code == 200 and r.headers["content-type"] == "application/octet-stream"
    assert np.array_equal(np.frombuffer(r.content, dtype="<f4").reshape(2, n), want)
    meta = r.headers["metadata"]
    assert meta.startswith('{"id": "pooling-x", "created": ')
    assert json.loads(meta)["data"][1] == {"index": 1, "embed_dtype": "float32", "endianness": "native",
                                           "start": 4 * n, "end": 8 * n, "shape": [n]}
    r = c.post("/pooling", json={"input": "hi", "encoding_format": "bytes_only"})
    assert "metadata" not in r.headers and len(r.content) == 4 * n


def test_pooling_base64(embed):
    full = embed.post("/pooling", json={"input": "hello big world"}).json()["data"][0]["data"]
    raw = embed.post("/pooling", json={"input": "hello big world",
                                       "encoding_format": "base64"}).json()["data"][0]["data"]
    assert list(struct.unpack("<384f", base64.b64decode(raw))) == pytest.approx(full, abs=1e-6)
    half = embed.post("/pooling", json={"input": "hello big world", "encoding_format": "base64",
                                        "embed_dtype": "float16", "endianness": "big"}).json()["data"][0]["data"]
    assert list(struct.unpack(">384e", base64.b64decode(half))) == pytest.approx(full, abs=1e-3)


def test_pooling_id_is_vllms_pooling_prefix(embed):
    """ServingPooling.request_id_prefix = "pooling" (vLLM 0.34 pooling/pooling/serving.py:36),
    the body's request_id or the X-Request-Id header after it (base/serving.py:112-115)."""
    assert embed.post("/pooling", json={"input": "hi", "request_id": "abc"}).json()["id"] == "pooling-abc"
    r = embed.post("/pooling", json={"input": "hi"}, headers={"X-Request-Id": "hdr"})
    assert r.json()["id"] == "pooling-hdr"


@pytest.mark.parametrize("fixture, body, param, text", [
    # ServingPooling._verify_pooling_task (vLLM 0.34 pooling/pooling/serving.py:60-88)
    ("embed", {"input": "hi", "dimensions": 8}, "dimensions", "dimensions is currently not supported (parameter=dimensions)"),
    ("classify", {"input": "hi", "dimensions": 8}, "dimensions", "dimensions is currently not supported (parameter=dimensions)"),
    ("embed", {"input": "hi", "task": "token_embed"}, "task",
     "Try switching the model's pooling_task via --pooler-config.task token_embed. (parameter=task)"),
    ("embed", {"input": "hi", "task": "plugin"}, "task",
     "No IOProcessor plugin installed. Please refer to the documentation and to the "
     "'prithvi_geospatial_mae_io_processor' offline inference example for more details. (parameter=task)"),
    ("classify", {"input": "hi", "task": "token_classify"}, "task",
     "Try switching the model's pooling_task via --pooler-config.task token_classify. (parameter=task)"),
])
def test_pooling_serves_only_the_models_task(request, fixture, body, param, text):
    assert err(request.getfixturevalue(fixture).post("/pooling", json=body), 400, param) == text


TOKEN_EMBED = (*EMBED, "--pooler-config", '{"task": "token_embed"}')
TOKEN_CLASSIFY = (*CLASSIFY, "--pooler-config.task", "token_classify")     # vLLM's dotted form


def test_pooler_config_task_token_embed(app_client, embed):
    """``--pooler-config '{"task": "token_embed"}'`` makes /pooling's task the per-token one (vLLM
    0.34's get_pooling_task): one vector per input token, token i's from the prefix up to it, so
    the last is the whole input's embedding; the model's own task is then the 'Try switching' 400."""
    tok = app_client(*TOKEN_EMBED)
    rows = tok.post("/pooling", json={"input": "hello big world"}).json()["data"][0]["data"]
    assert len(rows) == 3 and all(len(r) == 384 for r in rows)
    full = embed.post("/pooling", json={"input": "hello big world"}).json()["data"][0]["data"]
    assert rows[-1] == full
    assert tok.post("/pooling", json={"input": "hello big world", "task": "token_embed"}).json()["data"][0]["data"] == rows
    raw = tok.post("/pooling", json={"input": "hello big world", "encoding_format": "base64"}).json()["data"][0]["data"]
    assert list(struct.unpack("<1152f", base64.b64decode(raw))) == pytest.approx([x for r in rows for x in r], abs=1e-6)
    assert err(tok.post("/pooling", json={"input": "hi", "task": "embed"}), 400, "task") == \
        "Try switching the model's pooling_task via --pooler-config.task embed. (parameter=task)"
    # the other routes keep the model's embeddings
    assert tok.post("/v1/embeddings", json={"input": "hello big world"}).json()["data"][0]["embedding"] == \
        pytest.approx(full, abs=1e-6)


def test_pooler_config_task_token_classify(app_client, classify):
    tok = app_client(*TOKEN_CLASSIFY)
    rows = tok.post("/pooling", json={"input": "hello big world"}).json()["data"][0]["data"]
    probs = classify.post("/pooling", json={"input": "hello big world"}).json()["data"][0]["data"]
    assert len(rows) == 3 and all(len(r) == 2 and sum(r) == pytest.approx(1) for r in rows)
    assert rows[-1] == pytest.approx(probs)
    raw = tok.post("/pooling", json={"input": "hello big world", "use_activation": False}).json()["data"][0]["data"]
    assert sum(raw[-1]) != pytest.approx(1)


def test_pooler_config_token_task_bytes_carry_the_whole_shape(app_client):
    """encoding_format bytes of a per-token task: the metadata's shape is the tensor's
    (``[tokens, size]``, vLLM 0.34's encode_pooling_bytes ``output.outputs.data.shape``), as
    its decode_pooling_output reshapes by; it was ``[tokens]`` beside tokens x size values."""
    for flags, size in ((TOKEN_EMBED, 384), (TOKEN_CLASSIFY, 2)):
        r = app_client(*flags).post("/pooling", json={"input": ["hello big world", "hi there"],
                                                      "encoding_format": "bytes"})
        items = json.loads(r.headers["metadata"])["data"]
        assert [d["shape"] for d in items] == [[3, size], [2, size]]
        assert [d["end"] - d["start"] for d in items] == [3 * size * 4, 2 * size * 4]


def test_pooler_config_token_rows_are_bounded(app_client):
    """A per-token task's response is bounded before it is pooled: tokens x 384 values <= 2**22."""
    tok = app_client(*TOKEN_EMBED, "--max-model-len", "16384")
    r = tok.post("/pooling", json={"input": [[5] * 11000]})
    assert "11000 tokens x 384 dimensions exceed the 4194304 values" in err(r, 400, "input")


@pytest.mark.parametrize("flags, text", [
    (("--pooler-config", '{"task": "classify"}'), "Unsupported task: 'classify' Supported tasks: ('embed', 'token_embed')"),
    (("--pooler-config", '{"task": "encode"}'), "`encode` task was removed; use `token_embed` or `token_classify` instead."),
    (("--pooler-config", '{"normalize": true}'), "Parameter `normalize` was removed; use `use_activation` instead."),
    (("--pooler-config", '{"task": "nope"}'), "invalid value for --pooler-config: task must be one of embed, classify, "
     "token_embed, token_classify, plugin, embed&token_classify, got 'nope'"),
    (("--pooler-config", '{"taks": "embed"}'), "invalid value for --pooler-config: unknown field 'taks'"),
    (("--pooler-config", '{"dimensions": "x"}'), "invalid value for --pooler-config: dimensions must be int, got 'x'"),
    (("--pooler-config", '{"pooling_type": "SUM"}'), "invalid value for --pooler-config: pooling_type must be one of "
     "CLS, LAST, MEAN, ALL, STEP, got 'SUM'"),
    (("--pooler-config", '{"use_activation": 1}'), "invalid value for --pooler-config: use_activation must be bool"),
    (("--pooler-config", '{"logit_sigma": 0}'), "logit_sigma cannot be 0 (division by zero)"),
    (("--pooler-config", '[1]'), "invalid value for --pooler-config: '[1]' (must be a JSON object)"),
])
def test_pooler_config_errors(flags, text):
    from generation.config.cli import load_config
    from generation.config.values import ConfigError
    with pytest.raises(ConfigError) as e:
        load_config([*EMBED, *flags], env={})
    assert str(e.value).startswith(text) and e.value.param == "pooler-config"


def test_pooling_classify_tasks(classify):
    b = classify.post("/pooling", json={"input": "hello big world"}).json()
    probs = b["data"][0]["data"]
    assert len(probs) == 2 and sum(probs) == pytest.approx(1)
    assert classify.post("/pooling", json={"input": "hello big world", "task": "classify"}).json()["data"] == b["data"]
    raw = classify.post("/pooling", json={"input": "hello big world", "use_activation": False}).json()
    assert sum(raw["data"][0]["data"]) != pytest.approx(1)


@pytest.mark.parametrize("body, param, text", [
    ({"input": "hi", "task": "classify"}, "task",
     "Unsupported task: 'classify' Supported tasks: ('embed', 'token_embed') (parameter=task)"),
    ({"input": "hi", "task": "encode"}, "task", "`encode` task was removed; use `token_embed` or `token_classify` instead."),
    ({"input": ""}, "input", "empty"),
    ({}, "input", "input is required"),
    ({"input": "hi", "encoding_format": "hex"}, "body.encoding_format", "literal_error"),
    ({"input": "hi", "truncate_prompt_tokens": 0}, "truncate_prompt_tokens", "-1"),
    ({"input": ["x"] * 2049}, "input", "at most 2048"),
    ({"input": "hi", "model": "nope"}, None, "does not exist"),
])
def test_pooling_errors(embed, body, param, text):
    r = embed.post("/pooling", json=body)
    if param is None:
        assert r.status_code == 404 and text in r.json()["error"]["message"]
        return
    assert text in err(r, 400, param)


def test_pooling_context_limit_and_truncation(app_client):
    c = app_client(*EMBED, "--max-model-len", "4")
    assert "maximum context length is 4 tokens" in err(c.post("/pooling", json={"input": "a b c d e"}), 400, "input")
    b = c.post("/pooling", json={"input": "a b c d e", "truncate_prompt_tokens": 3}).json()
    assert b["usage"]["prompt_tokens"] == 3


def test_pooling_chat_messages(embed):
    b = embed.post("/pooling", json={"messages": [{"role": "user", "content": "hello"}]}).json()
    assert len(b["data"]) == 1 and b["usage"]["prompt_tokens"] > 1


# ---- /classify ------------------------------------------------------------------------------------------

def test_classify_shape(classify):
    b = classify.post("/classify", json={"input": ["loved it", "hated it"]}).json()
    assert b["id"].startswith("classify-") and b["object"] == "list"
    for i, d in enumerate(b["data"]):
        assert set(d) == {"index", "label", "probs", "num_classes"} and d["index"] == i
        assert d["num_classes"] == 2 and sum(d["probs"]) == pytest.approx(1)
        assert d["label"] == f"LABEL_{d['probs'].index(max(d['probs']))}"
    assert b["usage"]["prompt_tokens"] == 4 and b["usage"]["completion_tokens"] == 0
    assert classify.post("/classify", json={"input": ["loved it", "hated it"]}).json()["data"] == b["data"]


def test_classify_one_label_cross_encoder(cross):
    d = cross.post("/classify", json={"input": "hi"}).json()["data"][0]
    assert d["num_classes"] == 1 and d["label"] == "LABEL_0" and 0 < d["probs"][0] < 1


@pytest.mark.parametrize("body, param", [({}, "input"), ({"input": [1, "a"]}, "input"),
                                         ({"input": "a", "use_activation": "maybe"}, "body.use_activation"),
                                         ({"input": "a", "messages": []}, "messages")])
def test_classify_errors(classify, body, param):
    err(classify.post("/classify", json=body), 400, param)


# ---- /score ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("a, b", [("queries", "documents"), ("queries", "items"), ("data_1", "data_2"),
                                  ("text_1", "text_2")])
def test_score_spellings_and_shape(cross, a, b):
    r = cross.post("/score", json={a: QUERY, b: DOCS})
    body = r.json()
    assert body["id"].startswith("score-") and body["object"] == "list"
    assert [(d["index"], d["object"]) for d in body["data"]] == [(0, "score"), (1, "score"), (2, "score")]
    s = [d["score"] for d in body["data"]]
    assert s[2] > s[0] > s[1] and all(0 < x < 1 for x in s)     # equal > related > unrelated
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] > 0


def test_score_bi_encoder_is_cosine(embed):
    s = [d["score"] for d in embed.post("/v1/score", json={"queries": QUERY, "documents": DOCS}).json()["data"]]
    assert s[2] == pytest.approx(1.0) and s[0] > s[1]
    pair = embed.post("/score", json={"queries": [QUERY, "x y"], "documents": [DOCS[0], "x y"]}).json()["data"]
    assert [d["index"] for d in pair] == [0, 1] and pair[0]["score"] == pytest.approx(s[0]) \
        and pair[1]["score"] == pytest.approx(1.0)


def test_score_use_activation_false_gives_logits(cross):
    s = cross.post("/score", json={"queries": QUERY, "documents": DOCS[1], "use_activation": False}).json()
    assert s["data"][0]["score"] < 0      # an unrelated pair's logit


@pytest.mark.parametrize("body, param, text", [
    # _validate_score_input_lens (vLLM 0.34 scoring/utils.py:123-137): no parameter
    ({"queries": ["a", "b"], "documents": ["a", "b", "c"]}, None, "Input lengths must be either 1:1, 1:N or N:N"),
    ({"queries": "a"}, "documents", "must be given together"),
    ({}, "queries", "required"),
    ({"queries": [], "documents": "a"}, None, "At least one text element must be given"),
    ({"queries": "a", "documents": []}, None, "At least one text_pair element must be given"),
    # ScoringIOProcessor._get_token_limits (scoring/io_processor.py:115-146): ValueErrors, no param
    ({"queries": "a", "documents": "b", "max_tokens_per_doc": -1}, None, "max_tokens_per_doc must be a non-negative integer"),
    ({"queries": "a", "documents": "b", "max_tokens_per_query": 1024}, None,
     "max_tokens_per_query (1024) must be less than max_model_len (1024)."),
    ({"queries": "a", "documents": "b", "max_tokens_per_query": "x"}, "body.max_tokens_per_query", "int_parsing"),
    ({"queries": 5, "documents": "a"}, "queries", "string"),
    ({"queries": "a", "documents": ["d"] * 2049}, "documents", "at most 2048"),
])
def test_score_errors(cross, body, param, text):
    assert text in err(cross.post("/score", json=body), 400, param)


@pytest.mark.parametrize("fixture, cut_tokens, whole_tokens", [("cross", 6, 15), ("embed", 4, 11)])
def test_score_max_tokens_per_query_and_doc_truncate(request, fixture, cut_tokens, whole_tokens):
    """ScoringRequestMixin's max_tokens_per_query / max_tokens_per_doc (vLLM 0.34 scoring/
    protocol.py:21-37): each text query / document cut to its first N tokens before pairing
    (_truncate_scoring_data, scoring/io_processor.py:148-170); 0 leaves it whole."""
    c = request.getfixturevalue(fixture)
    docs = ["a b c", "x y z w"]
    cut = c.post("/rerank", json={"query": "a b c d", "documents": docs, "max_tokens_per_query": 2,
                                  "max_tokens_per_doc": 1}).json()
    same = c.post("/rerank", json={"query": "a b ", "documents": ["a ", "x "]}).json()      # the same tokens
    assert cut["usage"] == same["usage"] == {"prompt_tokens": cut_tokens, "total_tokens": cut_tokens}
    assert [(r["index"], r["relevance_score"], r["document"]["text"]) for r in cut["results"]] == \
        [(r["index"], r["relevance_score"], t) for r, t in zip(same["results"], [docs[r["index"]] for r in same["results"]])]
    whole = c.post("/rerank", json={"query": "a b c d", "documents": docs, "max_tokens_per_query": 0,
                                    "max_tokens_per_doc": 0}).json()
    assert whole["usage"]["prompt_tokens"] == whole_tokens


def test_bi_encoder_counts_each_text_once(app_client):
    """vLLM 0.34's BiEncoderIOProcessor embeds each query and each document once, and the
    usage sums those engine inputs (scoring/serving.py:83-86): 1:N is the query once, not per
    document; the engine (and /metrics) runs one sequence per text."""
    c = app_client(*EMBED, "--time-to-first-token", "0")
    one_n = c.post("/rerank", json={"query": "a b c d", "documents": ["a b c", "x y z w"]}).json()
    assert one_n["usage"] == {"prompt_tokens": 4 + 3 + 4, "total_tokens": 4 + 3 + 4}
    n_n = c.post("/score", json={"queries": ["a b", "c"], "documents": ["d e f", "g"]}).json()
    assert n_n["usage"]["prompt_tokens"] == 2 + 1 + 3 + 1
    m = scrape(c)
    assert metric(m, "vllm:prompt_tokens_total") == 11 + 7
    assert metric(m, "vllm:request_success_total", finished_reason="stop") == 3 + 4


# ---- /rerank ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/rerank", "/v1/rerank", "/v2/rerank"])
def test_rerank_shape_sorted_and_top_n(cross, path):
    b = cross.post(path, json={"query": QUERY, "documents": DOCS}).json()
    assert set(b) == {"id", "model", "usage", "results"}
    assert [r["index"] for r in b["results"]] == [2, 0, 1]
    assert b["results"][0]["document"] == {"text": DOCS[2], "multi_modal": None}
    scores = [r["relevance_score"] for r in b["results"]]
    assert scores == sorted(scores, reverse=True)
    assert set(b["usage"]) == {"prompt_tokens", "total_tokens"}
    top = cross.post(path, json={"query": QUERY, "documents": DOCS, "top_n": 1}).json()
    assert [r["index"] for r in top["results"]] == [2] and top["usage"] == b["usage"]


def test_rerank_multimodal_document(cross):
    doc = {"content": [{"type": "text", "text": "a cat"}]}
    r = cross.post("/rerank", json={"query": "cat", "documents": [doc]}).json()["results"][0]
    assert r["document"] == {"text": None, "multi_modal": doc["content"]}


# a missing field: pydantic's ``missing`` of vLLM's RerankRequest (the simulator's "query is required" before)
@pytest.mark.parametrize("body, param", [({"documents": ["a"]}, "body.query"), ({"query": "a"}, "body.documents"),
                                         ({"query": None, "documents": ["b"]}, "query"),
                                         ({"query": "a", "documents": None}, "documents"),
                                         ({"query": "a", "documents": ["b"], "top_n": "one"}, "body.top_n")])
def test_rerank_errors(cross, body, param):
    err(cross.post("/rerank", json=body), 400, param)


def test_rerank_missing_fields_are_pydantics(cross):
    r = cross.post("/v1/rerank", json={})
    assert (r.status_code, r.json()["error"]) == (400, {
        "message": "2 validation errors:\n  {'type': 'missing', 'loc': 'body.query', 'msg': 'Field required', "
                   "'input': '<dict of 0 items>'}\n  {'type': 'missing', 'loc': 'body.documents', 'msg': 'Field "
                   "required', 'input': '<dict of 0 items>'}", "type": "Bad Request", "param": "body.query",
        "code": 400})


# ---- /v2/embed (Cohere) -----------------------------------------------------------------------------------

def test_cohere_embed_types(embed):
    b = embed.post("/v2/embed", json={"model": "test-model", "texts": ["hi there", "a cat"], "output_dimension": 16,
                                      "embedding_types": ["float", "binary", "ubinary", "base64"]}).json()
    assert b["id"].startswith("embd-") and b["texts"] == ["hi there", "a cat"]
    assert b["meta"] == {"api_version": {"version": "2"}, "billed_units": {"input_tokens": 4, "image_tokens": 0}}
    assert list(b) == ["id", "embeddings", "texts", "meta", "response_type"] and b["response_type"] == "embeddings_by_type"
    e = b["embeddings"]
    f = e["float"][0]
    assert len(f) == 16
    bits = [1 if x >= 0 else 0 for x in f]
    ubyte = [int("".join(map(str, bits[k:k + 8])), 2) for k in (0, 8)]
    assert e["ubinary"][0] == ubyte and e["binary"][0] == [u - 128 for u in ubyte]
    assert list(struct.unpack("<16f", base64.b64decode(e["base64"][0]))) == pytest.approx(f, abs=1e-6)
    # float32 values written as the doubles they widen to (vLLM's tensor.tolist()), not float32's
    # shortest digits: each parses back to exactly a float32 value
    assert all(struct.unpack("<f", struct.pack("<f", x))[0] == x for x in f)
    assert list(struct.unpack("<16f", base64.b64decode(e["base64"][0]))) == f
    same = embed.post("/v1/embeddings", json={"input": "hi there", "dimensions": 16}).json()["data"][0]["embedding"]
    assert f == pytest.approx(same, abs=1e-6)


def test_cohere_embed_default_and_images(embed):
    b = embed.post("/v2/embed", json={"model": "test-model", "images": ["data:image/png;base64,AAAA"]}).json()
    assert set(b["embeddings"]) == {"float"} and "texts" not in b and len(b["embeddings"]["float"][0]) == 384
    mixed = embed.post("/v2/embed", json={"model": "test-model", "inputs": [{"content": [
        {"type": "text", "text": "a cat"}, {"type": "image_url", "image_url": {"url": "http://x/c.png"}}]}]}).json()
    assert len(mixed["embeddings"]["float"]) == 1


@pytest.mark.parametrize("body, param, text", [
    # vLLM 0.34's EmbedIOProcessor / PoolingParams checks: ValueErrors and parameterless VLLMValidationErrors
    ({"texts": ["a"], "input_type": "search_query"}, None,
     "Unsupported input_type 'search_query'. This model does not define any input_type task instructions."),
    ({"texts": ["a"], "embedding_types": ["int8"]}, "embedding_types[0]", "embedding_types"),
    ({"texts": ["a"], "output_dimension": 385}, None, "Model 'test-model' only supports dimensions in range [1, 384], got 385."),
    ({"texts": ["a"], "output_dimension": 0}, None, "Model 'test-model' only supports dimensions in range [1, 384], got 0."),
    ({"texts": ["a"], "output_dimension": 12, "embedding_types": ["binary"]}, None,
     "Embedding dimension must be a multiple of 8 for binary embedding types, but got 12."),
    ({"texts": ["a b c"], "truncate": "NONE", "max_tokens": 2}, None,
     "Input of 3 tokens exceeds max_tokens=2 with truncate=NONE. Set truncate to END or START to allow truncation."),
    ({"texts": ["a"], "truncate": "MIDDLE"}, "truncate", "truncate"),
])
def test_cohere_embed_errors(embed, body, param, text):
    assert text in err(embed.post("/v2/embed", json=body), 400, param)


EXACTLY_ONE = "Exactly one of texts, images, or inputs must be provided, and it must be non-empty"


@pytest.mark.parametrize("body", [{"model": "test-model"}, {"texts": []}, {"images": []}, {"inputs": []},
                                  {"texts": ["a"], "images": ["data:image/png;base64,AAAA"]},
                                  {"texts": ["a"], "inputs": []}])
def test_cohere_embed_takes_exactly_one_input_field(embed, body):
    """``CohereEmbedRequest``'s model validator (pooling/embed/protocol.py l. 272-281) through
    vLLM's validation handler: the body's own error."""
    r = embed.post("/v2/embed", json=body)
    assert (r.status_code, r.json()) == (400, {"error": {"message": (
        "1 validation error:\n  {'type': 'value_error', 'loc': 'body', 'msg': 'Value error, " + EXACTLY_ONE
        + f"', 'input': '<dict of {len(body)} items>', 'ctx': {{'error': ValueError('" + EXACTLY_ONE + "')}}"),
        "type": "Bad Request", "param": "body", "code": 400}})


def test_cohere_embed_content_parts_need_their_payload(embed):
    """``CohereEmbedContent``'s validator, every part's error (protocol.py l. 240-254)."""
    r = embed.post("/v2/embed", json={"inputs": [{"content": [
        {"type": "text", "text": "a"}, {"type": "text", "text": None}, {"type": "image_url", "image_url": {}}]}]})
    text, image = ("CohereEmbedContent with type='text' requires text",
                   "CohereEmbedContent with type='image_url' requires image_url.url")
    assert (r.status_code, r.json()) == (400, {"error": {"message": (
        "2 validation errors:\n"
        f"  {{'type': 'value_error', 'loc': 'body.inputs.0.content.1', 'msg': \"Value error, {text}\", "
        f"'input': '<dict of 2 items>', 'ctx': {{'error': ValueError(\"{text}\")}}}}\n"
        f"  {{'type': 'value_error', 'loc': 'body.inputs.0.content.2', 'msg': \"Value error, {image}\", "
        f"'input': '<dict of 2 items>', 'ctx': {{'error': ValueError(\"{image}\")}}}}"),
        "type": "Bad Request", "param": "body.inputs.0.content.1", "code": 400}})


def test_cohere_embed_truncation(embed):
    def tokens(**kw):
        return embed.post("/v2/embed", json={"texts": ["a b c d"], **kw}).json()["meta"]["billed_units"]["input_tokens"]
    assert tokens() == 4 and tokens(max_tokens=2) == 2 and tokens(truncate="START", max_tokens=3) == 3


# ---- embeddings, engine, metrics -----------------------------------------------------------------------

def test_embeddings_on_a_pooling_model(embed):
    """The same float32 vector; /v1/embeddings writes it as float32's shortest digits (the
    ndarray), /pooling as the doubles tolist() widens it to (encode_pooling_output_float,
    vLLM 0.34 pooling/utils.py:62-64), as the two routes of vLLM do."""
    v = embed.post("/v1/embeddings", json={"input": "hello world"}).json()["data"][0]["embedding"]
    p = embed.post("/pooling", json={"input": "hello world"}).json()["data"][0]["data"]
    assert [struct.unpack("<f", struct.pack("<f", x))[0] for x in v] == p


def test_related_texts_are_closer():
    from generation.content.pooling import cosine, embedding_vector
    a, b, c = ([1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 9, 10], [20, 21, 22, 23, 24, 25])
    va, vb, vc = (embedding_vector(x, 384) for x in (a, b, c))
    assert cosine(va, vb) > 0.5 > abs(cosine(va, vc))
    assert 0.8 < cosine(va, embedding_vector(a[::-1], 384)) < 1


def test_pooling_metrics(app_client):
    c = app_client(*SCORE, "--time-to-first-token", "0")
    c.post("/classify", json={"input": ["a b", "c d e"]})
    c.post("/rerank", json={"query": "a", "documents": ["b", "c"]})
    m = scrape(c)
    assert metric(m, "vllm:prompt_tokens_total") == 2 + 3 + 2 + 2
    assert metric(m, "vllm:generation_tokens_total") == 0
    assert metric(m, "vllm:request_success_total", finished_reason="stop") == 4
    assert metric(m, "vllm:e2e_request_latency_seconds_count") == 4
    assert metric(m, "vllm:request_prompt_tokens_count") == 4
    assert metric(m, "vllm:request_generation_tokens_count") == 0
    assert metric(m, "vllm:request_params_max_tokens_count") == 0


def test_pooling_queue_limit(app_client):
    """More inputs than the seats and the queue hold run in waves of --max-num-seqs (vLLM takes a
    2,048-input request whole; issue 31 item 11); a wave that finds the queue full is a 429."""
    c = app_client(*EMBED, "--max-num-seqs", "1", "--max-waiting-queue-length", "1",
                   "--time-to-first-token", "100ms")
    r = c.post("/pooling", json={"input": ["a", "b", "c"]})
    assert r.status_code == 200 and len(r.json()["data"]) == 3
    assert c.post("/pooling", json={"input": ["a", "b"]}).status_code == 200
    assert c.sim.running == 0 and not c.sim.waiting
    busy = [gevent.spawn(c.post, "/pooling", json={"input": ["a"]}) for _ in range(2)]    # the seat and the queue
    gevent.sleep(0.03)
    assert c.post("/pooling", json={"input": ["a", "b", "c"]}).status_code == 429
    assert [g.get().status_code for g in busy] == [200, 200]
    assert c.sim.running == 0 and not c.sim.waiting


def test_pooling_takes_the_prefill_time(app_client):
    import time
    c = app_client(*EMBED, "--time-to-first-token", "150ms")
    t = time.monotonic()
    assert c.post("/score", json={"queries": "a", "documents": ["b", "c"]}).status_code == 200
    assert 0.15 <= time.monotonic() - t < 1.0


@pytest.mark.parametrize("fixture, path, body", [
    ("embed", "/pooling", {"input": "hi"}), ("embed", "/v1/embeddings", {"input": "hi"}),
    ("embed", "/score", {"queries": "a", "documents": "b"}), ("cross", "/rerank", {"query": "a", "documents": ["b"]}),
    ("classify", "/classify", {"input": "hi"}),
])
def test_unknown_model_404_has_no_param(request, fixture, path, body):
    """vLLM 0.34's pooling serving never answers from _check_model; _maybe_get_adapters raises
    VLLMNotFoundError (serve/engine/serving.py:213-217), whose 404 has a null param
    (serve/exception_handling/error_response.py:52-55)."""
    r = request.getfixturevalue(fixture).post(path, json={**body, "model": "nope"})
    assert r.status_code == 404
    assert r.json()["error"] == {"message": "The model `nope` does not exist.", "type": "NotFoundError",
                                 "param": None, "code": 404}


@pytest.mark.parametrize("fixture, path", [("embed", "/pooling"), ("embed", "/v1/embeddings"),
                                           ("classify", "/classify"), ("classify", "/pooling")])
def test_no_prompt_is_vllms_400(request, fixture, path):
    """An empty ``input`` list: PoolingBaseServing._preprocessing's ValueError (vLLM 0.34
    pooling/base/serving.py:85-88), no param."""
    r = request.getfixturevalue(fixture).post(path, json={"input": []})
    assert r.status_code == 400 and r.json()["error"] == {
        "message": "You must pass at least one prompt", "type": "BadRequestError", "param": None, "code": 400}


@pytest.mark.parametrize("fixture, path", [("embed", "/pooling"), ("classify", "/classify"), ("classify", "/pooling")])
def test_chat_form_refuses_both_generation_options(request, fixture, path):
    """PoolingChatRequest / ClassificationChatRequest take ChatRequestOptionsMixin's options
    and its check_generation_prompt (vLLM 0.34 pooling/base/protocol.py:283-293), as
    /v1/embeddings' chat form does; they were ignored."""
    c = request.getfixturevalue(fixture)
    msgs = [{"role": "user", "content": "hello"}]
    r = c.post(path, json={"messages": msgs, "add_generation_prompt": True, "continue_final_message": True})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == "Cannot set both `continue_final_message` and `add_generation_prompt` to True."
    assert c.post(path, json={"messages": msgs, "continue_final_message": True}).status_code == 200
    r = c.post(path, json={"messages": msgs, "add_generation_prompt": "maybe"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "body.add_generation_prompt"


@pytest.mark.parametrize("convert, path", [("embed", "/v1/embeddings"), ("embed", "/pooling"), ("classify", "/classify")])
def test_chat_form_request_template_needs_trust(app_client, convert, path):
    """The pooling chat forms' chat_template / chat_template_kwargs.chat_template: refused
    without --trust-request-chat-template (vLLM 0.34 pooling/base/io_processor.py:287-305),
    rendered with it; they were ignored."""
    msgs = [{"role": "user", "content": "hello there"}]
    for extra in ({"chat_template": "{{ 'x' }}"}, {"chat_template_kwargs": {"chat_template": "{{ 'x' }}"}}):
        r = app_client("--runner", "pooling", "--convert", convert).post(path, json={"messages": msgs, **extra})
        assert r.status_code == 400 and r.json()["error"]["message"].startswith(
            "Chat template is passed with request, but --trust-request-chat-template is not set.")
    trusted = app_client("--runner", "pooling", "--convert", convert, "--trust-request-chat-template")
    r = trusted.post(path, json={"messages": msgs, "chat_template": "{{ 'x' }}"})
    assert r.status_code == 200 and r.json()["usage"]["prompt_tokens"] == 1


def test_pooling_truncation_keeps_the_first_tokens_by_default(embed):
    """vLLM 0.34's get_tokenizer gives the pooling runner's tokenizer truncation_side "right"
    (tokenizers/registry.py l. 139-144): ``truncate_prompt_tokens`` keeps the first tokens unless
    the request's ``truncation_side`` says ``left``; usage counts what is kept."""
    def vec(body):
        r = embed.post("/v1/embeddings", json={"model": "test-model", **body})
        assert r.status_code == 200, r.text
        return r.json()["data"][0]["embedding"], r.json()["usage"]["prompt_tokens"]
    first, n = vec({"input": [[5, 6, 7, 8]], "truncate_prompt_tokens": 2})
    assert (first, n) == vec({"input": [[5, 6]]}) and n == 2
    assert vec({"input": [[5, 6, 7, 8]], "truncate_prompt_tokens": 2, "truncation_side": "left"}) == vec({"input": [[7, 8]]})
    assert vec({"input": [[5, 6, 7, 8]], "truncate_prompt_tokens": 2, "truncation_side": "right"})[0] == first
