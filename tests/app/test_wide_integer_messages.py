"""JSON integers past 64 bits in a refused field are named digit for digit, as vLLM names them
(its ``json.loads`` keeps them ints, pydantic and its checks echo them): orjson reads such a
literal as a float, and the 400s named ``123456789012345677877719597056`` for
``123456789012345678901234567890`` (generation.adapters.wide_ints)."""
from __future__ import annotations

import json

import pytest

BIG = 123456789012345678901234567890
MSG = [{"role": "user", "content": "Hello there"}]
CHAT, COMPLETIONS, GENERATE, EMBED = "/v1/chat/completions", "/v1/completions", "/inference/v1/generate", "/v1/embeddings"


def refused(api, path, body: dict) -> str:
    r = api.post(path, content=json.dumps({"model": "test-model", **body}), headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text[:300]
    return r.json()["error"]["message"]


def pydantic_range(field: str, value: int) -> str:
    return ("1 validation error:\n  {'type': 'less_than_equal', 'loc': 'body.%s', 'msg': 'Input should be less than "
            "or equal to 9223372036854775807', 'input': '%d', 'ctx': {'le': 9223372036854775807}}" % (field, value))


@pytest.mark.parametrize("path,body", [(CHAT, {"messages": MSG}), (COMPLETIONS, {"prompt": "hi"})])
def test_seed_n_and_logprobs(api, path, body):
    assert refused(api, path, {**body, "seed": BIG}) == pydantic_range("seed", BIG)
    assert refused(api, path, {**body, "n": BIG}) == (
        f"n must be at most 16384, got {BIG}. To increase this limit, set the VLLM_MAX_N_SEQUENCES environment variable.")
    assert refused(api, path, {**body, "min_tokens": -BIG}) == f"min_tokens must be greater than or equal to 0, got -{BIG}."
    assert refused(api, path, {**body, "priority": BIG + 7}) == pydantic_range("priority", BIG + 7)


def test_generate_sampling_params(api):
    assert refused(api, GENERATE, {"token_ids": [1], "sampling_params": {"seed": BIG}}) == pydantic_range("seed", BIG)
    assert str(BIG) in refused(api, GENERATE, {"token_ids": [1], "sampling_params": {"n": BIG}})


def test_dimensions(api):
    assert refused(api, EMBED, {"input": "hi", "dimensions": BIG}).endswith(f"got {BIG}.")


def test_a_large_body_checked_off_the_hub_and_two_literals(api):
    """A body past 8 KiB is checked in the validation lane: the same exact digits; two literals
    that round to one float each keep their own."""
    text = "word " * 4000
    assert refused(api, CHAT, {"messages": [{"role": "user", "content": text}], "seed": BIG}) == \
        pydantic_range("seed", BIG)
    assert float(BIG) == float(BIG + 1)
    msg = refused(api, CHAT, {"messages": MSG, "seed": BIG, "priority": BIG + 1})
    assert f"'input': '{BIG}'" in msg, msg
    assert refused(api, CHAT, {"messages": MSG, "top_k": BIG, "priority": BIG + 1}) == \
        pydantic_range("priority", BIG + 1)


def test_a_float_literal_stays_a_float(api):
    """``1e30`` is a float to vLLM's parser too: pydantic's ``int_parsing_size``, not a range error."""
    assert refused(api, CHAT, {"messages": MSG, "seed": 1e30}) == (
        "1 validation error:\n  {'type': 'int_parsing_size', 'loc': 'body.seed', 'msg': 'Unable to parse input string "
        "as an integer, exceeded maximum size', 'input': '1e+30'}")
