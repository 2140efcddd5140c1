"""``POST /generative_scoring`` (vLLM 0.34's ``generate/generative_scoring``): the response's
shape and exact values, the softmax over the label ids, ``item_first``, token-id and text inputs,
truncation to the context, every validation error in vLLM's words (pydantic's against a replica
of its request model), the engine's accounting (metrics, queue, latency, step mode), the route's
registration (a pooling model has none) and ``--api-key``."""
from __future__ import annotations

import math
import os
import re
import time

import pydantic
import pytest

from support import assert_error, post_ok, pydantic_400

from generation.content.label_logprobs import LABEL_RANKS, label_logprobs, label_rank, prompt_key
from generation.content.logprobs import logprob
from support import check_inference_route, check_label_reads, metric, scrape

PATH = "/generative_scoring"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
STEP = ("--latency-calculator", "step", "--force-dummy-tokenizer")
BODY = {"query": [1, 2, 3], "items": [[4], [5, 6]], "label_token_ids": [100, 200, 300]}


def post(c, body, **kw):
    return c.post(PATH, json=body, **kw)


def ok(c, body, **kw) -> dict:
    return post_ok(c, PATH, body, **kw)


def scores(c, body) -> list[float]:
    return [d["score"] for d in ok(c, body)["data"]]


error = assert_error


def raw(prompt, label) -> float:
    """The synthetic probability: exp(-1.0 - (len % 3) * 0.1 - rank * 0.5)."""
    return math.exp(logprob(len(prompt), label_rank(prompt_key(prompt), label)))


# ---- the formula ----------------------------------------------------------------------------------

def test_label_logprobs_are_the_formula_per_prompt_and_label():
    prompt = [1, 2, 3, 4]
    key = prompt_key(prompt)
    assert key == prompt_key(list(prompt)) and key != prompt_key([1, 2, 3]) and key != prompt_key([4, 3, 2, 1])
    ranks = [label_rank(key, t) for t in (100, 200, 300, 100)]
    assert ranks == [10, 7, 10, 10]                   # pinned: the values must not drift between versions
    assert label_logprobs(prompt, [100, 200, 300, 100]) == [-6.1, -4.6, -6.1, -6.1]     # pos 4: -1.1 - 0.5 rank
    many = [label_rank(key, t) for t in range(4096)]
    assert set(many) == set(range(LABEL_RANKS))       # every rank is used
    assert all(-8.7 <= v <= -1.0 for v in label_logprobs(prompt, range(4096)))


# ---- shapes and values -------------------------------------------------------------------------------

def test_response_shape_usage_and_raw_probabilities(api):
    t = int(time.time())
    r = post(api, {**BODY, "apply_softmax": False, "item_first": False})
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    out = r.json()
    assert list(out) == ["id", "object", "created", "model", "data", "usage"]
    assert re.fullmatch(r"generative-scoring-[0-9a-f]{32}", out["id"])
    assert out["object"] == "list" and t <= out["created"] <= time.time() and out["model"] == "test-model"
    prompts = [[1, 2, 3, 4], [1, 2, 3, 5, 6]]
    assert out["data"] == [{"index": i, "object": "score", "score": raw(p, 100)} for i, p in enumerate(prompts)]
    assert [d["score"] for d in out["data"]] == [math.exp(-6.1), math.exp(-4.7)]     # ranks 10 and 7
    assert all(0 < d["score"] < 1 for d in out["data"])
    # every item's own prompt counted (the query once per item) and its one output token
    assert out["usage"] == {"prompt_tokens": 4 + 5, "total_tokens": 9 + 2, "completion_tokens": 2,
                            "completion_tokens_details": None}


def test_raw_probability_does_not_depend_on_the_other_labels(api):
    base = {"query": [7, 8], "items": [[9], [10, 11], [12]], "apply_softmax": False}
    one = scores(api, {**base, "label_token_ids": [42]})
    assert one == scores(api, {**base, "label_token_ids": [42, 1, 2, 3]}) == \
        scores(api, {**base, "label_token_ids": [42, 42]})
    assert one == [raw([7, 8, 9], 42), raw([7, 8, 10, 11], 42), raw([7, 8, 12], 42)]


def test_softmax_over_the_label_ids_sums_to_one(api):
    labels = [100, 200, 300, 400]
    base = {"query": "Is this review positive?", "items": ["great product", "terrible", "it is fine"]}
    rotations = [labels[k:] + labels[:k] for k in range(len(labels))]
    per_first = [scores(api, {**base, "label_token_ids": r}) for r in rotations]
    for i in range(3):
        total = sum(s[i] for s in per_first)
        assert abs(total - 1.0) <= 4 * 2 ** -52, total
        assert all(0 < s[i] < 1 for s in per_first)
    # softmax of the raw probabilities over the labels, as vLLM's _compute_probabilities
    raws = [scores(api, {**base, "label_token_ids": [t], "apply_softmax": False}) for t in labels]
    for i in range(3):
        lps = [math.log(r[i]) for r in raws]
        assert math.isclose(per_first[0][i], math.exp(lps[0] - max(lps)) / sum(math.exp(v - max(lps)) for v in lps),
                            rel_tol=1e-12)
    # a repeated label id counts once; a single label scores 1
    assert scores(api, {**base, "label_token_ids": [100, 200, 100]}) == \
        scores(api, {**base, "label_token_ids": [100, 200]})
    assert scores(api, {**base, "label_token_ids": [100]}) == [1.0, 1.0, 1.0]


def test_item_first_puts_the_item_before_the_query(api):
    labels = {"label_token_ids": [5, 6, 7]}
    flipped = ok(api, {"query": [1, 2], "items": [[3, 4], [9]], "item_first": True, **labels})
    assert flipped["usage"]["prompt_tokens"] == 4 + 3
    # item + query is the prompt of the item as query and the query as item
    assert [d["score"] for d in flipped["data"]] == [
        scores(api, {"query": [3, 4], "items": [[1, 2]], **labels})[0],
        scores(api, {"query": [9], "items": [[1, 2]], **labels})[0]]
    assert [d["score"] for d in flipped["data"]] != scores(api, {"query": [1, 2], "items": [[3, 4], [9]], **labels})


def test_text_and_token_id_inputs_agree(api):
    tok = api.post("/tokenize", json={"prompt": "Is it a cat?"}).json()["tokens"]
    items = [api.post("/tokenize", json={"prompt": t, "add_special_tokens": False}).json()["tokens"]
             for t in ("yes it is", "no")]
    labels = {"label_token_ids": [11, 22]}
    text = ok(api, {"query": "Is it a cat?", "items": ["yes it is", "no"], **labels})
    ids = ok(api, {"query": tok, "items": items, **labels})
    assert text["data"] == ids["data"] and text["usage"] == ids["usage"]
    assert text["usage"]["prompt_tokens"] == 2 * len(tok) + sum(map(len, items))
    # mixed forms: a text query with id items, and the other way round
    assert ok(api, {"query": tok, "items": ["yes it is", "no"], **labels})["data"] == text["data"]
    assert ok(api, {"query": "Is it a cat?", "items": items, **labels})["data"] == text["data"]


def test_a_real_tokenizer_adds_special_tokens_to_the_query_only(app_client, hub):
    from support.tokenizer_hub import MODEL
    c = app_client("--tokenizers-cache-dir", os.path.join(hub, "hub"), model=MODEL)
    tok = c.post("/tokenize", json={"prompt": "Hello there"}).json()["tokens"]
    item = c.post("/tokenize", json={"prompt": "how are you", "add_special_tokens": False}).json()["tokens"]
    assert tok[0] == 1                                                   # <s>
    labels = {"label_token_ids": [10, 20]}
    out = ok(c, {"model": MODEL, "query": "Hello there", "items": ["how are you"], **labels})
    assert out["usage"]["prompt_tokens"] == len(tok) + len(item)
    assert out["data"] == ok(c, {"query": tok, "items": [item], **labels})["data"]
    bare = ok(c, {"query": "Hello there", "items": ["how are you"], "add_special_tokens": False, **labels})
    assert bare["usage"]["prompt_tokens"] == len(tok) - 1 + len(item)
    # the tokenizer's vocabulary (its config.json has no vocab_size): 360 ids with the special ones
    vocab = c.sim.tokenizer.vocab_size
    assert vocab == 360
    error(post(c, {"query": "a", "items": ["b"], "label_token_ids": [5, 360, 400]}), 400,
          "label_token_id 360 is out of vocabulary range [0, 360). Please provide valid token IDs.")
    assert post(c, {"query": [5, 359], "items": [[1]], "label_token_ids": [359]}).status_code == 200
    error(post(c, {"query": [5, 360], "items": [[1]], "label_token_ids": [5]}), 400,
          "Token id 360 is out of vocabulary")


def test_prompts_are_cut_to_the_context_keeping_their_start(app_client):
    c = app_client("--max-model-len", "8")
    labels = {"label_token_ids": [3, 4], "apply_softmax": False}
    out = ok(c, {"query": list(range(10, 20)), "items": [[1], [2, 3]], **labels})
    assert out["usage"]["prompt_tokens"] == 2 * 7                 # max_model_len - 1 each: the items are cut off
    assert [d["score"] for d in out["data"]] == [raw(list(range(10, 17)), 3)] * 2
    out = ok(c, {"query": list(range(10, 20)), "items": [[1], [2, 3]], "item_first": True, **labels})
    assert [d["score"] for d in out["data"]] == [raw([1, *range(10, 16)], 3), raw([2, 3, *range(10, 15)], 3)]


def test_model_lora_and_request_ids(app_client):
    c = app_client("--lora-modules", "my-lora=/tmp/lora", "--max-loras", "1")
    assert ok(c, {**BODY, "model": "test-model"})["model"] == "test-model"
    assert ok(c, {**BODY, "model": None})["model"] == "test-model"
    assert ok(c, {**BODY, "model": "my-lora"})["model"] == "my-lora"
    assert ok(c, {**BODY, "request_id": "abc"})["id"] == "generative-scoring-abc"
    assert ok(c, {**BODY, "request_id": "abc"}, headers={"X-Request-Id": "hdr"})["id"] == "generative-scoring-hdr"
    error(post(c, {**BODY, "model": "other"}), 404, "The model `other` does not exist.", "model")
    assert ok(c, {**BODY, "cache_salt": "salt", "priority": 0, "unknown": 1})["data"] == ok(c, BODY)["data"]


# ---- validation ------------------------------------------------------------------------------------

class VllmRequest(pydantic.BaseModel):
    """vLLM 0.34's GenerativeScoringRequest fields (generate/generative_scoring/serving.py)."""
    model_config = pydantic.ConfigDict(extra="allow")
    model: str | None = None
    query: str | list[int]
    items: list[str] | list[list[int]]
    label_token_ids: list[int]
    apply_softmax: bool = True
    item_first: bool = False
    add_special_tokens: bool = True
    cache_salt: str | None = None
    priority: int = pydantic.Field(default=0, ge=-(2 ** 63), le=2 ** 63 - 1)
    request_id: str = "x"


def vllm_validation_error(body: dict) -> tuple[str, str] | None:
    """``(message, param)`` of vLLM's validation handler for ``body``, or None when it passes."""
    return pydantic_400(VllmRequest, body)


VALID = {"query": "q", "items": ["a"], "label_token_ids": [1]}
TYPE_ERRORS = [
    {}, {"query": "q"}, {"query": None, "items": None, "label_token_ids": None},
    {"query": 5, "items": "x", "label_token_ids": [1, "2", 3.0, True, 4.5, "x", None]},
    {"query": [1, "a", 2.5, "7"], "items": ["a", [1]], "label_token_ids": []},
    {"query": {"a": 1}, "items": [[1, "z"], "b", True], "label_token_ids": {"a": 1}},
    {**VALID, "apply_softmax": None, "item_first": "maybe", "add_special_tokens": 2},
    {**VALID, "apply_softmax": "yes", "item_first": 1.5, "add_special_tokens": "off"},
    {**VALID, "model": 5, "priority": 2 ** 63, "request_id": 5},
    {**VALID, "priority": -(2 ** 63), "request_id": None},
    {**VALID, "priority": None},
    {**VALID, "priority": "1.5"},
    {**VALID, "label_token_ids": ["x"] * 12},
    {**VALID, "query": ["a" * 300]},
    {**VALID, "model": ["a"], "items": [{"a": 1}]},
]


def test_random_bodies_are_read_as_pydantic_reads_them():
    """Bodies of random JSON values in every field: the same errors (or none) as vLLM's model."""
    import random
    from generation.errors import InvalidParam
    from schemas.generative_scoring import load_generative_scoring
    rng = random.Random(7)
    atoms = [None, True, False, 0, 1, 2, -1, 0.0, 1.0, 1.5, 1000.0, -0.0, "1", "a", "yes", "Off", "", " 3 ", "3.0",
             "1_0", "+2", "1e2", [], {}, {"a": 1}, 2 ** 63, 2 ** 64 - 1, -(2 ** 63), 1e20]

    def value(depth=0):
        if depth < 2 and rng.random() < 0.3:
            return [value(depth + 1) for _ in range(rng.randint(0, 3))]
        return rng.choice(atoms)
    names = ["model", "query", "items", "label_token_ids", "apply_softmax", "item_first", "add_special_tokens",
             "priority", "request_id"]
    for _ in range(1000):
        body = {name: value() for name in names if rng.random() < 0.6}
        try:
            load_generative_scoring(body)
            got = None
        except InvalidParam as e:
            got = (e.message, e.param)
        assert got == vllm_validation_error(body), body


@pytest.mark.parametrize("body", TYPE_ERRORS)
def test_type_errors_are_pydantics_in_vllms_words(api, body):
    expected = vllm_validation_error(body)
    assert expected is not None
    message, param = expected
    error(post(api, body), 400, message, param)


def test_integers_past_int64(api):
    """orjson reads a JSON integer past 64 bits as a float; vLLM's ``json.loads`` keeps it an int,
    and so does the simulator now (generation.adapters.wide_ints): pydantic's range error with
    the literal's own digits.  A float literal past int64 is pydantic's ``int_parsing_size``."""
    r = post(api, {**VALID, "priority": 2 ** 63})                  # an int to orjson: pydantic's words
    error(r, 400, vllm_validation_error({**VALID, "priority": 2 ** 63})[0], "body.priority")
    for big in (-(2 ** 63) - 1, 2 ** 64, 123456789012345678901234567890, 1e30):
        r = post(api, {**VALID, "priority": big})
        assert r.status_code == 400 and r.json()["error"]["param"] == "body.priority"
        assert r.json()["error"]["message"] == vllm_validation_error({**VALID, "priority": big})[0]


@pytest.mark.parametrize("body", [
    {**VALID, "apply_softmax": "yes", "item_first": 1, "add_special_tokens": "off"},
    {**VALID, "items": [[1], [2.0], ["3"], [True]], "query": [False, "12", 3.0]},
    {**VALID, "label_token_ids": ["5", 6.0, True], "priority": "0", "model": None, "cache_salt": None},
    {**VALID, "items": []}])
def test_lax_values_pydantic_takes_are_taken(api, body):
    assert vllm_validation_error(body) is None
    r = post(api, body)
    if body["items"]:
        assert r.status_code == 200, r.text
    else:
        error(r, 400, "items must contain at least one item.")


def test_lax_values_read_as_pydantic_reads_them(api):
    assert ok(api, {"query": ["1", 2.0, True], "items": [["4"]], "label_token_ids": ["100", 200.0]})["data"] == \
        ok(api, {"query": [1, 2, 1], "items": [[4]], "label_token_ids": [100, 200]})["data"]
    assert scores(api, {**BODY, "apply_softmax": "no"}) == scores(api, {**BODY, "apply_softmax": False})
    assert ok(api, {"query": [1], "items": [[2]], "label_token_ids": [3], "item_first": "true"})["usage"][
        "prompt_tokens"] == 2


def test_cache_salt_is_checked_before_the_fields(api):
    message = "Parameter 'cache_salt' must be a non-empty string if provided. (parameter=cache_salt)"
    for salt in ("", 5, ["a"]):
        error(post(api, {"cache_salt": salt}), 400, message, "cache_salt")     # before the missing fields
    error(post(api, {**VALID, "cache_salt": "a/b"}), 400,
          "Parameter 'cache_salt' must be at most 128 characters and must not contain '@', '/', '\\\\', or NUL. "
          "(parameter=cache_salt)", "cache_salt")
    error(post(api, {**VALID, "cache_salt": "x" * 129}), 400,
          "Parameter 'cache_salt' must be at most 128 characters and must not contain '@', '/', '\\\\', or NUL. "
          "(parameter=cache_salt)", "cache_salt")


def test_serving_checks_in_vllms_order(api):
    out_of_vocab = "label_token_id {} is out of vocabulary range [0, 4294967296). Please provide valid token IDs."
    # labels first (the first bad one), then an empty label list, then empty items
    error(post(api, {"query": "q", "items": [], "label_token_ids": [1, -3, 2 ** 32]}), 400, out_of_vocab.format(-3))
    error(post(api, {"query": "q", "items": [], "label_token_ids": [2 ** 32, -3]}), 400, out_of_vocab.format(2 ** 32))
    error(post(api, {"query": "q", "items": [], "label_token_ids": []}), 400,
          "label_token_ids must contain at least one token ID.")
    error(post(api, {"query": "q", "items": [], "label_token_ids": [1]}), 400, "items must contain at least one item.")
    # the model before them all
    error(post(api, {"model": "x", "query": "q", "items": [], "label_token_ids": [-1]}), 404,
          "The model `x` does not exist.", "model")
    # then the engine's checks: logprobs against --max-logprobs, each prompt
    error(post(api, {"query": [], "items": [[1], []], "label_token_ids": list(range(21))}), 400,
          "Requested sample logprobs of 21, which is greater than max allowed: 20 (parameter=logprobs, value=21)",
          "logprobs")
    error(post(api, {"query": [], "items": [[1], []], "label_token_ids": [1], "priority": 2}), 400,
          "The decoder prompt cannot be empty")          # a priority is no error (vLLM 0.34's FCFS ignores it)
    error(post(api, {"query": [], "items": [[1], [], [-5]], "label_token_ids": [1]}), 400,
          "The decoder prompt cannot be empty")
    error(post(api, {"query": "", "items": [""], "label_token_ids": [1]}), 400, "The decoder prompt cannot be empty")
    error(post(api, {"query": [3, 2 ** 32, -1, 2 ** 40], "items": [[1]], "label_token_ids": [1]}), 400,
          "Token id -1 is out of vocabulary")
    error(post(api, {"query": [3], "items": [[1], [2 ** 32, 2 ** 33]], "label_token_ids": [1]}), 400,
          "Token id 8589934592 is out of vocabulary")
    assert api.sim.running == 0 and not api.sim.waiting


def test_logprob_token_ids_bound_without_a_logprobs_cap(app_client):
    c = app_client("--max-logprobs", "-1")
    assert len(ok(c, {"query": [1], "items": [[2]], "label_token_ids": list(range(128))})["data"]) == 1
    error(post(c, {"query": [1], "items": [[2]], "label_token_ids": list(range(129))}), 400,
          "Requested logprob_token_ids of length 129, which is greater than max allowed: 128 "
          "(parameter=logprob_token_ids, value=129)", "logprob_token_ids")


def test_a_priority_with_priority_scheduling(app_client):
    c = app_client("--scheduling-policy", "priority")
    assert ok(c, {**BODY, "priority": -4})["data"] == ok(c, BODY)["data"]


def test_tokens_only_server_has_no_tokenizer(app_client):
    c = app_client("--tokens-only")
    error(post(c, BODY), 400, "Tokenizer not available. Cannot process generative scoring request.")
    error(post(c, {**BODY, "model": "x"}), 404, "The model `x` does not exist.", "model")


def test_body_must_be_a_json_object(api):
    error(api.post(PATH, content=b"[1]", headers={"Content-Type": "application/json"}), 400,
          "1 validation error:\n  {'type': 'model_attributes_type', 'loc': 'body', 'msg': 'Input should be a valid "
          "dictionary or object to extract fields from', 'input': '<list of 1 items>'}", "body")
    r = api.post(PATH, content=b'{"query": "q"}', headers={"Content-Type": "text/plain"})
    assert r.status_code == 400
    assert api.get(PATH).status_code == 405


def test_work_and_size_are_bounded_before_anything_runs(app_client):
    c = app_client("--max-request-work", "100")
    # the items' prompt tokens (51 + 51) + 2 items x (1 + 3 labels)
    body = {"query": list(range(50)), "items": [[1], [2]], "label_token_ids": [1, 2, 3]}
    error(post(c, body), 400,
          "This request asks for 110 output tokens and logprob alternatives (items' prompt tokens + items x "
          "(1 + label_token_ids)), more than the 100 one request may ask (--max-request-work).", "items")
    assert post(c, {**body, "query": list(range(40))}).status_code == 200      # 82 + 8 = 90
    q = app_client("--max-num-seqs", "1", "--max-waiting-queue-length", "1")
    error(post(q, {"query": [1], "items": [[2], [3], [4]], "label_token_ids": [1]}), 429,
          "Failed to enqueue request, waiting requests queue is full")
    assert post(q, {"query": [1], "items": [[2], [3]], "label_token_ids": [1]}).status_code == 200
    assert q.sim.running == 0 and not q.sim.waiting


# ---- the engine --------------------------------------------------------------------------------------

def test_each_item_is_a_read_on_the_engine(app_client):
    c = app_client("--time-to-first-token", "0")
    out = ok(c, {"query": [1, 2, 3], "items": [[4], [5, 6], [7, 8, 9]], "label_token_ids": [1, 2]})
    assert out["usage"] == {"prompt_tokens": 4 + 5 + 6, "total_tokens": 18, "completion_tokens": 3,
                            "completion_tokens_details": None}
    assert metric(scrape(c), "vllm:prompt_tokens_total") == 15
    check_label_reads(app_client, PATH, {"query": [1], "items": [[2], [3], [4]], "label_token_ids": [1]},
                      {"query": [1], "items": [[2], [3]], "label_token_ids": [1]})


def test_step_mode_runs_each_item_through_the_engine(app_client):
    c = app_client(*STEP, "--max-model-len", "2048", model=LLAMA)
    body = {"query": list(range(100, 200)), "items": [[1, 2, 3], [4, 5]], "label_token_ids": [100, 200]}
    first = ok(c, body)
    assert first["usage"] == {"prompt_tokens": 103 + 102, "total_tokens": 207, "completion_tokens": 2,
                              "completion_tokens_details": None}
    assert first["data"] == ok(app_client(), body)["data"]       # the values do not depend on the latency model
    m = scrape(c)
    assert metric(m, "vllm:request_success_total", finished_reason="length") == 2
    assert metric(m, "vllm:generation_tokens_total") == 2
    assert metric(m, "vllm:prompt_tokens_total") == 205
    first_hits = metric(m, "vllm:prefix_cache_hits_total")
    assert first_hits in (0, 64)        # the second item finds the query's first block if scheduled after the first
    ttft = metric(m, "vllm:time_to_first_token_seconds_sum")
    assert ttft >= 2 * c.sim.config.step.step_time.frontend_time()
    again = ok(c, body)
    assert again["data"] == first["data"]
    m = scrape(c)
    assert metric(m, "vllm:prefix_cache_hits_total") == first_hits + 2 * 64    # each prompt's full block cached
    assert metric(m, "vllm:kv_cache_usage_perc") == 0.0
    assert metric(m, "vllm:request_success_total", finished_reason="length") == 4


# ---- the route ------------------------------------------------------------------------------------

def test_a_pooling_model_has_no_such_route(app_client):
    for kind in ("embed", "score"):
        c = app_client("--runner", "pooling", "--convert", kind)
        r = post(c, BODY)
        assert r.status_code == 404 and r.json() == {"detail": "Not Found"}
        assert PATH not in c.get("/openapi.json").json()["paths"]


def test_the_route_is_an_inference_route(app_client):
    """Its OpenAPI operation (``operationId`` ``create_generative_scoring_generative_scoring_post``),
    ``--api-key``, ``/load``."""
    check_inference_route(app_client, PATH, BODY, "create_generative_scoring")
