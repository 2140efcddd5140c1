"""The audio APIs on the engine: vLLM's speech-to-text (``POST /v1/audio/transcriptions``,
``POST /v1/audio/translations``) and the reference's text-to-speech (``POST /v1/audio/speech``).

Speech to text, as vLLM 0.34 serves a Whisper model (``vllm/entrypoints/speech_to_text/``:
``transcription/protocol.py``, ``translation/protocol.py``, ``base/serving.py``):

* the upload is decoded (:func:`generation.content.audio.decode_upload`) and split into 30 s
  chunks, one engine request (one :class:`~generation.engine.request.Prompt`) each;
* each prompt is Whisper's decoder prompt: ``<|startofprev|>`` and the request's ``prompt``
  when given, then ``<|startoftranscript|><|lang|><|task|><|notimestamps|>`` (4 tokens); the
  engine's prompt tokens (and the prompt-token metrics) are these, as vLLM's for an
  encoder-decoder model; the audio's encoder tokens (``ceil(duration * 100)``) are added only to
  a stream's ``usage.prompt_tokens``, as vLLM does;
* the text is the engine's answer (``--mode random`` / ``dataset``: drawn from the seeded
  generator; ``temperature`` defaults to 0, greedy, keyed on the decoded samples: the same
  audio gives the same text, other audio another; ``--mode echo``: the request's ``prompt``);
  chunks are joined with a space (none for ``ja`` / ``zh``);
* ``response_format``: ``json`` and ``text`` are both vLLM's JSON ``{"text", "usage":
  {"type": "duration", "seconds": ceil(duration)}}`` (vLLM answers ``text`` as JSON too;
  translations carry no usage); ``verbose_json`` adds ``language``, ``duration`` and one
  segment per chunk; ``srt`` and ``vtt`` are vLLM's 400 (``Currently only support
  response_format: ...``), ``diarized_json`` the 400 a Whisper model gives;
* ``stream``: ``transcription.chunk`` / ``translation.chunk`` events, one per token, the last
  with ``finish_reason`` and ``stop_reason``; ``stream_include_usage`` /
  ``stream_continuous_usage_stats`` (form fields) as vLLM's; a request the server aborts
  (abort_requests, checkpoint prepare mode=abort) closes each cut chunk's request with a chunk
  of empty text, ``finish_reason`` ``abort`` and ``stop_reason`` null (vLLM's abort output), a
  non-streamed one answers with the text made.

Text to speech, as the reference's ``/v1/audio/speech`` (llm-d-inference-sim PR #640, after
vLLM-Omni): ``input`` is tokenized as a prompt; the answer is ``ceil(3.75 * text tokens /
speed)`` output tokens (80 ms codec frames at 12.5 Hz), run through the engine like any
answer (its timing, its metrics; greedy: the same input gives the same audio), then synthesized (:func:`generation.content.audio.synthesize`)
and encoded by libsndfile.

Free of Flask: the routes (:mod:`blueprints.audio`) hand in the form fields as strings.
"""
from __future__ import annotations

import base64
import json
import math
import time
import zlib
from dataclasses import dataclass, field
from types import SimpleNamespace

from generation.content import audio as au
from generation.content import logprobs as lp
from generation.engine.request import GenerationRequest, Prompt
from generation.engine.stream_interval import token_span
from ..errors import APIError, InvalidParam, Rejected
from .base import Adapter, check_limits, dumps, tokenize_texts
from .token_stream import Streamed, end_aborted, rendered_choices
from .extra_args import check_extra_args
from .fields import INT64_MAX, INT64_MIN, check_sampling_ranges
from .validation import Mismatch, body_not_an_object, literal_error, pydantic_error, read_bool, read_int

# Whisper's languages (vLLM's ISO639_1_SUPPORTED_LANGS, whisper_utils.py) and the other codes
# of the Whisper language map (transformers' LANGUAGES): accepted with a warning in vLLM
SUPPORTED_LANGUAGES = (
    "af ar hy az be bs bg ca zh hr cs da nl en et fi fr gl de el he hi hu is id it ja kn kk ko lv lt mk ms mr mi "
    "ne no fa pl pt ro ru sr sk sl es sw sv tl ta th tr uk ur vi cy").split()
OTHER_LANGUAGES = (
    "la ml te bn br eu mn sq pa si km sn yo so oc ka tg sd gu am yi lo uz fo ht ps tk nn mt sa lb my bo mg as tt "
    "haw ln ha ba jw su yue").split()
NO_SPACE_LANGUAGES = ("ja", "zh")
DEFAULT_LANGUAGE = "en"        # what the simulated language detection finds

# Whisper's special token ids (multilingual vocabulary): the decoder prompt's
SOT, TRANSLATE, TRANSCRIBE, PREV, NO_TIMESTAMPS, FIRST_LANGUAGE = 50258, 50358, 50359, 50361, 50363, 50259

TRANSCRIPTION_FORMATS = ("json", "text", "srt", "verbose_json", "vtt", "diarized_json")
TRANSLATION_FORMATS = ("json", "text", "srt", "verbose_json", "vtt")
SERVED_FORMATS = ("text", "json", "verbose_json", "diarized_json")


def validation_error(kind: str, loc: str, msg: str, value) -> InvalidParam:
    """vLLM 0.34's 400 for a form field pydantic refuses (:func:`fields.pydantic_error`)."""
    return pydantic_error(loc, value, (kind, msg))


def _read(form: dict, name: str, read, default):
    """A form field as pydantic reads its type (``read``: :func:`~.validation.read_bool`,
    :func:`~.validation.read_int`): a string pydantic does not take is its 400 on ``name``."""
    v = form.get(name)
    if v is None:
        return default
    try:
        return read(v)
    except Mismatch as e:
        raise pydantic_error(name, v, e.error) from None


def _bool(form: dict, name: str, default=False):
    return _read(form, name, read_bool, default)


def _int(form: dict, name: str, default=None):
    return _read(form, name, read_int, default)


def _float(form: dict, name: str, default=None):
    v = form.get(name)
    if v is None:
        return default
    try:
        out = float(v.strip())
    except ValueError:
        raise validation_error("float_parsing", name, "Input should be a valid number, unable to parse string as a "
                               "number", v) from None
    if not math.isfinite(out):
        raise validation_error("finite_number", name, "Input should be a finite number", v)
    return out


def _choice(form: dict, name: str, choices: tuple, default: str):
    v = form.get(name)
    if v is None:
        return default
    if v not in choices:
        raise literal_error(name, v, choices)
    return v


@dataclass
class SpeechToTextRequest:
    """vLLM's ``TranscriptionRequest`` / ``TranslationRequest`` as read from the form fields
    (strings, parsed as pydantic's lax mode parses them): the fields the simulator uses."""
    task: str                           # "transcribe" or "translate"
    audio: bytes = b""
    model: str | None = None
    language: str | None = None
    to_language: str | None = None
    prompt: str = ""
    response_format: str = "json"
    stream: bool = False
    stream_include_usage: bool = False
    stream_continuous_usage_stats: bool = False
    use_beam_search: bool = False
    n: int = 1
    temperature: float = 0.0
    seed: int | None = None
    max_completion_tokens: int | None = None
    timestamp_granularities: list = field(default_factory=list)

    @classmethod
    def from_form(cls, task: str, form: dict, audio: bytes | None, file_is_text: bool = False) -> "SpeechToTextRequest":
        """``form``: the text fields (name -> str, the last value of a repeated name except
        ``timestamp_granularities[]``, given as a list under that name); ``audio``: the ``file``
        part's bytes, None when missing.  Raises InvalidParam (400) naming the field; a
        ``file`` sent as a text field is vLLM's 422."""
        if file_is_text:
            raise APIError("Expected 'file' to be a file-like object, not 'str'.", 422, "file")
        if audio is None:
            raise validation_error("missing", "file", "Field required", None)
        formats = TRANSCRIPTION_FORMATS if task == "transcribe" else TRANSLATION_FORMATS
        r = cls(task=task, audio=audio)
        r.model = form.get("model") or None
        r.language = form.get("language") or None
        r.to_language = form.get("to_language") or None
        r.prompt = form.get("prompt") or ""
        r.response_format = _choice(form, "response_format", formats, "json")
        r.stream = _bool(form, "stream")
        r.stream_include_usage = _bool(form, "stream_include_usage")
        r.stream_continuous_usage_stats = _bool(form, "stream_continuous_usage_stats")
        r.use_beam_search = _bool(form, "use_beam_search")
        r.n = _int(form, "n", 1)
        r.temperature = _float(form, "temperature", 0.0)
        knobs = {name: _float(form, name) for name in ("top_p", "min_p", "frequency_penalty", "presence_penalty",
                                                       "repetition_penalty", "length_penalty")}
        knobs["top_k"] = _int(form, "top_k")
        # vLLM builds SamplingParams from them, whose checks are chat's (the same 400s)
        check_sampling_ranges(SimpleNamespace(temperature=r.temperature, **knobs))
        r.seed = _int(form, "seed")
        if r.seed is not None and not INT64_MIN <= r.seed <= INT64_MAX:
            from .fields import check_seed
            check_seed(r.seed)
        r.max_completion_tokens = _int(form, "max_completion_tokens")
        grans = form.get("timestamp_granularities[]") or []
        for g in grans:
            if g not in ("word", "segment"):
                raise literal_error("timestamp_granularities[]", g, ("word", "segment"))
        r.timestamp_granularities = list(grans)
        # vLLM's model validator: stream options only with a stream; vllm_xargs as JSON
        if not r.stream:
            for name in ("stream_include_usage", "stream_continuous_usage_stats"):
                if getattr(r, name):
                    raise Rejected("Stream options can only be defined when `stream=True`.", name)
        xargs = form.get("vllm_xargs")
        if xargs is not None:
            try:
                parsed = json.loads(xargs)
            except json.JSONDecodeError as e:
                raise InvalidParam(f"Failed to parse vllm_xargs. Must be valid JSON: {e}", "vllm_xargs") from None
            except RecursionError:      # vLLM's json.loads fails so too, unhandled (a 500 there)
                raise InvalidParam("Failed to parse vllm_xargs. Must be valid JSON: nested too deeply",
                                   "vllm_xargs") from None
            # then pydantic's type (dict[str, str | int | float | list[...]]) and, as the
            # SamplingParams' extra_args, vLLM's _verify_extra_args (integers within 64 bits)
            check_extra_args(parsed)
        return r


def validate_language(language: str | None) -> str | None:
    """Whisper's check (vLLM ``SupportsTranscription.validate_language``): a supported ISO 639-1
    code, or another code of Whisper's map (vLLM logs a warning); anything else is the 400
    ``Unsupported language: 'xx'.  Must be one of [...]`` (a ValueError: no ``param``)."""
    if language is None or language in SUPPORTED_LANGUAGES or language in OTHER_LANGUAGES:
        return language
    raise InvalidParam(f"Unsupported language: {language!r}.  Must be one of {SUPPORTED_LANGUAGES!r}.", None)


def _language_id(language: str) -> int:
    codes = SUPPORTED_LANGUAGES + OTHER_LANGUAGES
    return FIRST_LANGUAGE + (codes.index(language) if language in codes else 0)


class SpeechToTextAdapter(Adapter):
    """Transcriptions and translations (``body``: a :class:`SpeechToTextRequest`)."""
    cache_threshold_header = False

    def body_request_id(self):
        return None

    def check(self) -> None:
        """vLLM's checks in its order, before the upload is decoded: beam search with a stream,
        the model, the response format (``srt``/``vtt``: not served; ``diarized_json``: not by
        Whisper), ``verbose_json`` with a stream, ``max_completion_tokens``, the language.  All
        but the model's are ``create_error_response(message)`` or a ValueError in vLLM 0.34
        (speech_to_text/base/serving.py l. 437-485, 275; interfaces.py ``validate_language``):
        400s whose ``param`` is null."""
        sim, b = self.sim, self.body
        if b.stream and b.use_beam_search:
            raise InvalidParam("Streaming is not currently supported with beam search", None)
        self.model, self.lora = sim.resolve_model(b.model)
        if b.response_format not in SERVED_FORMATS:
            raise InvalidParam("Currently only support response_format: `text`, `json`, `verbose_json` or "
                               "`diarized_json`", None)
        if b.response_format == "diarized_json":
            raise InvalidParam(f"Currently do not support diarized_json for {self.model}", None)
        if b.response_format == "verbose_json" and b.stream:
            raise InvalidParam("verbose_json format doesn't support streaming case", None)
        check_limits(b.max_completion_tokens, False, None, "max_completion_tokens")
        b.language = validate_language(b.language)
        if b.to_language:
            b.to_language = validate_language(b.to_language)

    def build_from_clip(self, rid: str, clip: au.Clip) -> GenerationRequest:
        """The engine request of a decoded upload: one prompt per 30 s chunk (see the module)."""
        sim, b = self.sim, self.body
        self.clip = clip
        self.language = b.language or DEFAULT_LANGUAGE
        head = []
        if b.prompt:
            sim.check_prompt_chars(len(b.prompt), "prompt")
            head = [PREV] + list(tokenize_texts(sim, [b.prompt], False, "prompt")[0][0])
        task_id = TRANSCRIBE if b.task == "transcribe" else TRANSLATE
        ids = head + [SOT, _language_id(self.language), task_id, NO_TIMESTAMPS]
        echo = sim.config.mode == "echo"
        prompts = []
        self.offsets = []
        for k, (start, _length) in enumerate(clip.chunks()):
            p = Prompt(list(ids), text=b.prompt or None, salt=int.from_bytes(clip.key, "little") + k)
            if echo:
                p.echo_ids, p.echo_pieces = sim.tokenizer.encode_lossless(b.prompt)
            prompts.append(p)
            self.offsets.append(start)
        # vLLM's get_max_tokens: at most the context window (the decoder prompt is not counted
        # without beam search); a form field may hold 4,300 digits, past a float's range
        limit = b.max_completion_tokens
        self.req = GenerationRequest(
            request_id=rid, model=self.model, lora=self.lora, prompts=prompts, n=1,
            max_tokens=None if limit is None else min(limit, sim.config.max_model_len), stream=b.stream,
            seed=b.seed, temperature=b.temperature, use_beam_search=b.use_beam_search)
        return self.req

    def external_ids(self, req) -> tuple:
        """vLLM's speech-to-text serving: ``<task>-<id>``, one engine request per chunk
        (``-<k>`` when there are several)."""
        rid = self.request_id
        return (rid,) if len(req.prompts) == 1 else tuple(f"{rid}-{k}" for k in range(len(req.prompts)))

    @property
    def separator(self) -> str:
        return "" if self.language in NO_SPACE_LANGUAGES else " "

    @property
    def request_id(self) -> str:
        return f"{self.body.task}-{self.req.request_id}"

    def prompt_tokens(self, seqs) -> int:
        """A stream's ``usage.prompt_tokens`` as vLLM's: the (last) decoder prompt's tokens plus
        the audio's encoder tokens (``ceil(duration * 100)``)."""
        return seqs[-1].prompt_len + au.audio_tokens(self.clip.duration_s)

    def render(self, seqs) -> dict:
        b = self.body
        text = self.separator.join(s.output_text() for s in seqs)
        if b.response_format == "verbose_json":
            segments = [self._segment(k, s) for k, s in enumerate(seqs)]
            out = {"duration": self.clip.duration_s, "language": self.language,
                   "text": self.separator.join(seg["text"] for seg in segments), "segments": segments,
                   "words": None}
            return out
        out = {"text": text}
        if b.task == "transcribe":
            out["usage"] = {"type": "duration", "seconds": int(math.ceil(self.clip.duration_s))}
        return out

    def _segment(self, k: int, seq) -> dict:
        """One ``verbose_json`` segment per chunk: its text, token ids, the mean of the
        simulated token logprobs, and vLLM's compression ratio (UTF-8 length over its zlib
        length)."""
        text = seq.output_text()
        raw = text.encode()
        n = len(seq.pieces)
        start = float(self.offsets[k])          # vLLM's float fields: 0.0, not 0
        chunks = self.clip.chunks()
        return {"id": k, "avg_logprob": sum(lp.logprob(i) for i in range(n)) / n if n else 0.0,
                "compression_ratio": len(raw) / len(zlib.compress(raw)), "end": float(start + chunks[k][1]),
                "no_speech_prob": None, "seek": int(start), "start": start,
                "temperature": self.body.temperature, "text": text, "tokens": list(seq.ids)}

    def stream(self, seqs):
        """vLLM's speech-to-text SSE: one chunk per token (a chunk after the first one's adds the
        separator to its first text), the last token's carrying ``finish_reason`` and
        ``stop_reason``; running usage with ``stream_continuous_usage_stats``; the usage chunk
        with ``stream_include_usage`` (or ``--enable-force-include-usage``); ``[DONE]``."""
        sim, b = self.sim, self.body
        include_usage = sim.config.enable_force_include_usage or b.stream_include_usage
        continuous = include_usage and b.stream_continuous_usage_stats
        obj = "transcription.chunk" if b.task == "transcribe" else "translation.chunk"
        head = (b'data: {"id":' + dumps(self.request_id) + b',"object":"' + obj.encode() + b'","created":' +
                str(int(time.time())).encode() + b',"model":' + dumps(self.req.model) + b',"choices":[')
        prompt_tokens = self.prompt_tokens(seqs)
        made = [0]
        sep = self.separator
        started = set()
        cut_now = set()                 # the chunks an abort cut: their tokens then close apart
        out = []
        put = out.append

        def chunk(seq, k) -> bytes:
            a, b = token_span(k)        # one token, or a stream interval's group: one chunk
            made[0] += b - a
            text = "".join(seq.pieces[a:b])
            if seq.index > 0 and seq.index not in started and text:
                text = sep + text
                started.add(seq.index)
            last = b == len(seq.pieces) and seq.index not in cut_now
            choice = {"delta": {"content": text}}
            if last:
                choice["finish_reason"] = seq.finish_reason
                choice["stop_reason"] = seq.stop_reason
            body = head + dumps(choice) + b"]"
            if continuous:
                body += b',"usage":' + dumps({"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + made[0],
                                              "completion_tokens": made[0]})
            return body + b"}\n\n"

        # the chunks' requests run together; their events go out chunk by chunk, in order, as
        # vLLM reads its per-chunk generators one after another
        waiting = {s.index: [] for s in seqs}
        ends = {s.index: len(s.pieces) - 1 for s in seqs}
        current = [0]

        def release() -> bytes:
            done = []
            while current[0] < len(seqs):
                i = current[0]
                for s, k in waiting[i]:
                    done.append(chunk(s, k))
                waiting[i].clear()
                if not finished[i]:
                    break
                if ends[i] < 0:          # no tokens: the closing chunk alone
                    s = seqs[i]
                    done.append(head + dumps({"delta": {"content": ""}, "finish_reason": s.finish_reason,
                                              "stop_reason": s.stop_reason}) + b"]}\n\n")
                current[0] += 1
            return b"".join(done)

        def token(s, k) -> bytes:
            # held until the earlier chunks' requests are out; with one chunk, a token schedule's
            # renderer in the server's hub too
            waiting[s.index].append((s, k))
            if token_span(k)[1] - 1 == ends[s.index]:
                finished[s.index] = True
            return release() if s.index == current[0] or finished[s.index] else b""

        finished = {s.index: not s.pieces for s in seqs}
        streamed = Streamed(len(seqs))      # tokens each chunk's request made, for an abort (end_aborted)
        yield from rendered_choices(sim, seqs, token, out, streamed)
        cut = end_aborted(self.req, seqs, streamed)
        for i in finished:
            finished[i] = True
        if cut:
            # vLLM's abort output of each chunk's request (no new tokens, finish_reason "abort",
            # stop_reason null): base/serving.py _speech_to_text_stream_generator sends a chunk
            # for any output with a finish_reason, its text empty (no separator); the tokens a
            # later chunk's request made before it go out first, as its generator is read
            cut_now.update(cut)
            for i in cut:
                ends[i] = -1            # (its held tokens released, then the closing chunk)
        put(release())
        if include_usage:
            total = sum(s.completion_tokens for s in seqs)
            put(b'data: {"id":' + dumps(self.request_id) + b',"object":"' + obj.encode() + b'","created":' +
                str(int(time.time())).encode() + b',"model":' + dumps(self.req.model) + b',"choices":[],"usage":' +
                dumps({"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + total,
                       "completion_tokens": total}) + b"}\n\n")
        put(b"data: [DONE]\n\n")
        yield b"".join(out)


# ---- text to speech ---------------------------------------------------------------------------------

SPEECH_FIELDS = {"input": str, "model": str, "voice": str, "instructions": str, "response_format": str,
                 "speed": (int, float), "stream": bool, "stream_format": str}


@dataclass
class SpeechRequest:
    """The reference's ``CreateSpeechRequest`` (``input`` required; other fields optional)."""
    input: str
    model: str | None = None
    voice: str | None = None
    instructions: str = ""
    response_format: str = "wav"
    speed: float | None = None
    stream: bool = False
    stream_format: str | None = None

    @classmethod
    def from_json(cls, body) -> "SpeechRequest":
        """Raises InvalidParam (400) naming the field: not an object, a field of the wrong JSON
        type, ``input`` missing or empty (the reference's ``input is required``), an unknown
        ``response_format`` or ``stream_format``, ``speed`` outside 0.25 .. 4.0, a stream in a
        format other than ``pcm`` / ``wav`` or with a speed other than 1 (the reference's
        messages)."""
        if not isinstance(body, dict):
            raise body_not_an_object(body)
        for name, kind in SPEECH_FIELDS.items():
            v = body.get(name)
            if v is not None and (not isinstance(v, kind) or (kind is not bool and isinstance(v, bool))):
                want = {str: "a string", bool: "a boolean"}.get(kind, "a number")
                raise InvalidParam(f"{name}: must be {want}", name)
        if not body.get("input"):          # missing, null or "": no speech to make (OpenAI's 400 too)
            raise InvalidParam("input is required", "input")
        r = cls(input=body["input"], model=body.get("model") or None, voice=body.get("voice"),
                instructions=body.get("instructions") or "", stream=bool(body.get("stream")),
                stream_format=body.get("stream_format"))
        if body.get("response_format") is not None:
            r.response_format = body["response_format"]
        if r.response_format not in au.SPEECH_FORMATS:
            raise InvalidParam(f'unsupported response_format "{r.response_format}"', "response_format")
        if r.stream_format is not None and r.stream_format not in ("sse", "audio"):
            raise InvalidParam(f'unsupported stream_format "{r.stream_format}"', "stream_format")
        if r.streaming and r.response_format not in ("pcm", "wav"):
            raise InvalidParam(f'streaming speech requires response_format "pcm" or "wav", got "{r.response_format}"',
                               "response_format")
        speed = body.get("speed")
        if speed is not None:
            if not 0.25 <= speed <= 4.0:
                raise InvalidParam("speed must be between 0.25 and 4.0", "speed")
            if r.streaming and speed != 1.0:
                raise InvalidParam("streaming speech does not support speed adjustment", "speed")
            r.speed = float(speed)
        return r

    @property
    def streaming(self) -> bool:
        return self.stream or self.stream_format is not None


class SpeechAdapter(Adapter):
    """``/v1/audio/speech`` (``body``: a :class:`SpeechRequest`)."""
    cache_threshold_header = False

    def body_request_id(self):
        return None

    def build(self, rid: str, force_cache_threshold: bool = False) -> GenerationRequest:
        sim, b = self.sim, self.body
        model, lora = sim.resolve_model(b.model)
        text = b.input if not b.instructions else b.instructions + "\n" + b.input
        ids, _pieces = tokenize_texts(sim, [text], True, "input")[0]
        prompt = Prompt(list(ids), text=text)
        room = sim.config.max_model_len - len(ids)
        frames = min(au.speech_tokens(len(ids), b.speed or 1.0), max(room, 1))
        self.req = GenerationRequest(request_id=rid, model=model, lora=lora, prompts=[prompt], n=1,
                                     max_tokens=frames, min_tokens=frames, ignore_eos=True, stream=b.streaming,
                                     temperature=0.0)     # the same input, the same audio
        self.seed = sim.config.seed or 0
        return self.req

    def usage(self, seqs) -> dict:
        """The reference's speech usage: input tokens (all text), output tokens (audio frames)."""
        p, c = seqs[0].prompt_len, sum(s.completion_tokens for s in seqs)
        return {"input_tokens": p, "output_tokens": c, "total_tokens": p + c,
                "input_token_details": {"text_tokens": p, "audio_tokens": 0}}

    def usage_headers(self, seqs) -> dict:
        """vLLM-Omni's usage headers of a non-streamed answer (the reference's)."""
        u = self.usage(seqs)
        return {"x-vllm-omni-input-tokens": str(u["input_tokens"]), "x-vllm-omni-output-tokens": str(u["output_tokens"]),
                "x-vllm-omni-total-tokens": str(u["total_tokens"]),
                "x-vllm-omni-input-text-tokens": str(u["input_token_details"]["text_tokens"]),
                "x-vllm-omni-input-audio-tokens": str(u["input_token_details"]["audio_tokens"])}

    @property
    def media_type(self) -> str:
        return au.SPEECH_FORMATS[self.body.response_format][2]

    def work(self, seqs) -> tuple[int, str, str]:
        """``--max-request-work``: an audio frame is 1,920 samples, 3,840 bytes of 16-bit PCM, 60 of
        the budget's 64-byte entries (a text token is one).  vLLM-Omni has no such cap; a 48 KB
        input with a 32k context made 24,000 frames, a 95 MB answer, and held the hub 6-12 s."""
        frames = sum(s.completion_tokens for s in seqs)
        return (frames * au.PCM_ENTRIES_PER_FRAME,
                f"ceil(3.75 x input tokens / speed) audio frames x {au.PCM_ENTRIES_PER_FRAME}", "input")

    def render_audio(self, seqs) -> bytes:
        """The whole answer synthesized and encoded in the hub's thread pool (a long answer is
        seconds of it)."""
        return au.off_hub(au.encode_speech, seqs[0].ids, self.seed, self.body.response_format)

    def stream(self, seqs):
        """``stream_format: "audio"``: the raw bytes (a ``wav`` header first), the frames of the
        tokens due at each point in one write; SSE (``stream: true`` or ``stream_format:
        "sse"``): a ``speech.audio.delta`` event per write (base64 audio, its format), then
        ``speech.audio.done`` with the usage."""
        b = self.body
        sse = b.stream_format != "audio"
        pending = [au.stream_header(b.response_format)]
        ids = []
        seq = seqs[0]

        def flush() -> bytes:
            data = pending[0] + (au.stream_frames(ids, self.seed) if ids else b"")
            pending[0] = b""
            ids.clear()
            if not data:
                return b""
            if not sse:
                return data
            event = {"type": "speech.audio.delta", "audio": base64.b64encode(data).decode(),
                     "response_format": b.response_format}
            return b"event: speech.audio.delta\ndata: " + dumps(event) + b"\n\n"

        for s, k in self.sim.stream([seq], flush=True):
            if k.__class__ is int and k >= 0:
                ids.append(s.ids[k])
                continue
            if k.__class__ is slice:        # a stream interval's group
                ids.extend(s.ids[k])
                continue
            data = flush()
            if data:
                yield data
            if k.__class__ is not int:
                yield k
        tail = flush()
        if sse:
            tail += (b"event: speech.audio.done\ndata: " +
                     dumps({"type": "speech.audio.done", "usage": self.usage(seqs)}) + b"\n\n")
        if tail:
            yield tail

    def stream_error(self, body: dict) -> bytes:
        if self.body.stream_format == "audio":
            return b""
        return b"event: error\ndata: " + dumps(body) + b"\n\n"
