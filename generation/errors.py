"""Errors the simulator raises.  The core says *what* went wrong; the HTTP edge
(:mod:`blueprints.errors`) decides the status, the error ``type`` and the envelope from one
table, as vLLM's ``create_error_response`` maps its exception classes.

Every client-visible error is a :class:`SimulatorError` with a ``message`` (shown to the client
verbatim) and an optional ``param`` (the request field it names, e.g. ``messages[0].content``).
"""
from __future__ import annotations


_TYPES = {400: "BadRequestError", 401: "AuthenticationError", 403: "PermissionDeniedError",
          404: "NotFoundError", 413: "RequestEntityTooLarge", 422: "UnprocessableEntityError", 429: "RateLimitError"}


def error_type(status: int) -> str:
    """vLLM's error ``type`` for an HTTP status (the name of the openai SDK's exception class;
    unknown 4xx -> ``APIConnectionError`` as the reference reports, 5xx -> ``InternalServerError``)."""
    if status >= 500:
        return "InternalServerError"
    return _TYPES.get(status, "APIConnectionError")


# vLLM 0.34's Messages render route (scale_out/render/api_router.py): under /v1/messages, but
# vLLM's render router, whose errors are vLLM's ErrorResponse, never the Anthropic envelope
MESSAGES_RENDER_PATH = "/v1/messages/render"


def anthropic_envelope(path: str) -> bool:
    """Whether an error on ``path`` takes Anthropic's envelope: ``/v1/messages`` and the paths
    under it (its SDKs read ``error.message``), except :data:`MESSAGES_RENDER_PATH`."""
    return path == "/v1/messages" or (path.startswith("/v1/messages/") and path != MESSAGES_RENDER_PATH)


def body_too_large_message(limit: int) -> str:
    """The 413's message for a body over ``limit`` bytes: werkzeug's words, then the limit and
    the flag that sets it (the limit is the simulator's own: vLLM has none, so a client that
    worked against vLLM needs to know what to raise)."""
    return (f"The data value transmitted exceeds the capacity limit. The request body limit is {limit} bytes "
            f"(--max-request-body-size-mb {limit / 2 ** 20:g}).")


UNTRUSTED_TEMPLATE = ("Chat template is passed with request, but --trust-request-chat-template is not set. "
                      "Refused request with untrusted chat template.")      # vLLM's validate_chat_template


class SimulatorError(Exception):
    """Base of every client-visible error: ``message`` and the ``param`` it names (or None)."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param


class InvalidParam(SimulatorError):
    """A request field is wrong or missing; ``param`` names it.  The message is shown as it is:
    pydantic's words (:func:`generation.adapters.validation.validation_errors`) or a check of
    the simulator's own.  A check vLLM raises as ``VLLMValidationError`` is a :class:`Rejected`."""


class RequestInvalid(InvalidParam):
    """The request failed the validation vLLM does with pydantic before its handler runs (a
    field's type or bounds, the body's JSON): FastAPI's ``RequestValidationError``, which
    vLLM's ``validation_exception_handler`` (``serve/exception_handling/handlers/
    validation.py``, 0.15.1's ``api_server.py`` alike) answers with ``type`` "Bad Request", the
    status phrase, where errors raised while serving are "BadRequestError"."""
    type = "Bad Request"


def vllm_message(message: str, parameter: str | None = None, value=None) -> str:
    """``str()`` of vLLM 0.34's ``VLLMValidationError(message, parameter=, value=)``
    (``vllm/exceptions.py``: ``VLLMValidationError.__str__``), which ``create_error_response``
    (``serve/exception_handling/error_response.py``) sends as the message: `` (parameter=X,
    value=Y)`` appended, each part only when not None, the value as ``f"{value}"`` prints it."""
    extras = []
    if parameter is not None:
        extras.append(f"parameter={parameter}")
    if value is not None:
        extras.append(f"value={value}")
    return f"{message} ({', '.join(extras)})" if extras else message


class Rejected(InvalidParam):
    """A check vLLM 0.34 raises as ``VLLMValidationError(message, parameter=, value=)`` outside
    pydantic's validation (``SamplingParams``, the serving and rendering code, and the request
    models' own validators, whose ``VLLMValidationError`` is no ``ValueError``, so pydantic lets
    it through): the client reads :func:`vllm_message` and ``param`` is vLLM's ``parameter``."""

    def __init__(self, message: str, parameter: str | None = None, value=None):
        super().__init__(vllm_message(message, parameter, value), parameter)


class FieldNames:
    """``with FieldNames(*rules):`` an :class:`InvalidParam` raised inside names the field as the
    request spelled it: the first ``(pattern, replacement)`` whose pattern matches the start of
    ``param`` replaces that part (``re.Match.expand``), in ``param`` and in the message.  It maps
    a shared checker's chat-completions name onto the route's own (the Responses API's
    ``text.format`` for ``response_format.json_schema``, Anthropic's ``tools[i].input_schema``
    for ``tools[i].function.parameters``); other errors pass through.  Stateless: one instance per
    route, its patterns compiled once."""

    def __init__(self, *rules):
        import re
        self.rules = [(re.compile(pat), rep) for pat, rep in rules]

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if not isinstance(exc, InvalidParam) or not exc.param:
            return False
        for pat, rep in self.rules:
            m = pat.match(exc.param)
            if m:
                old, new = m.group(0), m.expand(rep)
                exc.param = new + exc.param[m.end():]
                exc.message = exc.message.replace(old, new)
                exc.args = (exc.message,)
                break
        return False


class ContextLengthError(InvalidParam):
    """Prompt plus completion do not fit ``--max-model-len``.  ``parameter`` / ``value``: vLLM's
    (its message ends in :func:`vllm_message`'s suffix), but ``param`` stays null, as case C07
    asks (vLLM 0.34 names ``input_tokens`` / ``input_text`` there)."""

    def __init__(self, message: str, parameter: str | None = None, value=None):
        super().__init__(vllm_message(message, parameter, value))


class ModelNotFound(SimulatorError):
    """The request names a model that is neither served nor a loaded LoRA adapter."""

    def __init__(self, model):
        super().__init__(f"The model `{'' if model is None else model}` does not exist.", "model")


class QueueFullError(SimulatorError):
    """The waiting queue cannot take the request's sequences (nothing was admitted)."""

    def __init__(self):
        super().__init__("Failed to enqueue request, waiting requests queue is full")


# vLLM 0.34's ``validate_json_request`` (``serve/utils/api_utils.py:310``) raises
# ``RequestValidationError(errors=[UNSUPPORTED_MEDIA])``; its validation handler
# (``serve/exception_handling/handlers/validation.py`` ``validation_exception_handler``) counts and
# indents the errors, and a str error has no ``loc``: ``param`` null, ``type`` "Bad Request".
UNSUPPORTED_MEDIA = "Unsupported Media Type: Only 'application/json' is allowed"
UNSUPPORTED_MEDIA_MESSAGE = f"1 validation error:\n  {UNSUPPORTED_MEDIA}"


class UnsupportedMediaType(SimulatorError):
    """A JSON route was sent a body whose Content-Type is not ``application/json``: vLLM's
    validation handler's 400 (:data:`UNSUPPORTED_MEDIA_MESSAGE`)."""
    type = "Bad Request"

    def __init__(self):
        super().__init__(UNSUPPORTED_MEDIA_MESSAGE)


class InjectedError(SimulatorError):
    """A failure the client asked for (``X-Return-Error``) or that failure injection drew: the
    status is the point of the error, so it travels with it."""

    def __init__(self, message: str, status: int, param: str | None = None):
        super().__init__(message, param)
        self.status = status


class APIError(SimulatorError):
    """An error that already carries its HTTP status (edge code: admin, LoRA, embeddings, tool
    validation).  New core code raises the domain errors above instead."""

    def __init__(self, message: str, status: int = 400, param: str | None = None,
                 type_: str | None = None):
        super().__init__(message, param)
        self.status = status
        self.type = type_ or error_type(status)

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.status}}


class QueueOverflow(APIError):
    """``--max-num-queued-reqs``: admitting the request would exceed the requests in flight
    (vLLM 0.34's ``AsyncLLM.check_admission`` raises ``QueueOverflowError``, a
    ``GracefulHTTPError``: 503 with the status phrase as ``type``, ``vllm/exceptions.py``)."""

    MESSAGE = ("The engine is currently busy and cannot accept new requests. Please try again later or on "
               "a different instance.")

    def __init__(self):
        super().__init__(self.MESSAGE, 503, None, "Service Unavailable")


class MaxQueuedTokens(APIError):
    """``--max-num-queued-tokens``: the prompt tokens still in prefill reached the limit (vLLM
    0.34's ``MaxQueuedTokensError``, a ``GracefulHTTPError``: 503)."""

    MESSAGE = ("The engine has reached its prefill token backlog limit. Please try again later or on a "
               "different instance.")

    def __init__(self):
        super().__init__(self.MESSAGE, 503, None, "Service Unavailable")


class EnginePaused(APIError):
    """A new request while the engine refuses new work: a ``/checkpoint/prepare`` with mode
    ``wait`` or ``abort`` until ``/checkpoint/restore`` (vLLM 0.34's
    ``EngineCore._reject_add_while_paused``: ``RequestError(code="engine_paused", retryable=True)``,
    which the API server raises as ``RetryableRequestError``: 503 ``ServiceUnavailableError``)."""

    MESSAGE = "Generation is paused. Please retry after it resumes."

    def __init__(self):
        super().__init__(self.MESSAGE, 503, None, "ServiceUnavailableError")


def rpc_failure(config, error: str) -> APIError:
    """A worker's failure to run a ``collective_rpc`` method as vLLM 0.34 answers it: the engine
    core's ``_handle_utility`` reports ``Call to collective_rpc method failed: <error>``, the
    client raises it as a plain ``Exception`` (``_process_utility_output``), and the route lets
    it reach the app's ``exception_handler``: ``create_error_response``'s 500
    ``InternalServerError``.  With more than one worker (tensor or data parallel: the ``mp``
    executor, ``ParallelConfig.__post_init__``) the executor wraps the worker's error
    (``MultiprocExecutor.collective_rpc``: ``Worker failed with error '...', please check the
    stack trace above for the root cause``); one worker runs it in process (``uni``)."""
    if config.tensor_parallel_size * config.data_parallel_size > 1:
        error = f"Worker failed with error '{error}', please check the stack trace above for the root cause"
    return APIError(f"Call to collective_rpc method failed: {error}", 500, None, "InternalServerError")
