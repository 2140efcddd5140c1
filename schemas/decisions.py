"""The request of ``POST /v1/decisions``, read as vLLM 0.34's pydantic model reads it.

vLLM's ``DecisionRequest`` (``vllm/entrypoints/openai/decisions/protocol.py``) and every model in
it forbid unknown keys (``extra="forbid"``) and take strict types (``StrictStr``, ``StrictBool``:
no ``1`` for ``true``, no number for a string).  Its fields, in order::

    model: StrictStr, at most 1,048,576 characters                       (required)
    input: StrictStr of at most 10,485,760 characters
           | list[DecisionInputMessage], at most 131,072                 (required)
    questions: list[PredicateQuestion | ChoiceQuestion | ScoreQuestion],
               1 to 200, told apart by "type"                            (required)
    safety_identifier: StrictStr of at most 128 characters | None = None
    joint: StrictBool = False
    cache_salt: str | None = None

A message is ``{"role": "user", "content": text | [{"type": "input_text", "text": text}, ...
at most 16,384], "type": "message"}``; a before-validator refuses a content list with an
``input_image`` part ("Decisions supports text input only; images are not supported").  Every
question has ``instructions`` (required) and ``name`` (a string, or left out: an explicit null is
refused by an after-validator); a choice question has 2 to 255 ``choices`` ``{"value": string or
boolean, "description": text = ""}`` with distinct values (``"true"`` and ``true`` differ), a
score question 2 to 10 ``levels`` ``{"label": text, "description": text = ""}``; texts other
than ``input``'s are at most 1,048,576 characters.  ``check_cache_salt_support`` checks
``cache_salt`` on the raw body first and raises vLLM's own ``VLLMValidationError`` (400, named
``cache_salt``).

pydantic then reports every error in field order (a model's unknown keys after its fields), each
union member's errors in turn (``input``'s string member at ``input.constrained-str``, which
vLLM's handler does not clean away), a question's errors below its tag (``questions.0.choice.
choices.1.value``), and a list past its maximum length as that one error, before its items; a
list under its minimum only when its items are valid; the after-validators only on a model whose
fields are valid.  vLLM's handler words them (:func:`generation.adapters.validation.
validation_errors`: the first 10, the rest counted).  Lists are read with the hub given a turn
every 2 ms (:func:`generation.adapters.generative_scoring.paced`): a 4 MiB body holds ~100,000
messages.
"""
from __future__ import annotations

from generation.adapters.decisions import DecisionQuestion, DecisionRequest
from generation.adapters.generative_scoring import paced
from generation.adapters.validation import Errors, literal_mismatch, validation_errors

from .common import salted_body

SHORT_TEXT = 1048576          # ShortText's max_length
INPUT_TEXT = 10485760         # InputText's
MAX_SAFETY_ID = 128
MAX_MESSAGES = 131072
MAX_PARTS = 16384
QUESTIONS = (1, 200)
CHOICES = (2, 255)
LEVELS = (2, 10)
TAGS = ("predicate", "choice", "score")
UNION_STR = "constrained-str"   # pydantic-core's name of a StrictStr member with a max_length

_STRING = ("string_type", "Input should be a valid string")
_BOOL = ("bool_type", "Input should be a valid boolean")
_LIST = ("list_type", "Input should be a valid list")
_MISSING = ("missing", "Field required")
_EXTRA = ("extra_forbidden", "Extra inputs are not permitted")
_TAG_CTX = {"discriminator": "'type'"}
_EXPECTED_TAGS = "'predicate', 'choice', 'score'"


def _text(errors: Errors, loc: tuple, value, limit: int) -> str | None:
    """A ``StrictStr`` of at most ``limit`` characters, or None with its error added."""
    if not isinstance(value, str):
        errors.add(loc, value, *_STRING)
        return None
    if len(value) > limit:
        errors.add(loc, value, "string_too_long", f"String should have at most {limit} characters",
                   {"max_length": limit})
        return None
    return value


def _sized_list(errors: Errors, loc: tuple, value, longest: int) -> bool:
    """Whether ``value`` is a list of at most ``longest`` items (else its one error is added:
    pydantic checks a list's length before its items)."""
    if not isinstance(value, list):
        errors.add(loc, value, *_LIST)
        return False
    if len(value) > longest:
        errors.add(loc, value, "too_long", f"List should have at most {longest} items after validation, not "
                   f"{len(value)}", {"field_type": "List", "max_length": longest, "actual_length": len(value)})
        return False
    return True


def _too_short(errors: Errors, loc: tuple, value: list, shortest: int) -> bool:
    """pydantic's ``too_short`` for a list of valid items shorter than ``shortest``."""
    if len(value) >= shortest:
        return False
    noun = "item" if shortest == 1 else "items"
    errors.add(loc, value, "too_short", f"List should have at least {shortest} {noun} after validation, not "
               f"{len(value)}", {"field_type": "List", "min_length": shortest, "actual_length": len(value)})
    return True


def _model(errors: Errors, loc: tuple, value, name: str) -> bool:
    """Whether ``value`` is an object, else pydantic's ``model_type`` for model ``name``."""
    if isinstance(value, dict):
        return True
    errors.add(loc, value, "model_type", f"Input should be a valid dictionary or instance of {name}",
               {"class_name": name})
    return False


def _field(errors: Errors, loc: tuple, obj: dict, key: str, read, *args):
    """The required field ``obj[key]`` as ``read(errors, its loc, value, *args)`` reads it, or
    None with pydantic's ``missing`` (the whole object as its input)."""
    if key in obj:
        return read(errors, (*loc, key), obj[key], *args)
    errors.add((*loc, key), obj, *_MISSING)
    return None


def _literal(errors: Errors, loc: tuple, value, expected: str) -> None:
    if not (isinstance(value, str) and value == expected):
        errors.add(loc, value, *literal_mismatch((expected,)).error)


def _extras(errors: Errors, loc: tuple, obj: dict, fields: tuple) -> None:
    """``extra="forbid"``: each unknown key, in the object's order, after the fields' errors."""
    for key, value in obj.items():
        if key not in fields:
            errors.add((*loc, key), value, *_EXTRA)


def _value_error(errors: Errors, loc: tuple, value, message: str) -> None:
    """A validator's ``ValueError``, as pydantic reports it (the exception in ``ctx``)."""
    errors.add(loc, value, "value_error", f"Value error, {message}", {"error": ValueError(message)})


def _texts_union(errors: Errors, loc: tuple, value, longest: int, part):
    """``InputText | list[...]`` (pydantic's smart union): the text, or the list read by
    ``part(errors, loc, index, item)``; else both members' errors, the string's first."""
    if isinstance(value, str) and len(value) <= INPUT_TEXT:
        return value
    branch = Errors()
    _text(branch, (*loc, UNION_STR), value, INPUT_TEXT)
    if _sized_list(branch, loc, value, longest):
        inner = Errors()
        items = [part(inner, loc, k, v) for k, v in enumerate(paced(value))]
        if not inner.count:
            return items
        branch.extend(inner)
    errors.extend(branch)
    return None


def _input_part(errors: Errors, loc: tuple, k: int, value) -> str | None:
    """``DecisionInputText``: its text."""
    loc = (*loc, k)
    if not _model(errors, loc, value, "DecisionInputText"):
        return None
    _field(errors, loc, value, "type", _literal, "input_text")
    text = _field(errors, loc, value, "text", _text, INPUT_TEXT)
    _extras(errors, loc, value, ("type", "text"))
    return text


def _message(errors: Errors, loc: tuple, k: int, value):
    """``DecisionInputMessage``: its content (a text or the list of its parts' texts)."""
    loc = (*loc, k)
    if not _model(errors, loc, value, "DecisionInputMessage"):
        return None
    content = value.get("content")
    if isinstance(content, list) and any(isinstance(p, dict) and p.get("type") == "input_image" for p in content):
        _value_error(errors, loc, value, "Decisions supports text input only; images are not supported")
        return None
    _field(errors, loc, value, "role", _literal, "user")
    content = _field(errors, loc, value, "content", _texts_union, MAX_PARTS, _input_part)
    if "type" in value:
        _literal(errors, (*loc, "type"), value["type"], "message")
    _extras(errors, loc, value, ("role", "content", "type"))
    return content


def _choice_value(errors: Errors, loc: tuple, value, _limit: int):
    """``StrictStr | StrictBool`` (no length bound): the value, or each member's error."""
    if isinstance(value, (str, bool)):
        return value
    errors.add(loc, value, *_STRING)
    errors.add(loc, value, *_BOOL)
    return None


def _option(errors: Errors, loc: tuple, value, model: str, key: str) -> tuple | None:
    """A ``ChoiceOption`` (``key`` "value": a string or a boolean) or a ``ScoreLevel`` (``key``
    "label": a text), with its ``description`` (default ""): ``(value, description)``."""
    if not _model(errors, loc, value, model):
        return None
    before = errors.count
    item = _field(errors, loc, value, key, _choice_value if key == "value" else _text, SHORT_TEXT)
    description = _text(errors, (*loc, "description"), value["description"], SHORT_TEXT) \
        if "description" in value else ""
    _extras(errors, loc, value, (key, "description"))
    return None if errors.count > before else (item, description)


def _options(errors: Errors, loc: tuple, value, bounds: tuple, model: str, key: str) -> list | None:
    """``choices`` or ``levels``: a list of ``bounds`` items."""
    if not _sized_list(errors, loc, value, bounds[1]):
        return None
    inner = Errors()
    items = [_option(inner, (*loc, k), v, model, key) for k, v in enumerate(value)]
    if inner.count:
        errors.extend(inner)
        return None
    return None if _too_short(errors, loc, value, bounds[0]) else items


def _question(errors: Errors, loc: tuple, value) -> DecisionQuestion | None:
    """One question, told apart by its ``type`` (pydantic's discriminated union)."""
    if not isinstance(value, dict):
        errors.add(loc, value, "model_attributes_type",
                   "Input should be a valid dictionary or object to extract fields from")
        return None
    if "type" not in value:
        errors.add(loc, value, "union_tag_not_found", "Unable to extract tag using discriminator 'type'", _TAG_CTX)
        return None
    tag = value["type"]
    if not (isinstance(tag, str) and tag in TAGS):
        shown = tag if isinstance(tag, str) else str(tag)
        errors.add(loc, value, "union_tag_invalid", f"Input tag '{shown}' found using 'type' does not match any of "
                   f"the expected tags: {_EXPECTED_TAGS}", {**_TAG_CTX, "tag": shown, "expected_tags": _EXPECTED_TAGS})
        return None
    loc = (*loc, tag)
    before = errors.count
    instructions = _field(errors, loc, value, "instructions", _text, SHORT_TEXT)
    name = value.get("name")
    if name is not None:
        name = _text(errors, (*loc, "name"), name, SHORT_TEXT)
    options: list | None = []
    fields = ("instructions", "name", "type")
    if tag != "predicate":
        key = "choices" if tag == "choice" else "levels"
        fields += (key,)
        options = _field(errors, loc, value, key, _options, CHOICES if tag == "choice" else LEVELS,
                         "ChoiceOption" if tag == "choice" else "ScoreLevel", "value" if tag == "choice" else "label")
    _extras(errors, loc, value, fields)
    if errors.count > before:
        return None
    # the after-validators: QuestionBase.validate_name, then ChoiceQuestion.validate_choices
    if "name" in value and name is None:
        _value_error(errors, loc, value, "name must be a string when provided")
        return None
    if tag == "choice" and len({(type(v), v) for v, _ in options}) != len(options):
        _value_error(errors, loc, value, "choice values must be distinct")
        return None
    return DecisionQuestion(tag, instructions, name, tuple(options))


def _questions(errors: Errors, loc: tuple, value) -> list | None:
    if not _sized_list(errors, loc, value, QUESTIONS[1]):
        return None
    inner = Errors()
    out = [_question(inner, (*loc, k), v) for k, v in enumerate(value)]
    if inner.count:
        errors.extend(inner)
        return None
    return None if _too_short(errors, loc, value, QUESTIONS[0]) else out


_FIELDS = ("model", "input", "questions", "safety_identifier", "joint", "cache_salt")


def load_decisions(body) -> DecisionRequest:
    """The typed request of a decoded JSON body.  Raises InvalidParam: ``cache_salt``'s own
    error first (``validate_cache_salt``, named ``cache_salt``), else pydantic's errors as vLLM's
    validation handler words them (``param`` the first one's location)."""
    errors = salted_body(body)
    model = _field(errors, (), body, "model", _text, SHORT_TEXT)
    text = _field(errors, (), body, "input", _texts_union, MAX_MESSAGES, _message)
    questions = _field(errors, (), body, "questions", _questions)
    safety = body.get("safety_identifier")
    if safety is not None:
        _text(errors, ("safety_identifier",), safety, MAX_SAFETY_ID)
    joint = body.get("joint", False)
    if not isinstance(joint, bool):
        errors.add(("joint",), joint, *_BOOL)
    _extras(errors, (), body, _FIELDS)
    if errors.count:
        raise validation_errors(errors.kept, total=errors.count)
    return DecisionRequest(model, text, questions, safety, joint, body.get("cache_salt"))
