"""The realtime session's audio decoding (blueprints.realtime._decode_pcm): sliced with hub turns
between slices, it must give what one ``base64.b64decode`` call gives (vLLM's non-validating
decode), errors included; and vLLM's error texts (sanitize_message, pydantic's ValidationError)."""
from __future__ import annotations

import base64
import hashlib
import os

import pytest

import blueprints.realtime as rt


def reference(audio: str):
    try:
        data = base64.b64decode(audio)
    except ValueError:          # binascii.Error included
        return "error"
    if len(data) % 2 or not data:
        return "error"
    return len(data) // 2, hashlib.blake2b(data, digest_size=16).digest()


def decoded(audio: str):
    try:
        return rt._decode_pcm(audio)
    except ValueError:
        return "error"


@pytest.mark.parametrize("size", [2, 1000, rt.SLICE_CHARS // 4 * 3 + 1, 300_001, 700_000])
def test_sliced_decoding_is_one_call_s(size, monkeypatch):
    turns = []
    monkeypatch.setattr(rt, "hub_turn", lambda: turns.append(1))
    raw = os.urandom(size)
    b = base64.b64encode(raw).decode()
    mid = len(b) // 2
    for audio in (b, base64.encodebytes(raw).decode(), b + "=", b[:-1], b[:-2], b[:-3], b.replace("A", "A\n"),
                  b + "==AB", b[:mid] + "=" + b[mid:], b + " \n", "!" + b, b[:mid] + "\x00" + b[mid:], "é" + b):
        assert decoded(audio) == reference(audio), (size, audio[:12])
    if len(b) > rt.SLICE_CHARS:
        assert turns                # the hub had turns


def test_empty_and_odd_audio_are_errors():
    for audio in ("", "AA==", "abc"):
        assert decoded(audio) == "error"
    assert decoded("AAE=") == (1, hashlib.blake2b(b"\x00\x01", digest_size=16).digest())


def test_vllm_error_texts():
    assert rt.sanitize("boom <object at 0x7f00aa> in /home/u/x/y.py") == "boom <object> in <path>"
    text = rt.validation_text("InputAudioBufferAppend", "audio", "x" * 100, "string_type", "Input should be a valid string")
    assert text == ("1 validation error for InputAudioBufferAppend\naudio\n  Input should be a valid string "
                    "[type=string_type, input_value='xxxxxxxxxxxxxxxxxxxxxxxx...xxxxxxxxxxxxxxxxxxxxxxx', "
                    "input_type=str]\n    For further information visit https://errors.pydantic.dev/2.13/v/string_type")


def _keys(chunks, cuts=()):
    """The keys of an utterance's segments, its chunks added in order, whole segments taken after
    the chunks at the indexes ``cuts`` (when the session's transcription woke), the rest at the end."""
    u, out, seg = rt.Utterance(), [], rt.SEGMENT_SAMPLES
    for i, (n, digest) in enumerate(chunks):
        u.add(n, digest)
        if i in cuts:
            while u.samples - u.taken >= seg:
                out.append(u.take(seg))
    while u.samples - u.taken >= seg:
        out.append(u.take(seg))
    if u.samples > u.taken:
        out.append(u.take(u.samples - u.taken))
    return out


def test_segment_keys_do_not_depend_on_when_a_segment_is_cut():
    seg = rt.SEGMENT_SAMPLES
    chunks = [(16000, bytes([i]) * 16) for i in range(12)]          # 12 s: 5 + 5 + 2
    keys = _keys(chunks)
    assert len(keys) == 3 and len(set(keys)) == 3
    assert _keys(chunks, cuts={4, 9}) == _keys(chunks, cuts={6, 11}) == keys
    assert len(_keys([(seg, b"a" * 16)])) == 1                       # a chunk ending on a boundary
    assert len(_keys([(seg, b"a" * 16), (100, b"b" * 16)])) == 2
    one = _keys([(3 * seg + 5, b"z" * 16)])                         # one chunk, four segments, four texts
    assert len(one) == 4 and len(set(one)) == 4
