"""Where a long upload is cut into engine requests: vLLM 0.34's ``split_audio`` /
``find_split_point`` (``vllm/multimodal/audio.py``), here over audio decoded a block at a time
(``generation.content.audio.SplitPoints``)."""
from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile as sf

import generation.content.audio as audio
from support import vllm_chunk_lengths


@pytest.mark.parametrize("block", [1 << 18, 4001, 16000])
@pytest.mark.parametrize("seconds", [29.9, 30.0, 30.05, 59.0, 60.0, 65.0, 90.0, 125.0])
def test_cuts_are_vllms(monkeypatch, block, seconds):
    monkeypatch.setattr(audio, "DECODE_BLOCK_SAMPLES", block)
    rng = np.random.default_rng(int(seconds * 100))
    n = int(seconds * 16000)
    t = np.arange(n) / 16000
    # speech-like: noise under a slow envelope, with a quiet stretch now and then
    a = (0.1 * rng.standard_normal(n) * (0.55 + 0.45 * np.sin(2 * np.pi * 0.37 * t))).astype(np.float32)
    buf = io.BytesIO()
    sf.write(buf, a, 16000, format="WAV", subtype="FLOAT")
    clip = audio.decode_upload(buf.getvalue())
    ours = [round(length * 16000) for _, length in clip.chunks()]
    assert ours == vllm_chunk_lengths(a, 16000)
    assert sum(ours) == n


def test_silence_is_cut_where_the_search_starts():
    """All windows equally quiet: the first wins (29 s), so 60 s of silence is 3 requests."""
    buf = io.BytesIO()
    sf.write(buf, np.zeros(60 * 16000, np.float32), 16000, format="WAV")
    clip = audio.decode_upload(buf.getvalue())
    assert [(round(s, 3), round(n, 3)) for s, n in clip.chunks()] == [(0, 29), (29, 29), (58, 2)]
