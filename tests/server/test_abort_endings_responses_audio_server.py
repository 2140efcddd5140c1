"""A real server's Responses API and transcription streams aborted by ``abort_requests``: emitted
from the hub (server/sse_emitter.py, token schedules) or, for a background response, from its own
greenlet, they must resume their bodies to write vLLM 0.34's ending (Responses: the item closed
``completed``, ``response.completed``; transcription: the ``abort`` chunk, usage, ``[DONE]``).
Clock and step mode."""
from __future__ import annotations

import io
import json

import httpx
import numpy as np
import pytest
import soundfile as sf

from support import posted_then_aborted, sse_events

STORE = {"VLLM_ENABLE_RESPONSES_API_STORE": "1"}


@pytest.fixture(scope="module", params=["clock", "step"])
def server_mode(request, sim_server, tmp_path_factory):
    # 40 ms a token (clock) or a step (step mode, the profile's fixed step cost): the audio's two
    # chunks' requests (50 and 88 tokens) generate for 2 s or more, so the abort at 0.5 s finds
    # them running even when a loaded machine delays it (at the default step time of ~8 ms they
    # ended by 0.45 and 0.7 s, and the test failed under load)
    if request.param == "clock":
        return sim_server("--time-to-first-token", "50ms", "--inter-token-latency", "40ms", env=STORE)
    slow = tmp_path_factory.mktemp("profile") / "slow_steps.yaml"
    slow.write_text("t0: 40ms\n")
    return sim_server("--latency-calculator", "step", "--force-dummy-tokenizer", "--step-time-profile", str(slow),
                      env=STORE)


def _wav(seconds: float, rate: int = 16000) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    buf = io.BytesIO()
    sf.write(buf, (0.2 * np.sin(2 * np.pi * 220.0 * t)).astype(np.float32), rate, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def _events(text: str) -> list:
    out = []
    for block in text.split("\n\n"):
        if block.startswith("event: "):
            out.append(json.loads(block.split("\n", 1)[1][len("data: "):]))
    return out


def test_aborted_responses_and_transcription_streams_end_as_vllm_ends_them(server_mode):
    base = server_mode
    body = {"model": "test-model", "input": "hi", "max_output_tokens": 1000, "ignore_eos": True, "stream": True}
    # (a response's id is its body's request_id, not the X-Request-Id header: vLLM's)
    jobs = {"resp-s": {"path": "/v1/responses", "json": {**body, "request_id": "resp_resp-s"}},
            "resp-b": {"path": "/v1/responses", "json": {**body, "background": True, "request_id": "resp_resp-b"}},
            "audio-s": {"path": "/v1/audio/transcriptions", "files": {"file": ("a.wav", _wav(35.0), "audio/wav")},
                        "data": {"model": "test-model", "language": "en", "stream": "true",
                                 "stream_include_usage": "true"}}}
    out = posted_then_aborted(base, jobs, 0.5, sequences=4)     # two responses, the audio's two chunks
    for rid in ("resp-s", "resp-b"):
        r = out[rid]
        assert r.status_code == 200, rid
        events = _events(r.text)
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
        deltas = [e for e in events if e["type"] == "response.output_text.delta"]
        assert [e["type"] for e in events[-4:]] == ["response.output_text.done", "response.content_part.done",
                                                     "response.output_item.done", "response.completed"], rid
        final = events[-1]["response"]
        assert final["status"] == "completed" and final["output"][0]["status"] == "completed"
        assert final["usage"]["output_tokens"] == len(deltas) >= 1
        assert events[-4]["text"] == "".join(e["delta"] for e in deltas)
    stored = httpx.get(base + "/v1/responses/resp_resp-b", timeout=10).json()
    assert stored["status"] == "completed" and stored == _events(out["resp-b"].text)[-1]["response"]
    r = out["audio-s"]
    assert r.status_code == 200 and r.text.endswith("data: [DONE]\n\n")
    *chunks, use, done = sse_events(r.text)
    ends = [ch["choices"][0] for ch in chunks if ch["choices"][0].get("finish_reason")]
    abort = {"delta": {"content": ""}, "finish_reason": "abort", "stop_reason": None}
    assert len(ends) == 2 and ends[-1] == abort, ends    # (the first 30 s chunk may have finished first)
    assert ends[0] == abort or ends[0]["finish_reason"] == "stop"
    assert use["usage"]["completion_tokens"] == len(chunks) - ends.count(abort)
