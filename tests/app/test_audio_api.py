"""The audio APIs through the openai SDK (in-process): vLLM's transcriptions and translations,
the reference's speech (``generation.adapters.audio``)."""
from __future__ import annotations

import io
import json
import math

import numpy as np
import openai
import pytest
import soundfile as sf

from support import TIMING_PATHS, metric, scrape, vllm_chunk_lengths

# the openai SDK marks audio.translations deprecated (OpenAI's own API); vLLM serves the route
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

MODEL = "test-model"


def wav(seconds: float, rate: int = 16000, freq: float = 220.0) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    buf = io.BytesIO()
    sf.write(buf, (0.2 * np.sin(2 * np.pi * freq * t)).astype(np.float32), rate, format="WAV", subtype="PCM_16")
    return buf.getvalue()


@pytest.fixture(scope="module")
def c(app_client):
    return app_client("--seed", "7")


@pytest.fixture(scope="module")
def sdk(c):
    return c.openai()


def upload(data: bytes, name: str = "a.wav"):
    return (name, data, "audio/wav")


def test_transcription_json_text_and_greedy_determinism(sdk):
    a, b = wav(2.5), wav(2.5, freq=330.0)
    one = sdk.audio.transcriptions.create(model=MODEL, file=upload(a), language="en")
    assert one.text and one.usage.type == "duration" and one.usage.seconds == 3      # ceil(2.5)
    again = sdk.audio.transcriptions.create(model=MODEL, file=upload(a))           # temperature 0: greedy
    assert again.text == one.text
    other = sdk.audio.transcriptions.create(model=MODEL, file=upload(b))
    assert other.text != one.text
    # vLLM answers response_format "text" with the same JSON body
    text = sdk.audio.transcriptions.create(model=MODEL, file=upload(a), response_format="text")
    assert json.loads(text) == {"text": one.text, "usage": {"type": "duration", "seconds": 3}}


def test_transcription_stream_matches_and_counts_audio_tokens(sdk, c):
    a = wav(1.0, freq=440.0)
    whole = sdk.audio.transcriptions.create(model=MODEL, file=upload(a), language="en")
    before = metric(scrape(c), "vllm:prompt_tokens_total") or 0
    stream = sdk.audio.transcriptions.create(model=MODEL, file=upload(a), language="en", stream=True,
                                             extra_body={"stream_include_usage": True,
                                                         "stream_continuous_usage_stats": True})
    chunks = list(stream)
    text = "".join(ch.choices[0]["delta"]["content"] for ch in chunks if ch.choices)
    assert text == whole.text
    assert chunks[0].object == "transcription.chunk" and chunks[0].id.startswith("transcribe-")
    assert chunks[-2].choices[0]["finish_reason"] in ("stop", "length")
    usage = chunks[-1].usage
    assert chunks[-1].choices == []
    # vLLM: the decoder prompt (4 special tokens) plus ceil(1.0 s * 16000 / 160) audio tokens
    assert usage["prompt_tokens"] == 4 + 100
    assert usage["completion_tokens"] == len(chunks) - 1
    assert chunks[0].usage["completion_tokens"] == 1                    # continuous usage
    # the engine counts the decoder prompt, as vLLM's prompt-token metric does
    assert metric(scrape(c), "vllm:prompt_tokens_total") - before == 4


def test_transcription_stream_interval_groups_the_deltas(app_client, sdk):
    """--stream-interval 3: the first token alone, then 3 a chunk (vLLM's output processor), the
    running usage counting them all."""
    a = wav(1.0, freq=440.0)
    whole = sdk.audio.transcriptions.create(model=MODEL, file=upload(a), language="en")
    grouped = app_client("--seed", "7", "--stream-interval", "3").openai()
    chunks = [ch for ch in grouped.audio.transcriptions.create(
        model=MODEL, file=upload(a), language="en", stream=True,
        extra_body={"stream_include_usage": True, "stream_continuous_usage_stats": True}) if ch.choices]
    assert "".join(ch.choices[0]["delta"]["content"] for ch in chunks) == whole.text
    counts = [ch.usage["completion_tokens"] for ch in chunks]
    assert counts[:2] == [1, 4] and all(b - a == 3 for a, b in zip(counts[1:-1], counts[2:-1]))
    assert 1 <= counts[-1] - counts[-2] <= 3 and chunks[-1].choices[0]["finish_reason"] in ("stop", "length")


@pytest.mark.parametrize("seconds, flags", [(1.0, ()), (1.0, ("--stream-interval", "3")), (35.0, ())],
                         ids=["one chunk", "stream interval", "two chunks"])
def test_transcription_stream_does_not_depend_on_the_timing_path(app_client, seconds, flags):
    """One chunk's tokens go to the hub as a token schedule (issue 32), two chunks' run per token:
    the chunks are those of the stream that waits for nothing, and of one waiting per token."""
    a = wav(seconds, freq=440.0)
    runs = {}
    for timing, timing_flags in TIMING_PATHS.items():
        stream = app_client("--seed", "7", *flags, *timing_flags).openai().audio.transcriptions.create(
            model=MODEL, file=upload(a), language="en", stream=True,
            extra_body={"stream_include_usage": True, "stream_continuous_usage_stats": True})
        runs[timing] = [ch.model_dump(exclude={"id", "created"}) for ch in stream]
    assert runs["schedule from the first token"] == runs["all at once"] == runs["deadline per token"]
    assert len(runs["all at once"]) >= 4


@pytest.mark.parametrize("fields, message, param", [
    ({"language": "hh"}, "Unsupported language: 'hh'.", None),
    ({"response_format": "srt"}, "Currently only support response_format: `text`, `json`, `verbose_json` or "
                                 "`diarized_json`", None),
    ({"response_format": "diarized_json"}, "Currently do not support diarized_json for test-model", None),
    ({"response_format": "verbose_json", "stream": "true"}, "verbose_json format doesn't support streaming case",
     None),
    ({"stream": "true", "use_beam_search": "true"}, "Streaming is not currently supported with beam search", None),
    ({"stream_include_usage": "true"}, "Stream options can only be defined when `stream=True`. "
                                       "(parameter=stream_include_usage)", "stream_include_usage"),
    ({"response_format": "xml"}, "1 validation error:\n  {'type': 'literal_error', 'loc': 'body.response_format', "
                                 "'msg': \"Input should be 'json', 'text', 'srt', 'verbose_json', 'vtt' or "
                                 "'diarized_json'\", 'input': 'xml', 'ctx': {'expected': \"'json', 'text', 'srt', "
                                 "'verbose_json', 'vtt' or 'diarized_json'\"}}", "body.response_format"),
    ({"temperature": "hot"}, "1 validation error:", "body.temperature"),
    # pydantic reads form strings without stripping a boolean ("1" is one, " true" is not)
    ({"stream": " true"}, "1 validation error:\n  {'type': 'bool_parsing', 'loc': 'body.stream', 'msg': 'Input "
                          "should be a valid boolean, unable to interpret input', 'input': ' true'}", "body.stream"),
    ({"n": "1.5"}, "1 validation error:\n  {'type': 'int_parsing', 'loc': 'body.n', 'msg': 'Input should be a "
                   "valid integer, unable to parse string as an integer', 'input': '1.5'}", "body.n"),
    # vLLM builds SamplingParams from the form: chat's range checks (a fuzzing helper found them unchecked);
    # its VLLMValidationError names a parameter for temperature and top_p only
    ({"temperature": "-1"}, "temperature must be non-negative, got -1.0. (parameter=temperature, value=-1.0)",
     "temperature"),
    ({"top_p": "5"}, "top_p must be in (0, 1], got 5.0. (parameter=top_p, value=5.0)", "top_p"),
    ({"top_k": "-2"}, "top_k must be 0 (disable), or at least 1, got -2.", None),
    ({"min_p": "3"}, "min_p must be in [0, 1], got 3.0.", None),
    ({"repetition_penalty": "0"}, "repetition_penalty must be greater than zero, got 0.0.", None),
    ({"frequency_penalty": "99"}, "frequency_penalty must be in [-2, 2], got 99.0.", None),
])
def test_transcription_errors_are_vllms(c, fields, message, param):
    r = c.post("/v1/audio/transcriptions", files={"file": upload(wav(0.5))}, data=fields)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["message"].startswith(message) and err["param"] == param, err


def test_uploads_that_are_not_audio(c, sdk):
    with pytest.raises(openai.BadRequestError) as e:
        sdk.audio.transcriptions.create(model=MODEL, file=("invalid.wav", b"not a valid audio file", "audio/wav"))
    assert e.value.status_code == 400 and e.value.body["message"].startswith("Invalid or corrupted audio data.")
    assert e.value.body["param"] is None           # load_audio's ValueError (vLLM 0.34 multimodal/media/audio.py)
    r = c.post("/v1/audio/transcriptions", files={"x": upload(wav(0.5))})          # no file part: pydantic's
    assert r.status_code == 400 and r.json()["error"]["param"] == "body.file"
    r = c.post("/v1/audio/transcriptions", files={"model": (None, MODEL)}, data={"file": "a.wav"})
    assert r.status_code == 422 and r.json()["error"]["message"] == \
        "Expected 'file' to be a file-like object, not 'str'."
    r = c.post("/v1/audio/transcriptions", files={"file": upload(wav(0.5))}, headers={"Origin": "http://evil.example"})
    assert r.status_code == 400                                                    # a cross-site form post
    r = c.post("/v1/audio/transcriptions", files={"file": upload(wav(0.5))}, data={"model": "nope"})
    assert r.status_code == 404


def cuts(seconds: float) -> list:
    """Where vLLM's split_audio cuts :func:`wav`'s 16 kHz audio (seconds): the chunks' starts, then the end."""
    samples, _ = sf.read(io.BytesIO(wav(seconds)), dtype="float32")
    edges = [0]
    for n in vllm_chunk_lengths(samples, 16000):
        edges.append(edges[-1] + n)
    return [e / 16000 for e in edges]


def test_verbose_json_times_are_floats_as_vllms(c):
    """vLLM's TranscriptionSegment declares start and end as floats: 0.0 on the wire, not 0; a
    chunk ends where vLLM's split_audio cut it (its quietest 0.1 s before 30 s)."""
    r = c.post("/v1/audio/transcriptions", files={"file": upload(wav(31.0))},
               data={"model": MODEL, "response_format": "verbose_json"})
    cut = cuts(31.0)[1]
    assert 29.0 <= cut < 30.0
    assert b'"start":0.0,' in r.content and b'"end":%r,' % cut in r.content and b'"start":%r,' % cut in r.content


def test_translation_verbose_json_has_a_segment_per_30s_chunk(sdk):
    out = sdk.audio.translations.create(model=MODEL, file=upload(wav(65.0)), response_format="verbose_json")
    d = out.model_dump()
    assert d["duration"] == 65.0 and d["language"] == "en"
    edges = cuts(65.0)                  # vLLM's seek: int(start)
    assert len(edges) == 4 and edges[-1] == 65.0
    assert [(s["start"], s["end"], s["seek"]) for s in d["segments"]] == [(a, b, int(a)) for a, b in zip(edges, edges[1:])]
    assert d["text"] == " ".join(s["text"] for s in d["segments"])
    plain = sdk.audio.translations.create(model=MODEL, file=upload(wav(1.0)))
    assert plain.text and "usage" not in plain.model_dump(exclude_unset=True)     # translations carry no usage


@pytest.mark.parametrize("fmt, sf_format", [("wav", "WAV"), ("flac", "FLAC"), ("mp3", "MP3"), ("opus", "OGG")])
def test_speech_formats_decode_to_the_output_tokens(sdk, fmt, sf_format):
    res = sdk.audio.speech.create(model=MODEL, voice="alloy", input="Hello there, how are you?", response_format=fmt)
    data = res.read()
    headers = res.response.headers
    out_tokens = int(headers["x-vllm-omni-output-tokens"])
    in_tokens = int(headers["x-vllm-omni-input-tokens"])
    assert out_tokens == math.ceil(in_tokens * 3.75)
    info = sf.info(io.BytesIO(data))
    assert info.format == sf_format
    if fmt in ("wav", "flac"):                     # lossless: exactly 80 ms of 24 kHz audio per token
        assert (info.samplerate, info.frames) == (24000, out_tokens * 1920)
    else:
        assert abs(info.duration - out_tokens * 0.08) < 0.1


def test_speech_pcm_stream_sse_and_errors(c, sdk):
    body = {"model": MODEL, "input": "Hello there, how are you?", "response_format": "pcm"}
    pcm = c.post("/v1/audio/speech", json=body)
    out_tokens = int(pcm.headers["x-vllm-omni-output-tokens"])
    assert pcm.headers["content-type"] == "audio/pcm" and len(pcm.content) == out_tokens * 1920 * 2
    raw = c.post("/v1/audio/speech", json={**body, "stream_format": "audio"})
    assert raw.content == pcm.content                                  # the same audio, streamed
    r = c.post("/v1/audio/speech", json={**body, "response_format": "wav", "stream": True})
    events = [json.loads(line[6:]) for line in r.text.split("\n") if line.startswith("data: ")]
    audio = b"".join(__import__("base64").b64decode(e["audio"]) for e in events[:-1])
    assert audio[:4] == b"RIFF" and audio[44:] == pcm.content
    assert events[-1] == {"type": "speech.audio.done", "usage": {
        "input_tokens": int(pcm.headers["x-vllm-omni-input-tokens"]), "output_tokens": out_tokens,
        "total_tokens": int(pcm.headers["x-vllm-omni-total-tokens"]),
        "input_token_details": {"text_tokens": int(pcm.headers["x-vllm-omni-input-tokens"]), "audio_tokens": 0}}}
    for extra, message, param in [
        ({"input": None}, "input is required", "input"),
        ({"input": ""}, "input is required", "input"),
        ({"response_format": "aac"}, 'unsupported response_format "aac"', "response_format"),
        ({"stream_format": "sse", "response_format": "mp3"},
         'streaming speech requires response_format "pcm" or "wav", got "mp3"', "response_format"),
        ({"speed": 5}, "speed must be between 0.25 and 4.0", "speed"),
        ({"stream": True, "speed": 2}, "streaming speech does not support speed adjustment", "speed"),
    ]:
        r = c.post("/v1/audio/speech", json={**body, **extra})
        assert r.status_code == 400 and r.json()["error"]["message"] == message, r.text
        assert r.json()["error"]["param"] == param


def test_upload_over_the_clip_size_is_vllms_validation_error(c, monkeypatch):
    """read_upload_with_limit (vLLM 0.34 speech_to_text/base/utils.py:43-48): a
    VLLMValidationError naming ``audio_filesize_mb`` with the upload's size in MiB, which its
    message carries (vllm/exceptions.py:49-56)."""
    from generation.content import audio as au
    data = wav(0.5)
    monkeypatch.setattr(au, "MAX_CLIP_FILESIZE_MB", 0.001)
    r = c.post("/v1/audio/transcriptions", files={"file": upload(data)})
    assert r.status_code == 400
    assert r.json()["error"] == {"message": f"Maximum file size exceeded (parameter=audio_filesize_mb, "
                                            f"value={len(data) / 2 ** 20})", "type": "BadRequestError",
                                 "param": "audio_filesize_mb", "code": 400}


def _multipart(fields, files) -> tuple[bytes, dict]:
    """A multipart body with repeated names kept (httpx's ``data`` takes no list of pairs)."""
    b = "simboundary1234"
    out = [f'--{b}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode() for k, v in fields]
    out += [f'--{b}\r\nContent-Disposition: form-data; name="{k}"; filename="{fn}"\r\n'
            f'Content-Type: {ct}\r\n\r\n'.encode() + data + b"\r\n" for k, (fn, data, ct) in files]
    out.append(f"--{b}--\r\n".encode())
    return b"".join(out), {"content-type": f"multipart/form-data; boundary={b}"}


@pytest.mark.parametrize("fields, files, status, detail", [
    ([(f"f{i}", "x") for i in range(1001)], [], 400, "Too many fields. Maximum number of fields is 1000."),
    ([(f"f{i}", "x") for i in range(999)], [], 200, None),
    ([], [(f"g{i}", ("g", b"x", "text/plain")) for i in range(1000)], 400,
     "Too many files. Maximum number of files is 1000."),
    ([], [(f"g{i}", ("g", b"x", "text/plain")) for i in range(999)], 200, None),
    ([("prompt", "x" * (1024 * 1024 + 1))], [], 400, "Part exceeded maximum size of 1024KB."),
])
def test_form_limits_are_starlettes_400(c, fields, files, status, detail):
    """Starlette's form limits (1,000 fields, 1,000 files, 1 MiB a field), raised as its
    HTTPException(400) that FastAPI's default handler answers ``{"detail": ...}``; werkzeug's
    were a 413 naming the request body limit for a body of a few kilobytes."""
    body, headers = _multipart(fields, [("file", upload(wav(0.2))), *files])
    r = c.post("/v1/audio/transcriptions", content=body, headers=headers)
    assert r.status_code == status, r.text
    if detail is not None:
        assert r.json() == {"detail": detail}



@pytest.mark.parametrize("ctype", ["text/plain", "application/x-www-form-urlencoded", None])
def test_an_upload_route_reads_any_type_as_a_form_without_its_file(c, ctype):
    """vLLM's Form() routes check no Content-Type: a body that is no multipart form lacks its
    ``file`` (pydantic's 400 at body.file), where the simulator answered that only
    application/json is allowed, on a route that takes multipart uploads; from another
    origin's page such a body is still refused."""
    headers = {"content-type": ctype} if ctype else {}
    r = c.post("/v1/audio/transcriptions", content=b"model=test-model&language=en", headers=headers)
    assert r.status_code == 400 and r.json()["error"]["param"] == "body.file", r.text
    r = c.post("/v1/audio/transcriptions", content=b"model=test-model",
               headers={**headers, "origin": "http://evil.example", "sec-fetch-site": "cross-site"})
    assert r.status_code == 400 and r.json()["error"]["param"] != "body.file", r.text
