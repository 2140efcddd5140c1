"""Audio in and out of the simulated speech APIs: uploads decoded, speech synthesized and encoded.

Decoding and encoding are libsndfile's (the ``soundfile`` package, whose wheels ship it with
WAV, FLAC, Ogg/Opus and MP3 read and write); nothing here is a codec.

* :func:`decode_upload`: an uploaded file (transcriptions, translations) -> :class:`Clip`
  (its duration, sample rate, a content key), with vLLM's limits and messages
  (``vllm/multimodal/media/audio.py`` ``load_audio_soundfile``; vLLM 0.34).  Containers that
  libsndfile cannot read (MP4 / M4A / WebM, which vLLM decodes with PyAV or torchcodec) are
  vLLM's 400 ``Invalid or corrupted audio data. ...``.
* :func:`synthesize`: deterministic speech-like samples for the output tokens of a speech
  request (``/v1/audio/speech``): each token is one codec frame of :data:`FRAME_SECONDS`,
  a tone whose pitch and loudness come from the token id.
* :func:`encode_speech`: output token ids -> their speech as bytes in a ``response_format``
  (``wav``, ``pcm``, ``flac``, ``mp3``, ``opus``), :data:`SYNTH_FRAMES` frames at a time;
  :func:`stream_header` / :func:`stream_frames` for a streamed ``wav`` / ``pcm``.

Free of Flask.  The CPU-heavy calls (decoding an upload, encoding a long answer) run in the
hub's thread pool (:func:`off_hub`), so the event loop keeps serving while they work.
"""
from __future__ import annotations

import hashlib
import io
import math
import os
import struct
from dataclasses import dataclass

from typing import TYPE_CHECKING

if TYPE_CHECKING:      # numpy is imported where audio is made: it costs ~45 ms of start-up
    import numpy as np

# Whisper's feature extractor (what vLLM's transcription serving reads from the processor)
WHISPER_SAMPLE_RATE = 16000         # Hz
WHISPER_HOP_LENGTH = 160            # samples per log-mel frame: 100 audio tokens per second
WHISPER_CHUNK_SECONDS = 30          # max_audio_clip_s: longer audio is split into 30 s requests
SPLIT_SEARCH_S = 1.0                # overlap_chunk_second: the last second before 30 s is searched
SPLIT_WINDOW_S = 0.1                # min_energy_split_window_size (1,600 samples at 16 kHz)

# vLLM's environment limits (vllm/envs.py, 0.34 defaults)
MAX_CLIP_FILESIZE_MB = float(os.environ.get("VLLM_MAX_AUDIO_CLIP_FILESIZE_MB", "25"))
MAX_DECODE_DURATION_S = float(os.environ.get("VLLM_MAX_AUDIO_DECODE_DURATION_S", "600"))
MAX_DECODE_BYTES = int(os.environ.get("VLLM_MAX_AUDIO_DECODE_BYTES", str(268_435_456)))
MIB = 1 << 20
DECODE_BLOCK_SAMPLES = 1 << 18     # samples decoded at a time (1 MiB of float32), all channels together

# speech output: 24 kHz mono (OpenAI's and vLLM-Omni's TTS rate), one codec token per 80 ms
# (a 12.5 Hz speech tokenizer, as Qwen3-TTS's), about 3.75 audio tokens per text token
SPEECH_SAMPLE_RATE = 24000          # Hz
FRAME_SECONDS = 0.08                # s of audio per output token
FRAME_SAMPLES = int(SPEECH_SAMPLE_RATE * FRAME_SECONDS)      # 1920
SYNTH_FRAMES = 256                  # frames synthesized at a time (~20 MB of float64 intermediates)
PCM_ENTRIES_PER_FRAME = FRAME_SAMPLES * 2 // 64     # a frame's 16-bit PCM in --max-request-work's 64-byte entries
AUDIO_TOKENS_PER_TEXT_TOKEN = 3.75

# response_format -> (libsndfile format, subtype, media type); pcm is raw little-endian int16
SPEECH_FORMATS = {
    "wav": ("WAV", "PCM_16", "audio/wav"),
    "pcm": ("RAW", "PCM_16", "audio/pcm"),
    "flac": ("FLAC", "PCM_16", "audio/flac"),
    "mp3": ("MP3", "MPEG_LAYER_III", "audio/mpeg"),
    "opus": ("OGG", "OPUS", "audio/ogg"),
}


# vLLM 0.34's message when neither libsndfile nor its PyAV fallback can open the upload
CORRUPTED = ("Invalid or corrupted audio data. Ensure the input is a valid audio or video file (e.g. a complete WAV, "
             "MP3, or MP4).")


class AudioError(ValueError):
    """An upload that is not audio libsndfile can read, or over a limit; ``message`` is vLLM's."""


@dataclass(frozen=True)
class Clip:
    """A decoded upload: ``duration_s`` (seconds, float), ``sample_rate`` (Hz), ``frames``
    (samples per channel), ``channels``, and ``key``: 16 bytes of its decoded samples' hash, so
    the same audio gives the same greedy transcript and different audio another."""
    duration_s: float
    sample_rate: int
    frames: int
    channels: int
    key: bytes
    cuts: tuple = ()        # the frames vLLM splits the audio at (:class:`SplitPoints`), when decoded

    def chunks(self, clip_s: float = WHISPER_CHUNK_SECONDS) -> list[tuple[float, float]]:
        """``[(start_s, length_s), ...]``: the engine requests vLLM makes of this audio: split at
        :attr:`cuts` (vLLM's ``split_audio``), else (a clip not decoded here) one per ``clip_s``
        seconds.  At least one, also for empty audio."""
        if self.cuts:
            edges = [0, *self.cuts, self.frames]
            return [(a / self.sample_rate, (b - a) / self.sample_rate) for a, b in zip(edges, edges[1:])]
        n = max(1, math.ceil(self.duration_s / clip_s)) if self.duration_s > clip_s else 1
        out = []
        for k in range(n):
            start = k * clip_s
            out.append((start, min(clip_s, self.duration_s - start) if n > 1 else self.duration_s))
        return out


def soundfile():
    """The ``soundfile`` module, its one lock (``SoundFile._sf_error_lock``, held around every
    ``sf_open``) made a native lock.  Imported after gevent's monkey-patching, the module made it a
    gevent lock, which the hub's thread pool's workers cannot share: of 300 uploads decoded at once,
    the 9 workers that waited for it never woke, and their requests hung until shutdown."""
    import soundfile as sf
    lock = sf.SoundFile.__dict__["_sf_error_lock"]
    if type(lock).__module__.startswith("gevent"):
        with _PATCH_LOCK:
            if sf.SoundFile.__dict__["_sf_error_lock"] is lock:
                sf.SoundFile._sf_error_lock = _native_lock()
    return sf


def _native_lock():
    try:
        from gevent.monkey import get_original
    except ImportError:         # no gevent: threading's is native
        import threading
        return threading.Lock()
    return get_original("_thread", "allocate_lock")()


_PATCH_LOCK = _native_lock()


def audio_tokens(duration_s: float) -> int:
    """The encoder-side tokens vLLM adds to a Whisper stream's ``prompt_tokens``
    (``WhisperForConditionalGeneration.get_num_audio_tokens``: the log-mel frames,
    ``ceil(duration * 16000 / 160)``, 100 per second)."""
    return math.ceil(duration_s * WHISPER_SAMPLE_RATE / WHISPER_HOP_LENGTH)


def decode_upload(data: bytes, max_size_mb: float = MAX_CLIP_FILESIZE_MB) -> Clip:
    """Decode an uploaded audio file (bytes) with libsndfile.

    Raises AudioError with vLLM's messages: ``Maximum file size exceeded`` (over
    ``VLLM_MAX_AUDIO_CLIP_FILESIZE_MB``, checked first), ``Audio exceeds maximum allowed
    duration ...`` (``VLLM_MAX_AUDIO_DECODE_DURATION_S``), ``Audio would allocate ...``
    (``VLLM_MAX_AUDIO_DECODE_BYTES``), :data:`CORRUPTED` for anything libsndfile does not
    recognise (vLLM's PyAV fallback then fails with it), and ``Invalid or unsupported audio
    file.`` for a recognised file that cannot be read.  The limits are checked from the header, before any sample is
    decoded.  The samples are decoded :data:`DECODE_BLOCK_SAMPLES` at a time and hashed as they
    come (the same key as hashing them all at once), so an upload holds about 1 MiB however long
    its audio: a 210 KB FLAC of 600 s of silence at 192 kHz (vLLM's decode limits, which allow
    it) held 256 MiB of float32 and a 256 MiB copy for the hash, and ten at once in the hub's
    thread pool would hold 5 GB; vLLM keeps the decoded samples (it resamples them), the
    simulator only needs their length and hash."""
    sf = soundfile()
    if len(data) > max_size_mb * MIB:
        raise AudioError("Maximum file size exceeded")
    try:
        with sf.SoundFile(io.BytesIO(data)) as f:
            sr, frames, channels = f.samplerate, f.frames, f.channels
            if sr <= 0:
                raise AudioError("Invalid or unsupported audio file.")
            duration = frames / sr
            if duration > MAX_DECODE_DURATION_S:
                raise AudioError(
                    f"Audio exceeds maximum allowed duration of {MAX_DECODE_DURATION_S:g}s (file contains "
                    f"{duration:.1f}s at {sr}Hz). Set VLLM_MAX_AUDIO_DECODE_DURATION_S to increase this limit.")
            estimated = frames * channels * 4
            if estimated > MAX_DECODE_BYTES:
                raise AudioError(
                    f"Audio would allocate {estimated / MIB:.0f} MiB of PCM ({frames} frames x {channels} channels"
                    f" x 4B), exceeding the {MAX_DECODE_BYTES / MIB:.0f} MiB limit. Set "
                    f"VLLM_MAX_AUDIO_DECODE_BYTES to increase this limit.")
            digest = hashlib.blake2b(digest_size=16)
            block = max(1, DECODE_BLOCK_SAMPLES // channels)
            frames = 0              # what was decoded (a truncated stream decodes fewer)
            splits = SplitPoints(sr, f.frames)
            while True:
                samples = f.read(block, dtype="float32", always_2d=True)
                if not len(samples):
                    break
                digest.update(samples)
                splits.feed(frames, samples)
                frames += len(samples)
    except AudioError:
        raise
    except sf.LibsndfileError as exc:       # not audio libsndfile recognises: vLLM's PyAV fallback fails so
        raise AudioError(CORRUPTED) from exc
    except Exception as exc:        # noqa: BLE001 - recognised but unreadable (truncated, ...)
        raise AudioError("Invalid or unsupported audio file.") from exc
    return Clip(frames / sr, sr, frames, channels, digest.digest(), splits.done(frames))


class SplitPoints:
    """vLLM's ``split_audio`` (``multimodal/audio.py``) over audio decoded a block at a time:
    audio longer than :data:`WHISPER_CHUNK_SECONDS` is cut, chunk after chunk, at the quietest
    window (RMS of :data:`SPLIT_WINDOW_S`) of the last :data:`SPLIT_SEARCH_S` before the chunk
    would pass 30 s (``find_split_point``: the first of equal ones), else the chunk runs to the
    end.  Only the search region's mono samples are kept (1 s).  vLLM searches the audio
    resampled to 16 kHz; here it is searched at the upload's own rate (the same times)."""

    def __init__(self, sr: int, frames: int):
        self.size = int(sr * WHISPER_CHUNK_SECONDS)
        self.overlap = int(sr * SPLIT_SEARCH_S)
        self.window = max(1, int(round(sr * SPLIT_WINDOW_S)))
        self.frames = frames            # the header's length (vLLM's len(audio))
        self.cuts: list = []
        self.start = 0                  # the current chunk's first frame
        self.region: list = []          # mono samples of the current search region, in order
        self.split = frames / sr > WHISPER_CHUNK_SECONDS

    def feed(self, at: int, samples) -> None:
        """``samples`` (frames x channels, float32) decoded from frame ``at`` on."""
        while self.split and self.start + self.size < self.frames:
            lo, hi = self.start + self.size - self.overlap, self.start + self.size
            a, b = max(lo, at), min(hi, at + len(samples))
            if a < b:
                self.region.append(samples[a - at:b - at].mean(axis=1))
            if at + len(samples) < hi:
                return                  # the region's rest is in later blocks
            self._cut(lo, hi)

    def _cut(self, lo: int, hi: int) -> None:
        import numpy as np
        seg = np.concatenate(self.region) if self.region else np.zeros(0, np.float32)
        self.region = []
        best, quietest = math.inf, lo
        w = self.window
        for i in range(0, len(seg) - w, w):
            window = seg[i:i + w]
            energy = float((window ** 2).mean() ** 0.5)      # vLLM's expression, in float32 as its samples
            if not math.isnan(energy) and energy < best:
                best, quietest = energy, lo + i
        self.start = quietest if quietest > self.start else hi
        self.cuts.append(self.start)

    def done(self, frames: int) -> tuple:
        """The cuts, for audio that decoded ``frames`` frames (fewer than the header said: only
        those before its end)."""
        return tuple(c for c in self.cuts if c < frames)


def speech_tokens(text_tokens: int, speed: float = 1.0) -> int:
    """Output (codec) tokens of a speech answer for ``text_tokens`` input tokens at ``speed``
    (0.25 .. 4.0): ``ceil(text_tokens * 3.75 / speed)``, at least 1 (about 0.3 s of speech per
    text token at speed 1)."""
    return max(1, math.ceil(text_tokens * AUDIO_TOKENS_PER_TEXT_TOKEN / speed))


def synthesize(ids, seed: int = 0) -> np.ndarray:
    """Speech-like float32 samples at :data:`SPEECH_SAMPLE_RATE`, :data:`FRAME_SAMPLES` per
    output token id in ``ids``: a tone of 110-330 Hz (from the id and ``seed``) with its second
    harmonic, under a raised-cosine envelope (no clicks between frames), peak below 0.5.
    Deterministic: the same ids and seed give the same samples.  Shape ``(len(ids) * 1920,)``."""
    import numpy as np
    n = len(ids)
    if n == 0:
        return np.zeros(0, dtype=np.float32)
    h = (np.asarray(ids, dtype=np.uint64) * np.uint64(2654435761) + np.uint64(seed & 0xFFFFFFFF)) % np.uint64(1 << 16)
    h = h.astype(np.float64) / float(1 << 16)
    freq = 110.0 + 220.0 * h                                   # Hz, one per frame
    amp = 0.15 + 0.25 * ((h * 7.0) % 1.0)
    t = np.arange(FRAME_SAMPLES, dtype=np.float64) / SPEECH_SAMPLE_RATE
    env = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(FRAME_SAMPLES) / FRAME_SAMPLES)
    phase = 2 * np.pi * freq[:, None] * t[None, :]
    frames = amp[:, None] * env[None, :] * (np.sin(phase) + 0.3 * np.sin(2 * phase))
    return frames.astype(np.float32).reshape(-1)


def encode_speech(ids, seed: int, response_format: str) -> bytes:
    """The speech of output token ids ``ids`` (:func:`synthesize` with ``seed``) as a whole
    file in ``response_format`` (a key of :data:`SPEECH_FORMATS`), written by libsndfile.
    Synthesized and encoded :data:`SYNTH_FRAMES` frames at a time (the same bytes as all at
    once; Opus aside, whose Ogg stream differs on every run): the whole answer's float64
    intermediates took ~64 bytes a sample, 1.9 GB for a 48 KB request with a 32k context."""
    if response_format == "pcm":
        return b"".join(pcm16(synthesize(part, seed)) for part in _parts(ids))
    sf = soundfile()
    fmt, subtype, _ = SPEECH_FORMATS[response_format]
    buf = io.BytesIO()
    with sf.SoundFile(buf, "w", SPEECH_SAMPLE_RATE, 1, format=fmt, subtype=subtype) as f:
        for part in _parts(ids):
            f.write(synthesize(part, seed))
    return buf.getvalue()


def _parts(ids) -> list:
    """``ids`` in slices of :data:`SYNTH_FRAMES` (one slice for none)."""
    return [ids[i:i + SYNTH_FRAMES] for i in range(0, len(ids), SYNTH_FRAMES)] or [ids]


def pcm16(samples: np.ndarray) -> bytes:
    """Raw little-endian 16-bit PCM of float samples in [-1, 1] (libsndfile's ``RAW`` /
    ``PCM_16`` conversion: scaled by 32767 and clipped)."""
    import numpy as np
    return (np.clip(samples, -1.0, 1.0) * 32767.0).round().astype("<i2").tobytes()


def stream_header(response_format: str) -> bytes:
    """What a streamed answer starts with: for ``wav`` libsndfile's 44-byte header with the
    RIFF and data sizes set to 0xFFFFFFFF (length unknown while streaming, as streaming TTS
    servers send it); nothing for ``pcm``."""
    import numpy as np
    if response_format != "wav":
        return b""
    sf = soundfile()
    buf = io.BytesIO()
    sf.write(buf, np.zeros(0, dtype=np.float32), SPEECH_SAMPLE_RATE, format="WAV", subtype="PCM_16")
    head = bytearray(buf.getvalue()[:44])
    struct.pack_into("<I", head, 4, 0xFFFFFFFF)
    struct.pack_into("<I", head, 40, 0xFFFFFFFF)
    return bytes(head)


def stream_frames(ids, seed: int = 0) -> bytes:
    """The PCM bytes of the frames of output token ids ``ids`` (a streamed ``wav`` / ``pcm``):
    more than :data:`SYNTH_FRAMES` of them (a stream without inter-token latency sends them all
    at once) in the hub's thread pool, as :func:`encode_speech`."""
    if len(ids) > SYNTH_FRAMES:
        return off_hub(encode_speech, ids, seed, "pcm")
    return pcm16(synthesize(ids, seed))


def off_hub(fn, *args):
    """``fn(*args)`` in the gevent hub's thread pool (the event loop keeps serving), or here
    when gevent's hub is not running this thread (tests, tools)."""
    try:
        import gevent
        pool = gevent.get_hub().threadpool
    except Exception:       # noqa: BLE001 - no gevent: run here
        return fn(*args)
    ok, value = pool.apply(_outcome, (fn, args))     # raised here, not printed by the pool
    if not ok:
        raise value
    return value


def _outcome(fn, args):
    try:
        return True, fn(*args)
    except Exception as e:  # noqa: BLE001 - handed to the caller
        return False, e
