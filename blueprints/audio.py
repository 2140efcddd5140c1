"""The audio routes (:mod:`generation.adapters.audio`): vLLM's ``POST /v1/audio/transcriptions``
and ``POST /v1/audio/translations`` (multipart uploads) and the reference's
``POST /v1/audio/speech`` (JSON in, audio out).

They run the serving pipeline's steps (:func:`blueprints.serving.handle`) on their own bodies:
request id, header checks (``X-Return-Error``, failure injection), the request's own checks,
``Simulator.prepare``, admission, then a stream or the finished answer, so the engine's
scheduling, latency and metrics are the same as for chat and completions.  An upload is
bounded by ``--max-request-body-size-mb`` (werkzeug's 413, default 4 MiB), by Starlette's form
limits (:class:`FormLimit`: 1,000 fields, 1,000 files, 1 MiB a field) and by vLLM's
``VLLM_MAX_AUDIO_CLIP_FILESIZE_MB`` (25) and decode limits (400s); it is decoded in the hub's
thread pool.
"""
from __future__ import annotations

from time import monotonic

import orjson
from flask import Blueprint, Response, current_app, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge
from werkzeug.datastructures import FileStorage
from werkzeug.formparser import FormDataParser, MultiPartParser

from generation.adapters.audio import SpeechAdapter, SpeechRequest, SpeechToTextAdapter, SpeechToTextRequest
from generation.adapters.base import check_work
from generation.content import audio as au
from generation.engine.simulator import ClientDisconnected
from generation.errors import InvalidParam, Rejected

from .common import (header_checks, parse_json_body, received_at, request_id, response_headers,
                     run_to_completion, sse_body)
from .serving import SSE_BASE_HEADERS, error_body, reply_to_error
from .streaming import DP_SPREAD_KEY

bp = Blueprint("audio", __name__)

JSON = ("Content-Type", "application/json")


@bp.post("/v1/audio/transcriptions")
def create_transcription():
    """vLLM's transcription API (Whisper): see :mod:`generation.adapters.audio`."""
    return _speech_to_text("transcribe")


@bp.post("/v1/audio/translations")
def create_translation():
    """vLLM's translation API (Whisper, into English): see :mod:`generation.adapters.audio`."""
    return _speech_to_text("translate")


@bp.post("/v1/audio/speech")
def create_speech():
    """The reference's text-to-speech API: see :mod:`generation.adapters.audio`."""
    environ = request.environ
    entry = monotonic()
    try:
        sim = current_app.extensions["simulator"]
        body = SpeechRequest.from_json(parse_json_body(environ, current_app.config["MAX_CONTENT_LENGTH"]))
        adapter = SpeechAdapter(sim, body)
        rid = request_id(sim, None, environ)
        header_checks(sim, environ)
        req = adapter.build(rid)
        fmt_headers = [("Content-Type", "text/event-stream; charset=utf-8" if body.stream_format != "audio"
                        else adapter.media_type)]

        def finished(seqs):
            data = adapter.render_audio(seqs)
            return [data], [("Content-Type", adapter.media_type), ("Content-Length", str(len(data))),
                            *adapter.usage_headers(seqs).items()]

        return _run(sim, adapter, req, environ, entry, finished,
                    list(fmt_headers) if req.stream else None)
    except HTTPException:
        raise
    except Exception as err:      # noqa: BLE001 - rendered as every generation API renders errors
        return _error(err, environ)


# Starlette's form limits, which FastAPI's ``request.form()`` applies to vLLM's ``Form()`` routes
# (``starlette/formparsers.py``: 1,000 files, 1,000 fields, 1 MiB a field), where werkzeug's own
# (Flask's ``MAX_FORM_PARTS`` 1,000 parts of either kind, ``MAX_FORM_MEMORY_SIZE`` 500 kB) answer
# a 413 that named the request body limit for a body of a few kilobytes
MAX_FORM_FILES = 1000
MAX_FORM_FIELDS = 1000
MAX_FORM_PART_SIZE = 1024 * 1024


class FormLimit(Exception):
    """A form past Starlette's limits: its ``MultiPartException`` message, which Starlette raises
    as its ``HTTPException(400)`` and FastAPI's default handler answers ``{"detail": message}``
    (vLLM's own handler is registered for FastAPI's subclass only)."""


class _StarletteMultiPart(MultiPartParser):
    """werkzeug's multipart parsing (its sans-IO decoder, the same events and containers as
    ``MultiPartParser.parse``) with Starlette's limits, each checked as its part starts, as
    Starlette does: a 2 MB body of 40,000 tiny fields had been parsed whole (0.65 s of the hub)
    before its fields were counted."""

    def parse(self, stream, boundary, content_length):
        from werkzeug.sansio.multipart import Data, Epilogue, Field, File, MultipartDecoder, NeedData
        decoder = MultipartDecoder(boundary, max_form_memory_size=MAX_FORM_PART_SIZE)
        fields, files = [], []
        part = container = None
        size = 0
        while True:
            data = stream.read(self.buffer_size)
            try:
                decoder.receive_data(data or None)
                event = decoder.next_event()
                while not isinstance(event, (Epilogue, NeedData)):
                    if isinstance(event, Field):
                        if len(fields) >= MAX_FORM_FIELDS:
                            raise FormLimit(f"Too many fields. Maximum number of fields is {MAX_FORM_FIELDS}.")
                        part, container, size = event, [], 0
                    elif isinstance(event, File):
                        if len(files) >= MAX_FORM_FILES:
                            raise FormLimit(f"Too many files. Maximum number of files is {MAX_FORM_FILES}.")
                        part, size = event, None
                        container = self.start_file_streaming(event, content_length)
                    elif isinstance(event, Data):
                        if size is not None:
                            size += len(event.data)
                            if size > MAX_FORM_PART_SIZE:
                                raise RequestEntityTooLarge()
                            container.append(event.data)
                        else:
                            container.write(event.data)
                        if not event.more_data:
                            if isinstance(part, Field):
                                value = b"".join(container).decode(self.get_part_charset(part.headers), "replace")
                                fields.append((part.name, value))
                            else:
                                container.seek(0)
                                files.append((part.name, FileStorage(container, part.filename, part.name,
                                                                     headers=part.headers)))
                    event = decoder.next_event()
            except RequestEntityTooLarge:
                raise FormLimit(f"Part exceeded maximum size of {MAX_FORM_PART_SIZE // 1024}KB.") from None
            if not data:
                return self.cls(fields), self.cls(files)


class _StarletteForm(FormDataParser):
    """Form parsing with Starlette's multipart limits; a URL-encoded form (which cannot carry
    the upload) bounded by its field count."""

    def __init__(self, *args, **kwargs):
        kwargs.update(max_form_memory_size=None, max_form_parts=None)
        super().__init__(*args, **kwargs)

    def _parse_urlencoded(self, stream, mimetype, content_length, options):
        # a URL-encoded body never holds the file: its fields are read only while they are few
        # (vLLM reads them all; a 4 MB body of a million fields held the hub 1 s), else none
        raw = stream.read()
        if raw.count(b"&") >= MAX_FORM_FIELDS:
            return stream, self.cls(), self.cls()
        from urllib.parse import parse_qsl
        items = parse_qsl(raw.decode("utf-8", "replace"), keep_blank_values=True)
        return stream, self.cls(items), self.cls()

    def _parse_multipart(self, stream, mimetype, content_length, options):
        boundary = options.get("boundary", "").encode("ascii")
        if not boundary:
            raise ValueError("Missing boundary")
        parser = _StarletteMultiPart(stream_factory=self.stream_factory, cls=self.cls)
        form, files = parser.parse(stream, boundary, content_length)
        return stream, form, files


def _read_form():
    """``(fields, audio bytes or None, file sent as text)`` of the multipart body: each text
    field's last value (``timestamp_granularities[]`` as the list of its values)."""
    request.form_data_parser_class = _StarletteForm
    form = request.form
    fields = {k: form.getlist(k)[-1] for k in form.keys() if k != "timestamp_granularities[]"}
    if "timestamp_granularities[]" in form:
        fields["timestamp_granularities[]"] = form.getlist("timestamp_granularities[]")
    upload = request.files.get("file")
    audio = upload.read() if upload is not None else None
    return fields, audio, upload is None and "file" in form


def _speech_to_text(task: str):
    environ = request.environ
    entry = monotonic()
    try:
        sim = current_app.extensions["simulator"]
        try:
            fields, audio, file_is_text = _read_form()
        except FormLimit as e:
            return Response(orjson.dumps({"detail": str(e)}), status=400, mimetype="application/json")
        body = SpeechToTextRequest.from_form(task, fields, audio, file_is_text)
        if len(body.audio) > au.MAX_CLIP_FILESIZE_MB * au.MIB:       # vLLM reads the upload with this limit first
            # read_upload_with_limit's VLLMValidationError (speech_to_text/base/utils.py l. 43-48)
            raise Rejected("Maximum file size exceeded", "audio_filesize_mb", len(body.audio) / au.MIB)
        adapter = SpeechToTextAdapter(sim, body)
        rid = request_id(sim, None, environ)
        header_checks(sim, environ)
        adapter.check()
        try:
            clip = au.off_hub(au.decode_upload, body.audio)
        except au.AudioError as e:      # vLLM's load_audio ValueErrors: 400s without a param
            raise InvalidParam(str(e), None) from None
        req = adapter.build_from_clip(rid, clip)

        def finished(seqs):
            data = orjson.dumps(adapter.render(seqs))
            return [data], [JSON, ("Content-Length", str(len(data)))]

        return _run(sim, adapter, req, environ, entry, finished, SSE_BASE_HEADERS if req.stream else None)
    except HTTPException:
        raise
    except Exception as err:      # noqa: BLE001
        return _error(err, environ)


def _run(sim, adapter, req, environ, entry: float, finished, stream_headers):
    """Prepare, admit, then stream (``stream_headers`` given) or wait and render
    (``finished(seqs) -> (body parts, headers)``), as :func:`blueprints.serving.handle`."""
    req.external_ids = adapter.external_ids(req)
    seqs = sim.prepare(req)
    check_work(sim, *adapter.work(seqs))
    extra = response_headers(req.request_id, sim, environ)
    arrived = received_at(environ)
    if sim.engine is not None and (arrived is None or entry < arrived):
        arrived = entry
    sim.admit(seqs, arrived, spread=environ.get(DP_SPREAD_KEY))     # (30 s chunks: engine requests each)
    try:
        if stream_headers is not None:
            def error_frame(err) -> bytes:
                return adapter.stream_error(error_body(err, "openai"))

            stream = sse_body(adapter.stream(seqs), sim, seqs, error_frame=error_frame, environ=environ)
            return Response(stream, status=200, headers=[*extra.items(), *stream_headers], direct_passthrough=True)
        # aborted by the server: vLLM's speech-to-text (base/serving.py, non-streaming) joins the
        # text of every chunk's outputs, the abort output's empty text last, and answers 200
        run_to_completion(sim, seqs, environ, aborted_answers=isinstance(adapter, SpeechToTextAdapter))
        body, headers = finished(seqs)
    except BaseException as e:    # the client left (an abort), or the server failed it (an error)
        sim.cancel(seqs, "abort" if isinstance(e, (ClientDisconnected, GeneratorExit)) else "error")
        raise
    return Response(body, status=200, headers=[*extra.items(), *headers], direct_passthrough=True)


def _error(err, environ) -> Response:
    status, headers, body = reply_to_error(err, "openai", environ, current_app.extensions["simulator"].config)
    return Response(body, status=status, headers=headers, direct_passthrough=True)
