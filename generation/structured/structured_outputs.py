"""vLLM 0.33's ``structured_outputs`` request field (chat and completions) and Anthropic's
``output_config.format``, turned into the constraint the engine applies to an answer.

vLLM's ``StructuredOutputsParams`` takes exactly one of ``json`` (a JSON Schema, object or JSON
string), ``regex``, ``choice`` (a list of strings), ``grammar`` (GBNF / EBNF / Lark text),
``json_object: true`` or ``structural_tag``; two at once is its 400 ("You can only use one kind
of structured outputs constraint ...").  The answer then is an instance of the schema, a full
match of the regex, one of the choices, or a string the grammar derives; ``structural_tag``
leaves the text as it is, as ``response_format`` ``structural_tag`` does here.

The old ``guided_json`` / ``guided_regex`` / ``guided_choice`` / ``guided_grammar`` fields are
gone from vLLM 0.33's protocol; its request models accept unknown fields and only log them, so
such a request is answered 200 with plain text, as vLLM answers it (the simulator's schemas
ignore unknown keys the same way).

:func:`constraint` validates and returns a ``response_format``-like dict (``{"type":
"json_schema" | "json_object" | "regex" | "choice" | "grammar", ...}``) that
:meth:`generation.structured.tool_calls.ToolSynthesizer.apply_response_format` honours, bounded
as ``response_format`` is (the answer is cut at max_tokens with finish ``length``).
"""
from __future__ import annotations

import json

from generation.errors import InvalidParam, Rejected
from generation.lanes import FairLane, on_hub_thread
from . import regex_sampler
from .grammar import GrammarError, compile_grammar
from .schema_sampler import pattern_refusal
from .tool_validation import OUTPUT_SCHEMA_FAILURE

KINDS = ("json", "regex", "choice", "grammar", "json_object", "structural_tag")
MAX_CHOICES = 4096
# characters of grammar text above which it compiles in a worker thread: the parse is pure Python,
# ~1 ms per 1,000 characters (a 100,000-character grammar of character classes held the hub 0.1 s)
GRAMMAR_LANE_CHARS = 4_000
_grammar_lane: FairLane | None = None
# vLLM 0.34's StructuredOutputsParams fields and defaults, in its order: its errors print them all
PARAMS_FIELDS = (("json", None), ("regex", None), ("choice", None), ("grammar", None), ("json_object", None),
                 ("disable_any_whitespace", False), ("disable_additional_properties", False),
                 ("whitespace_pattern", None), ("structural_tag", None), ("_backend", None),
                 ("_backend_was_auto", False))


def params_repr(so: dict) -> str:
    """``StructuredOutputsParams.__dict__`` of ``so`` as vLLM's errors print it: every field,
    the request's value or the default (a value ~1,000 levels deep too: the server runs under
    app.DEEP_VALUES_RECURSION_LIMIT)."""
    return repr({k: so.get(k, default) if not k.startswith("_") else default for k, default in PARAMS_FIELDS})


def constraint(validator, so: dict | None, param: str = "structured_outputs") -> dict | None:
    """The engine constraint of a ``structured_outputs`` object (None: no constraint).

    ``validator``: the :class:`~generation.structured.tool_validation.ToolValidator` (its
    ``check_schema`` bounds a JSON Schema as for tools).  Raises InvalidParam naming
    ``structured_outputs.<kind>`` for a bad value, or :class:`Rejected` naming no parameter for
    zero / several kinds at once (vLLM 0.34's ``StructuredOutputsParams.__post_init__`` raises a
    ``VLLMValidationError`` without one: ``param`` null; ``{}`` is refused as there)."""
    if so is None:
        return None
    if not isinstance(so, dict):
        raise InvalidParam(f"{param}: Input should be an object.", param)
    given = [k for k in KINDS if so.get(k) is not None]
    if len(given) > 1:
        raise Rejected(f"You can only use one kind of structured outputs constraint but multiple are "
                       f"specified: {params_repr(so)}")
    if not given:
        raise Rejected(f"You must use one kind of structured outputs constraint but none are "
                       f"specified: {params_repr(so)}")
    if so[given[0]] is False:
        return None              # json_object: false is a kind to vLLM, and constrains nothing
    kind = given[0]
    p = f"{param}.{kind}"
    value = so[kind]
    if kind == "json":
        schema = value
        if isinstance(value, str):
            try:
                schema = json.loads(value)
            except ValueError as e:
                raise InvalidParam(f"{p}: not valid JSON: {e}", p) from None
        if not isinstance(schema, dict):
            raise InvalidParam(f"{p}: Input should be a JSON Schema object.", p)
        validator.check_schema(schema, p, OUTPUT_SCHEMA_FAILURE)
        return {"type": "json_schema", "json_schema": {"name": "structured_outputs", "schema": schema}}
    if kind == "json_object":
        if value is not True:
            raise InvalidParam(f"{p}: Input should be a valid boolean.", p)
        return {"type": "json_object"}
    if kind == "regex":
        if not isinstance(value, str):
            raise InvalidParam(f"{p}: Input should be a valid string.", p)
        parsed = _regex(value, p)
        return {"type": "regex", "regex": value, "parsed": parsed}
    if kind == "choice":
        if not isinstance(value, list) or not value or not all(isinstance(c, str) for c in value):
            raise InvalidParam(f"{p}: Input should be a non-empty list of strings.", p)
        if len(value) > MAX_CHOICES:
            raise InvalidParam(f"{p}: at most {MAX_CHOICES} choices.", p)
        return {"type": "choice", "choice": list(value)}
    if kind == "grammar":
        if not isinstance(value, str):
            raise InvalidParam(f"{p}: Input should be a valid string.", p)
        try:
            grammar = _compile_off_hub(value)
        except GrammarError as e:
            raise InvalidParam(f"{p}: {e}", p) from None
        return {"type": "grammar", "grammar": grammar}
    if not isinstance(value, (str, dict)):
        raise InvalidParam(f"{p}: Input should be a string or an object.", p)
    return None                  # structural_tag: the text is left as it is


def _compile_off_hub(text: str):
    """:func:`~.grammar.compile_grammar` of ``text``; a long grammar (over
    :data:`GRAMMAR_LANE_CHARS`) read by the hub's thread compiles in a :class:`FairLane` thread,
    so the hub keeps its turn every switch interval (5 ms) and clients' grammars take turns.
    Raises GrammarError as compile_grammar does."""
    global _grammar_lane
    if not isinstance(text, str) or len(text) <= GRAMMAR_LANE_CHARS or not on_hub_thread():
        return compile_grammar(text)
    if _grammar_lane is None:
        _grammar_lane = FairLane()
    grammar, error = _grammar_lane.apply(_compiled_or_error, (text,))
    if error is not None:
        raise error
    return grammar


def _compiled_or_error(text: str) -> tuple:
    """``(Grammar, None)`` or ``(None, GrammarError)``: returned, not raised, from the lane's
    thread (gevent's pool prints every exception a task raises to stderr, a log line per bad
    grammar)."""
    try:
        return compile_grammar(text), None
    except GrammarError as e:
        return None, e


def _regex(pattern: str, param: str):
    """The parsed ``regex``.  First held to a schema ``pattern``'s bounds
    (:func:`~.schema_sampler.pattern_refusal`: length, then unrolled repeats) as the answer will
    use it, anchored (``^(?:...)$``): the parse is pure Python, and a 3 MB alternation held the
    hub 3-4 s (twice parsed) and answered a 400 quoting all of it.  vLLM has no such bound (its
    grammar backend compiles what it is given).  Raises InvalidParam naming ``param``."""
    why = pattern_refusal(f"^(?:{pattern})$")
    if why is not None:
        raise InvalidParam(f"{param}: the expression cannot be used by the simulator: {why}.", param)
    try:
        return regex_sampler.parse(pattern)
    except regex_sampler.Unsupported as e:
        raise InvalidParam(f"{param}: invalid regular expression: {e}", param) from None


def anthropic_format(validator, fmt) -> dict | None:
    """Anthropic ``output_config.format`` (``{"type": "json_schema", "schema": {...}}``) as a
    constraint; other or absent formats: None.  Raises InvalidParam naming
    ``output_config.format.schema``."""
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        return None
    schema = fmt.get("schema")
    p = "output_config.format.schema"
    if not isinstance(schema, dict):
        raise InvalidParam(f"{p}: Field required (a JSON Schema object).", p)
    validator.check_schema(schema, p, OUTPUT_SCHEMA_FAILURE)
    return {"type": "json_schema", "json_schema": {"name": "output_config", "schema": schema}}


def constrained_text(rf: dict, sampler_factory, rng) -> str | None:
    """The answer text of a regex / choice / grammar constraint, or None for other types.
    ``sampler_factory(schema)``: a :class:`~generation.structured.schema_sampler.SchemaSampler`
    (its bounded, time-limited ``pattern_string`` draws the regex).  Raises InvalidParam when no
    string can be drawn."""
    t = rf.get("type")
    if t == "choice":
        choices = rf["choice"]
        return choices[int(rng.random() * len(choices))]
    if t == "regex":
        pattern = rf["regex"]
        try:
            return sampler_factory({}).pattern_string(f"^(?:{pattern})$", 0, None, "structured_outputs.regex")
        except ValueError as e:
            raise InvalidParam(f"structured_outputs.regex: {e}", "structured_outputs.regex") from None
    if t == "grammar":
        try:
            return rf["grammar"].generate(rng)
        except GrammarError as e:
            raise InvalidParam(f"structured_outputs.grammar: {e}", "structured_outputs.grammar") from None
    return None
