"""A Responses API or audio stream the server aborts (``/inference/v1/abort_requests``,
``/checkpoint/prepare?mode=abort``) finishes as vLLM 0.34's instead of being cut off.

vLLM's ``OutputProcessor.abort_requests`` hands the request a last output with no new tokens and
``finish_reason`` ``abort``.  Responses (``responses/serving.py``, a simple context):
``_process_simple_streaming_events`` closes the item it was streaming with
``response_item_status("abort")`` (``completed``), ``responses_full_generator`` reports the
response ``completed`` (only ``length`` is ``incomplete`` there) with the items streamed and the
usage of the tokens streamed, and the terminal event is ``response.completed``; a background
response is stored so.  Speech to text (``speech_to_text/base/serving.py``
``_speech_to_text_stream_generator``): a chunk with empty text, ``finish_reason`` ``abort`` and
``stop_reason`` null for each cut request, then the usage chunk and ``[DONE]``.  Default (clock)
mode and step mode."""
from __future__ import annotations

import io
import json

import gevent
import numpy as np
import pytest
import soundfile as sf

from support import sse_events, until_streaming

DEV = {"VLLM_SERVER_DEV_MODE": "1"}
STORE = {"VLLM_ENABLE_RESPONSES_API_STORE": "1"}
STEP = ("--latency-calculator", "step", "--force-dummy-tokenizer")
CLOCK = ("--time-to-first-token", "100ms", "--inter-token-latency", "20ms")


def _flags(mode: str) -> tuple:
    return CLOCK if mode == "clock" else STEP


def _abort_by_id(c, *ids: str):
    """Abort by vLLM's external ids: a response's ``<response id>_0``, a transcription's
    ``transcribe-<id>`` (``-<k>`` per 30 s chunk when there are several)."""
    r = c.post("/inference/v1/abort_requests", json={"request_ids": list(ids)})
    assert (r.status_code, r.content) == (200, b"")


def _events(text: str) -> list:
    out = []
    for block in text.split("\n\n"):
        if block.startswith("event: "):
            name, data = block.split("\n", 1)
            d = json.loads(data[len("data: "):])
            assert d["type"] == name[len("event: "):]
            out.append(d)
    return out


def _responses(c, rid: str, **extra):
    body = {"model": "test-model", "input": "Hello there", "max_output_tokens": 900, "ignore_eos": True,
            "stream": True, "request_id": f"resp_{rid}", **extra}     # (the API's id: the body's, not the header's)
    return gevent.spawn(c.post, "/v1/responses", json=body)


def _check_response_stream(r, rid: str) -> list:
    """created, in_progress, the message's item and part, deltas, the done events (status
    completed), response.completed with status completed and the usage of the deltas."""
    assert r.status_code == 200, r.text
    events = _events(r.text)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    types = [e["type"] for e in events]
    assert types[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    deltas = events[4:-4]
    assert 1 <= len(deltas) < 900 and {e["type"] for e in deltas} == {"response.output_text.delta"}
    assert types[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    text = "".join(e["delta"] for e in deltas)
    assert events[-4]["text"] == text
    item = events[-2]["item"]
    assert item["status"] == "completed" and item["content"][0]["text"] == text
    final = events[-1]["response"]
    assert final["id"] == f"resp_{rid}"
    assert final["status"] == "completed" and final["incomplete_details"] is None
    # the streamed part's logprobs is vLLM's null (streaming_events.py emit_simple_content_done);
    # the response object's part has none without include (the specification's body)
    assert item["content"][0]["logprobs"] is None
    assert final["output"] == [{**item, "content": [{k: v for k, v in p.items() if k != "logprobs"}
                                                    for p in item["content"]]}]
    u = final["usage"]
    assert u["output_tokens"] == len(deltas) and u["total_tokens"] == u["input_tokens"] + len(deltas)
    return events


@pytest.mark.parametrize("mode", ["clock", "step"])
def test_abort_requests_ends_a_responses_stream_with_response_completed(app_client, mode):
    c = app_client(*_flags(mode))
    rid = f"rs-{mode}"
    job = _responses(c, rid)
    until_streaming(c, rid, 0.4)
    _abort_by_id(c, f"resp_{rid}_0")
    job.join(5)
    _check_response_stream(job.value, rid)
    assert c.sim.running == 0


@pytest.mark.parametrize("mode", ["clock", "step"])
def test_abort_requests_ends_a_background_responses_stream_and_stores_it_completed(app_client, mode):
    c = app_client(*_flags(mode), env=STORE)
    rid = f"rsb-{mode}"
    job = _responses(c, rid, background=True)
    until_streaming(c, rid, 0.4)
    _abort_by_id(c, f"resp_{rid}_0")
    job.join(5)
    events = _check_response_stream(job.value, rid)
    assert events[-1]["response"]["background"] is True
    stored = c.get(f"/v1/responses/resp_{rid}")
    assert stored.status_code == 200 and stored.json() == events[-1]["response"]
    assert c.sim.running == 0


@pytest.mark.parametrize("mode", ["clock", "step"])
def test_abort_requests_stores_a_background_response_completed_not_failed(app_client, mode):
    c = app_client(*_flags(mode), env=STORE)
    rid = f"rbn-{mode}"
    body = {"model": "test-model", "input": "Hello there", "max_output_tokens": 900, "ignore_eos": True,
            "background": True}
    r = c.post("/v1/responses", json={**body, "request_id": f"resp_{rid}"})
    assert r.status_code == 200 and r.json()["status"] == "queued"
    until_streaming(c, rid, 0.4)
    _abort_by_id(c, f"resp_{rid}_0")
    gevent.sleep(0.2)
    d = c.get(f"/v1/responses/resp_{rid}").json()
    assert d["status"] == "completed" and d["incomplete_details"] is None
    (item,) = d["output"]
    assert item["status"] == "completed" and item["content"][0]["text"]
    assert 1 <= d["usage"]["output_tokens"] < 900


@pytest.mark.parametrize("mode", ["clock", "step"])
def test_abort_requests_answers_a_non_streamed_response_completed(app_client, mode):
    """vLLM's responses_full_generator: a simple context's status is ``completed`` for ``abort``."""
    c = app_client(*_flags(mode))
    body = {"model": "test-model", "input": "Hello there", "max_output_tokens": 900, "ignore_eos": True}
    job = gevent.spawn(c.post, "/v1/responses", json={**body, "request_id": f"resp_rn-{mode}"})
    until_streaming(c, f"rn-{mode}", 0.4)
    _abort_by_id(c, f"resp_rn-{mode}_0")
    job.join(5)
    d = job.value.json()
    assert job.value.status_code == 200 and d["status"] == "completed" and d["incomplete_details"] is None
    (item,) = d["output"]
    assert item["status"] == "completed" and item["content"][0]["text"]
    assert 1 <= d["usage"]["output_tokens"] < 900


def test_a_responses_stream_aborted_in_its_reasoning_closes_the_reasoning_item_only(app_client):
    c = app_client(*CLOCK, "--reasoning-parser", "qwen3", "--reasoning-fraction", "0.9")
    job = _responses(c, "rr")
    gevent.sleep(0.5)
    _abort_by_id(c, "resp_rr_0")
    job.join(5)
    events = _events(job.value.text)
    types = [e["type"] for e in events]
    assert types[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    deltas = events[4:-4]
    assert deltas and {e["type"] for e in deltas} == {"response.reasoning_text.delta"}
    assert types[-4:] == ["response.reasoning_text.done", "response.content_part.done",
                          "response.output_item.done", "response.completed"]
    text = "".join(e["delta"] for e in deltas)
    assert events[-4]["text"] == text and events[-2]["item"]["status"] == "completed"
    final = events[-1]["response"]
    assert final["status"] == "completed"
    assert [i["type"] for i in final["output"]] == ["reasoning"]
    assert final["output"][0]["content"] == [{"type": "reasoning_text", "text": text}]


NOTES = {"type": "function", "name": "save_notes", "description": "Save notes",
         "parameters": {"type": "object", "properties": {"notes": {"type": "string", "maxLength": 4000}},
                        "required": ["notes"]}}


def test_a_responses_stream_aborted_in_a_function_call_closes_it_with_the_arguments_streamed(app_client):
    """vLLM's processor closes the open item, a function call too, with what it streamed."""
    c = app_client("--time-to-first-token", "100ms", "--inter-token-latency", "50ms")
    job = _responses(c, "rf", tools=[NOTES], tool_choice="required", max_output_tokens=400)
    gevent.sleep(0.6)
    _abort_by_id(c, "resp_rf_0")
    job.join(5)
    events = _events(job.value.text)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    types = [e["type"] for e in events]
    assert types[2] == "response.output_item.added" and events[2]["item"]["type"] == "function_call"
    assert types[-3:] == ["response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    args = "".join(e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta")
    assert args and events[-3]["arguments"] == args
    item = events[-2]["item"]
    assert (item["type"], item["status"], item["arguments"]) == ("function_call", "completed", args)
    final = events[-1]["response"]
    assert final["status"] == "completed" and final["output"] == [item]
    assert 1 <= final["usage"]["output_tokens"] < 400


@pytest.mark.parametrize("mode", ["clock", "step"])
def test_checkpoint_prepare_abort_ends_a_responses_stream_the_same_way(app_client, mode):
    c = app_client(*_flags(mode), "--enable-sleep-mode", env=DEV)
    job = _responses(c, f"cp-{mode}")
    until_streaming(c, f"cp-{mode}", 0.4)
    assert c.post("/checkpoint/prepare", params={"mode": "abort"}).json() == {"state": "prepared"}
    job.join(5)
    _check_response_stream(job.value, f"cp-{mode}")
    assert c.post("/checkpoint/restore").json() == {"state": "running"}


# ---- audio: speech to text --------------------------------------------------------------------------

def _wav(seconds: float, rate: int = 16000) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    buf = io.BytesIO()
    sf.write(buf, (0.2 * np.sin(2 * np.pi * 220.0 * t)).astype(np.float32), rate, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def _transcribe(c, rid: str, seconds: float, task: str = "transcriptions", stream: bool = True):
    data = {"model": "test-model", "language": "en"}
    if stream:
        data.update(stream="true", stream_include_usage="true")
    return gevent.spawn(c.post, f"/v1/audio/{task}", data=data, files={"file": ("a.wav", _wav(seconds), "audio/wav")},
                        headers={"X-Request-Id": rid})


def _check_audio_stream(r, n_requests: int = 1, obj: str = "transcription.chunk"):
    """Token chunks, then a closing chunk per cut request (empty text, ``abort``, null stop
    reason), the usage chunk (the tokens streamed) and [DONE]."""
    assert r.status_code == 200, r.text
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    *chunks, usage = events[:-1]
    assert {ch["object"] for ch in chunks + [usage]} == {obj}
    ends = [ch for ch in chunks if ch["choices"][0].get("finish_reason") is not None]
    aborts = [ch for ch in ends if ch["choices"][0]["finish_reason"] == "abort"]
    assert aborts and chunks[-1] is aborts[-1]
    for a in aborts:
        assert a["choices"] == [{"delta": {"content": ""}, "finish_reason": "abort", "stop_reason": None}]
    tokens = [ch for ch in chunks if ch["choices"][0].get("finish_reason") is None]
    assert len(ends) == n_requests
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == len(tokens) + len(ends) - len(aborts)
    return chunks


@pytest.mark.parametrize("mode", ["clock", "step"])
@pytest.mark.parametrize("task", ["transcriptions", "translations"])
def test_abort_requests_ends_a_transcription_stream_with_an_abort_chunk(app_client, mode, task):
    c = app_client(*_flags(mode))
    rid = f"au-{task}-{mode}"
    job = _transcribe(c, rid, 2.0, task)
    gevent.sleep(0.3)
    _abort_by_id(c, ("transcribe-" if task == "transcriptions" else "translate-") + rid)
    job.join(5)
    chunks = _check_audio_stream(job.value, obj=task[:-1] + ".chunk")
    assert {ch["id"] for ch in chunks} == {("transcribe-" if task == "transcriptions" else "translate-") + rid}
    assert c.sim.running == 0



@pytest.mark.parametrize("mode", ["clock", "step"])
def test_each_cut_audio_chunk_request_ends_with_its_abort_chunk(app_client, mode):
    """35 s of audio: two 30 s chunks, two engine requests running together, read one after the
    other (vLLM's list of generators): the first's tokens and abort chunk, then the tokens the
    second made (its first with the separator) and its abort chunk."""
    c = app_client(*_flags(mode))
    job = _transcribe(c, f"au2-{mode}", 35.0)
    gevent.sleep(0.3)
    _abort_by_id(c, f"transcribe-au2-{mode}-0", f"transcribe-au2-{mode}-1")
    job.join(5)
    chunks = _check_audio_stream(job.value, n_requests=2)
    first = next(i for i, ch in enumerate(chunks) if ch["choices"][0].get("finish_reason"))
    assert chunks[first]["choices"][0]["finish_reason"] == "abort"
    second = chunks[first + 1:]
    assert second[-1]["choices"][0]["finish_reason"] == "abort"
    if len(second) > 1:                         # it made tokens before the abort: separator first
        assert second[0]["choices"][0]["delta"]["content"].startswith(" ")
    assert c.sim.running == 0


@pytest.mark.parametrize("mode", ["clock", "step"])
def test_abort_requests_answers_a_non_streamed_transcription_with_what_it_made(app_client, mode):
    c = app_client(*_flags(mode))
    full = _transcribe(c, f"aun-full-{mode}", 2.0, stream=False)
    full.join(10)
    whole = full.value.json()["text"]
    job = _transcribe(c, f"aun-{mode}", 2.0, stream=False)
    gevent.sleep(0.3)
    _abort_by_id(c, f"transcribe-aun-{mode}")
    job.join(5)
    r = job.value
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["usage"] == {"type": "duration", "seconds": 2}
    assert d["text"] and whole.startswith(d["text"]) and len(d["text"]) < len(whole)


@pytest.mark.parametrize("mode", ["clock", "step"])
def test_checkpoint_prepare_abort_ends_a_transcription_stream_the_same_way(app_client, mode):
    c = app_client(*_flags(mode), "--enable-sleep-mode", env=DEV)
    job = _transcribe(c, f"aucp-{mode}", 2.0)
    gevent.sleep(0.3)
    assert c.post("/checkpoint/prepare", params={"mode": "abort"}).json() == {"state": "prepared"}
    job.join(5)
    _check_audio_stream(job.value)
    assert c.post("/checkpoint/restore").json() == {"state": "running"}
