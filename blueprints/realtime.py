"""vLLM 0.34's realtime transcription session, ``ws://host/v1/realtime``
(``vllm/entrypoints/speech_to_text/realtime/``: ``connection.py`` ``RealtimeConnection``, its
events in ``protocol.py``), on a :class:`server.websocket.WebSocket`.

The server sends ``session.created`` ``{"id": "sess-...", "created"}``; then, per client event
(JSON text messages, ``type`` naming the event):

* ``session.update`` ``{"model"}``: a served (base) model name, or an empty / false one, makes the
  session's model valid; another is ``model_not_found`` (``The model `X` does not exist.``),
  none ``invalid_event`` (``Missing required field: model``);
* ``input_audio_buffer.append`` ``{"audio"}``: base64 PCM16 mono 16 kHz; audio that does not
  decode (bad base64, an odd byte count), is empty, or is over ``VLLM_MAX_AUDIO_CLIP_FILESIZE_MB``
  mebi-samples is ``invalid_audio`` (``Invalid audio data``); so is a chunk that would leave more
  than :data:`MAX_BUFFERED_S` of audio waiting to be transcribed (the simulator's bound);
* ``input_audio_buffer.commit`` ``{"final": false}``: before a valid ``session.update``,
  ``model_not_validated``; ``final`` false starts a transcription (ignored while one runs),
  ``final`` true ends its audio;
* the transcription streams ``transcription.delta`` ``{"delta"}`` events as the engine makes
  tokens, then ``transcription.done`` ``{"text", "usage": {"prompt_tokens", "completion_tokens",
  "total_tokens"}}``; audio appended after the final commit and before the done is dropped
  (vLLM clears its queue after the done), and the next commit starts the next utterance;
* anything else: ``invalid_json`` (``Invalid JSON``), ``unknown_event`` (``Unknown event type:
  X``), or ``processing_error`` with the exception's text, which vLLM sanitizes (a message that
  is not an object, a field pydantic refuses: its ValidationError text, an engine error such as a
  full queue; the simulator's: an event of over :data:`MAX_EVENT_VALUES` JSON values, refused
  unparsed).

Each ``error`` event is ``{"type": "error", "error", "code"}``.  A binary message ends the
session (vLLM's ``receive_text`` fails on it and its handler returns).

The transcription streams as a realtime model's does (Qwen3-ASR realtime's segments, vLLM 0.34
``qwen3_asr_realtime.py``): once a non-final commit has started it, each :data:`SEGMENT_S` of audio
is transcribed as soon as it has arrived, and what is left at the final commit last, so deltas
come while the client still sends audio.  Each segment is one engine request (vLLM feeds them to
one streaming request: here each is admitted, timed and counted as a request of its own, and no
slot is held between them), at most :data:`SEGMENT_MAX_TOKENS` tokens (the model's
``realtime_max_tokens``): the transcription route's request (:mod:`generation.adapters.audio`),
Whisper's decoder prompt for English, greedy and keyed on the audio as sent (the same chunks,
the same text).  A later segment's text starts with a space.  ``usage`` is vLLM's:
``prompt_tokens`` the first output's prompt (the decoder prompt plus the first segment's encoder
tokens, 100 a second, as the route's stream usage counts them), ``completion_tokens`` every
token sent.  The audio is never kept: an utterance is its sample count and a hash of its chunks,
so :data:`MAX_BUFFERED_S` bounds the work waiting, not memory.  A client that leaves aborts the
request running and frees its slot.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import re
import time
from collections import deque
from time import monotonic
from uuid import uuid4

import gevent
import orjson
from gevent.event import Event

from generation.adapters.base import usage
from generation.adapters.audio import NO_TIMESTAMPS, SOT, TRANSCRIBE, _language_id
from generation.adapters.validation import Mismatch, read_bool
from generation.content import audio as au
from generation.engine.request import ClientDisconnected, GenerationRequest, Prompt
from generation.lanes import hub_turn
from .streaming import WebSocketClosed as Disconnected

log = logging.getLogger("vllm_sim")

SAMPLE_RATE = 16000                    # Hz: the protocol's PCM16 mono
MAX_BUFFERED_S = au.MAX_DECODE_DURATION_S                # the simulator's bound on audio not yet transcribed (600 s)
# Qwen3-ASR realtime's (vLLM 0.34 qwen3_asr_realtime.py): an engine input per 5 s of audio, at most
# realtime_max_tokens (64) tokens made of each
SEGMENT_S = 5.0
SEGMENT_SAMPLES = int(SEGMENT_S * SAMPLE_RATE)
SEGMENT_MAX_TOKENS = 64
# the simulator's bound on one event's JSON values (commas counted, before it is parsed): a 16 MiB
# message of 8 M list items held the hub ~1-2 s in json.loads and its error's repr (one C call
# each); an event of vLLM's protocol has a handful (its audio is one string, no comma in base64)
MAX_EVENT_VALUES = 65536
PYDANTIC_DOCS = "https://errors.pydantic.dev/2.13/v/"    # the URL pydantic's ValidationError text ends with


def serve(sim, ws, environ) -> None:
    """The WebSocket route's handler (:class:`server.websocket.WebSocketRoutes`)."""
    RealtimeSession(sim, ws).run()


# ---- vLLM's error texts ----------------------------------------------------------------------

def sanitize(message: str) -> str:
    """vLLM's ``sanitize_message`` (``serve/exception_handling/utils.py``): memory addresses,
    traceback lines and file paths out of an error's text."""
    import regex            # here: at start-up it cost 7 ms of the server's first /health
    message = regex.sub(r" at 0x[0-9a-fA-F]+>", ">", message)
    message = regex.sub(r'\n?\s*File "[^"]+", line \d+, in \S+(\n\s+.*)?', "", message)
    message = regex.sub(r"/(?:home|usr|opt|var|tmp|root|lib|mnt|srv)(?:/[\w.\-]+)+", "<path>", message)
    if "." in message:
        message = regex.sub(r"(?>/[\w\-]+)+/[\w\-]+\.\w+", "<path>", message)
    return message.strip()


def _short_repr(value) -> str:
    """pydantic's ``input_value``: Python's repr, over 50 characters cut to its first 25 and
    last 24 around ``...``."""
    text = repr(value)
    return text if len(text) <= 50 else text[:25] + "..." + text[-24:]


def validation_text(model: str, field: str, value, kind: str, message: str) -> str:
    """The text of pydantic's ValidationError for one field of ``model`` (what vLLM's handler
    sends as a ``processing_error``)."""
    return (f"1 validation error for {model}\n{field}\n  {message} [type={kind}, input_value={_short_repr(value)}, "
            f"input_type={type(value).__name__}]\n    For further information visit {PYDANTIC_DOCS}{kind}")


class EventError(Exception):
    """An event refused with a ``processing_error`` whose text vLLM's exception would carry."""


_NOT_B64 = re.compile(r"[^A-Za-z0-9+/=]+")
SLICE_CHARS = 1 << 16                  # base64 decoded at a time (0.25-1.6 ms), the hub given a turn between


def _decode_pcm(audio: str) -> tuple[int, bytes]:
    """``audio`` (base64 PCM16) -> its sample count and its samples' hash; ValueError as vLLM's
    decoding fails (``pybase64.b64decode`` without validation: characters outside the alphabet
    are dropped, the padding must fit; an odd byte count, no sample, more than
    ``VLLM_MAX_AUDIO_CLIP_FILESIZE_MB`` mebi-samples: vLLM compares samples / MiB to the MB
    limit).  Decoded :data:`SLICE_CHARS` at a time, the hub given a turn between slices (a 16
    MiB message decoded in one call held it 86 ms; stripped by the regex module, 0.7 s): the
    same bytes as one call, which decodes only audio with something after its padding."""
    if not audio.isascii():
        raise ValueError("string argument should contain only ASCII characters")
    hasher = hashlib.blake2b(digest_size=16)
    pad = audio.find("=")
    body, tail = (audio, "") if pad < 0 else (audio[:pad], _NOT_B64.sub("", audio[pad:]))
    if len(audio) <= SLICE_CHARS or tail.strip("="):
        data = base64.b64decode(audio)          # short, or data after the padding: the decoder's own rules
        hasher.update(data)
        total = len(data)
    else:
        total, carry = 0, ""
        for start in range(0, len(body), SLICE_CHARS):
            piece = carry + body[start:start + SLICE_CHARS]
            cut = len(piece) - len(piece) % 4
            try:
                data = binascii.a2b_base64(piece[:cut], strict_mode=True)      # clean: the fast way
            except binascii.Error:                                           # other characters: dropped
                piece = carry + _NOT_B64.sub("", body[start:start + SLICE_CHARS])
                cut = len(piece) - len(piece) % 4
                data = base64.b64decode(piece[:cut])
            carry = piece[cut:]
            hasher.update(data)
            total += len(data)
            hub_turn()
        data = base64.b64decode(carry + tail)
        hasher.update(data)
        total += len(data)
    if total % 2:
        raise ValueError("buffer size must be a multiple of element size")
    n = total // 2
    if n / au.MIB > au.MAX_CLIP_FILESIZE_MB:
        raise ValueError("Maximum file size exceeded")
    if n == 0:
        raise ValueError("Can't process empty audio.")
    return n, hasher.digest()


class Utterance:
    """The audio queued for the next transcription: its sample count, the keys of its segments
    (a hash of its place and of the chunks it overlaps: its boundaries fall every
    :data:`SEGMENT_SAMPLES` from the start, so a key does not depend on when it was cut), how many samples its
    segments have taken, and whether the final commit has ended it."""
    __slots__ = ("samples", "keys", "open", "ended", "more", "taken")

    def __init__(self):
        self.samples = 0
        self.keys = deque()        # the complete segments' keys, not yet taken (600 s: 120 at most)
        self.open = hashlib.blake2b(digest_size=16)      # the segment being filled
        self.ended = False
        self.more = Event()        # set by each append and by the final commit
        self.taken = 0

    def add(self, n: int, digest: bytes) -> None:
        """A chunk of ``n`` samples (``digest``: their hash)."""
        start, self.samples = self.samples, self.samples + n
        self.open.update(digest)
        boundary = (start // SEGMENT_SAMPLES + 1) * SEGMENT_SAMPLES
        while boundary <= self.samples:          # each segment the chunk completes
            self.keys.append(self.open.digest())
            self.open = hashlib.blake2b(boundary.to_bytes(8, "little"), digest_size=16)   # (its place too)
            if boundary < self.samples:          # the chunk goes on into the next one
                self.open.update(digest)
            boundary += SEGMENT_SAMPLES
        self.more.set()

    def take(self, n: int) -> bytes:
        """The key of the next segment, ``n`` samples (a whole segment, or what is left)."""
        self.taken += n
        return self.keys.popleft() if self.keys else self.open.digest()


class RealtimeSession:
    """One connection's session (see the module)."""

    def __init__(self, sim, ws):
        self.sim = sim
        self.ws = ws
        self.connection_id = f"ws-{uuid4()}"
        self.validated = False
        self.audio = Utterance()
        self.generation = None        # the greenlet of the running transcription
        self.seqs = None              # its engine sequences, while admitted

    # -- sending ---------------------------------------------------------------------------
    def send(self, event: dict) -> None:
        self.ws.send_text(orjson.dumps(event).decode())

    def error(self, message: str, code: str | None) -> None:
        self.send({"type": "error", "error": message, "code": code})

    # -- the connection --------------------------------------------------------------------
    def run(self) -> None:
        self.send({"type": "session.created", "id": f"sess-{uuid4().hex}", "created": int(time.time())})
        try:
            while True:
                message = self.ws.receive()
                if not isinstance(message, str):
                    log.warning("realtime %s: a binary message ends the session", self.connection_id)
                    return
                try:
                    if len(message) > MAX_EVENT_VALUES and message.count(",") >= MAX_EVENT_VALUES:
                        raise EventError(f"An event of over {MAX_EVENT_VALUES} JSON values: the simulator's bound")
                    event = json.loads(message)      # (16 MiB of one string: ~16 ms of the hub, one C call)
                    self.handle(event)
                except json.JSONDecodeError:
                    self.error("Invalid JSON", "invalid_json")
                except Disconnected:
                    raise
                except Exception as e:          # noqa: BLE001 - vLLM's handler sends every other one
                    self.error(sanitize(str(e)), "processing_error")
        finally:
            self.cleanup()

    def cleanup(self) -> None:
        """The connection ended: abort the engine request (its slot is freed) and end the
        transcription's greenlet, as vLLM's ``cleanup``."""
        seqs, self.seqs = self.seqs, None
        if seqs is not None:
            self.sim.cancel(seqs, "abort")
        g, self.generation = self.generation, None
        if g is not None and not g.dead:
            g.kill(block=True, timeout=5.0)

    # -- events ----------------------------------------------------------------------------
    def handle(self, event) -> None:
        kind = event.get("type")             # not an object: its AttributeError, a processing_error
        if kind == "session.update":
            model = event.get("model")
            if model is None:
                self.error("Missing required field: model", "invalid_event")
            elif model and model not in self.sim.config.served_names:    # base models only
                self.error(f"The model `{model}` does not exist.", "model_not_found")
            else:
                self.validated = True
        elif kind == "input_audio_buffer.append":
            self.append(event)
        elif kind == "input_audio_buffer.commit":
            if not self.validated:
                self.error("Model not validated. Make sure to validate the model by sending a session.update "
                           "event.", "model_not_validated")
                return
            final = event.get("final", False)
            try:
                final = read_bool(final)
            except Mismatch as m:
                raise EventError(validation_text("InputAudioBufferCommit", "final", final, m.error[0],
                                                 m.error[1])) from None
            if final:
                self.audio.ended = True
                self.audio.more.set()
            elif self.generation is None or self.generation.dead:
                self.generation = gevent.spawn(self.transcribe)
            else:
                log.warning("realtime %s: a transcription is running, commit ignored", self.connection_id)
        else:
            self.error(f"Unknown event type: {kind}", "unknown_event")

    def append(self, event: dict) -> None:
        if "audio" not in event:
            raise EventError(validation_text("InputAudioBufferAppend", "audio", event, "missing", "Field required"))
        audio = event["audio"]
        if not isinstance(audio, str):
            raise EventError(validation_text("InputAudioBufferAppend", "audio", audio, "string_type",
                                             "Input should be a valid string"))
        try:
            n, digest = _decode_pcm(audio)
            pending = self.audio        # (a hub turn while it was decoded may have ended an utterance)
            if (pending.samples - pending.taken + n) / SAMPLE_RATE > MAX_BUFFERED_S:
                raise ValueError(f"over {MAX_BUFFERED_S:g} s of audio waiting, the simulator's bound")
        except (ValueError, TypeError, binascii.Error) as e:
            log.info("realtime %s: invalid audio: %s", self.connection_id, e)
            self.error("Invalid audio data", "invalid_audio")
            return
        if pending.ended:
            return                  # after the final commit: vLLM's queue drops it after the done
        pending.add(n, digest)

    # -- the transcription -----------------------------------------------------------------
    def transcribe(self) -> None:
        """One utterance, as a realtime model streams it: an engine request per
        :data:`SEGMENT_S` of audio as soon as that much has arrived (the rest at the final
        commit), its tokens streamed as deltas, then the done; a new utterance after it."""
        utterance = self.audio
        out = Transcript()
        try:
            while True:
                while utterance.samples - utterance.taken < SEGMENT_SAMPLES and not utterance.ended:
                    utterance.more.clear()
                    utterance.more.wait()
                n = min(SEGMENT_SAMPLES, utterance.samples - utterance.taken)
                if n == 0 or not self._segment(utterance, n, out):
                    break                        # all of it transcribed, or the server aborted it
            self.send({"type": "transcription.done", "text": "".join(out.text),
                       "usage": usage(out.prompt_tokens or 0, out.made, details=None)})
        except (Disconnected, ClientDisconnected):
            return                              # the client left: cleanup aborted the request
        except Exception as e:                  # noqa: BLE001 - vLLM sends the engine's error
            log.info("realtime %s: transcription failed: %s", self.connection_id, e)
            try:
                self.error(sanitize(getattr(e, "message", None) or str(e)), "processing_error")
            except Disconnected:
                pass
            return                              # (vLLM keeps its queue: a next commit goes on with it)
        if self.audio is utterance:
            self.audio = Utterance()            # vLLM clears its audio queue after the done

    def _segment(self, utterance: Utterance, n: int, out: "Transcript") -> bool:
        """The engine request of the utterance's next ``n`` samples, streamed into ``out``;
        False when the server aborted it (vLLM's abort output ends the stream)."""
        sim = self.sim
        key = int.from_bytes(utterance.take(n), "little")         # the segment's audio as sent
        prompt = Prompt([SOT, _language_id("en"), TRANSCRIBE, NO_TIMESTAMPS], salt=key)
        req = GenerationRequest(request_id=f"rt-{self.connection_id}-{sim.new_request_id()}",
                                model=sim.config.served_names[0], prompts=[prompt], n=1, stream=True,
                                temperature=0.0, max_tokens=min(SEGMENT_MAX_TOKENS, sim.config.max_model_len))
        seqs = sim.prepare(req)
        sim.admit(seqs, monotonic())
        self.seqs = seqs
        if out.prompt_tokens is None:            # vLLM's usage: the first output's prompt
            out.prompt_tokens = seqs[0].prompt_len + au.audio_tokens(n / SAMPLE_RATE)
        pending = []
        out.first = True                        # the segment's first delta: a space before it, after text
        try:
            for s, i in sim.stream(seqs, flush=True):
                if i.__class__ is int and i >= 0:
                    pending.append(s.pieces[i])
                    out.made += 1
                    continue
                if i.__class__ is slice:         # a stream interval's group: one output
                    group = s.pieces[i]
                    pending.extend(group)
                    out.made += len(group)
                    continue
                if pending:                      # the next token is not due yet: what is made goes out
                    self._delta(pending, out)
            if pending:
                self._delta(pending, out)
        except ClientDisconnected:
            if not req.aborted_by_server:
                raise                            # the client left (cleanup aborted it)
            if pending:                          # aborted by the server: what was made, then the done
                self._delta(pending, out)
            return False
        except BaseException as e:
            sim.cancel(seqs, "abort" if isinstance(e, (Disconnected, GeneratorExit, gevent.GreenletExit)) else "error")
            raise
        finally:
            self.seqs = None
        return True

    def _delta(self, pending: list, out: "Transcript") -> None:
        delta = "".join(pending)
        pending.clear()
        if out.first and out.text and delta and not delta[0].isspace():
            delta = " " + delta                  # segments' texts joined by a space, as the upload route's chunks
        out.first = False
        out.text.append(delta)
        self.send({"type": "transcription.delta", "delta": delta})


class Transcript:
    """What an utterance's transcription has sent: its deltas, tokens, prompt tokens (usage)."""
    __slots__ = ("text", "made", "prompt_tokens", "first")

    def __init__(self):
        self.text: list = []
        self.made = 0
        self.prompt_tokens = None
        self.first = True
