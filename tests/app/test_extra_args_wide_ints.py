"""Integers past 64 bits in the fields vLLM 0.34 puts in ``SamplingParams.extra_args``
(``vllm_xargs``, ``kv_transfer_params``, ``ec_transfer_params``): its ``_verify_extra_args``
refuses them (the engine's MessagePack carries -2**63 .. 2**64-1), where orjson had read such a
literal as a float and the request was served; a float literal (``1e30``) stays a float, as
``json.loads`` reads it."""
from __future__ import annotations

import io
import wave

import pytest

WIDE = "123456789012345678901234567890"
MESSAGE = "extra_args integers must be between -2**63 and 2**64 - 1. (parameter=extra_args)"
ROUTES = {
    "/v1/chat/completions": '{"model":"test-model","messages":[{"role":"user","content":"hi"}],"max_tokens":2%s}',
    "/v1/completions": '{"model":"test-model","prompt":"hi","max_tokens":2%s}',
    "/v1/responses": '{"model":"test-model","input":"hi","max_output_tokens":2%s}',
}


@pytest.fixture(scope="module")
def c(app_client):
    return app_client()


def post(c, path, extra):
    return c.post(path, content=ROUTES[path] % extra, headers={"content-type": "application/json"})


@pytest.mark.parametrize("path", list(ROUTES))
@pytest.mark.parametrize("extra", [
    f',"vllm_xargs":{{"a":{WIDE}}}', f',"vllm_xargs":{{"a":[1,-{WIDE}]}}',
    ',"vllm_xargs":{"a":18446744073709551616}', ',"vllm_xargs":{"a":-9223372036854775809}',
    f',"kv_transfer_params":{{"x":{{"y":[{WIDE}]}}}}', f',"ec_transfer_params":{{"x":{WIDE}}}',
])
def test_wide_integers_are_vllms_400(c, path, extra):
    r = post(c, path, extra)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["message"] == MESSAGE and r.json()["error"]["param"] == "extra_args"


@pytest.mark.parametrize("path", list(ROUTES))
@pytest.mark.parametrize("extra", [
    ',"vllm_xargs":{"a":1e30}', ',"vllm_xargs":{"a":18446744073709551615}',
    ',"vllm_xargs":{"a":-9223372036854775808}', ',"ec_transfer_params":{"x":1.5e300}',
])
def test_64_bit_integers_and_floats_are_served(c, path, extra):
    assert post(c, path, extra).status_code == 200


def _wav() -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000), w.writeframes(b"\0\0" * 1600)
    return buf.getvalue()


@pytest.mark.parametrize("xargs, status, needle", [
    (f'{{"a": {WIDE}}}', 400, MESSAGE),
    ('[1]', 400, "'type': 'dict_type', 'loc': 'body.vllm_xargs'"),
    ('{"a": null}', 400, "'loc': 'body.vllm_xargs.a'"),
    ('{"a": "x", "b": [1, 2.5, "s"]}', 200, None),
])
def test_transcription_vllm_xargs_is_typed_as_vllms(c, xargs, status, needle):
    """The form's ``vllm_xargs`` JSON is pydantic's ``dict[str, str | int | float | list[...]]``
    and ``extra_args`` in vLLM; the simulator had only checked it was JSON."""
    r = c.post("/v1/audio/transcriptions", files={"file": ("a.wav", _wav(), "audio/wav")},
               data={"model": "test-model", "vllm_xargs": xargs})
    assert r.status_code == status, r.text
    if needle:
        assert needle in r.json()["error"]["message"]


def test_a_body_is_read_exactly_once_for_its_extra_args_and_its_fields(c, monkeypatch):
    """The extra args' wide integers and a field's (``seed``) come from one exact re-read of the
    body (generation.adapters.wide_ints.make_exact): each had parsed it again."""
    import json
    loads, calls = json.loads, []

    def counted(raw, *a, **kw):
        calls.append(raw)
        return loads(raw, *a, **kw)
    monkeypatch.setattr(json, "loads", counted)
    body = ROUTES["/v1/chat/completions"] % f',"vllm_xargs":{{"a":{WIDE}}},"seed":-{WIDE}'
    r = c.post("/v1/chat/completions", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400 and WIDE in r.json()["error"]["message"]       # the seed's, digit for digit
    assert calls.count(body.encode()) == 1
