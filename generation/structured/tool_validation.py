"""Request checks for ``tools``, ``tool_choice`` and ``response_format``, before anything is queued.

Schemas are checked with ``jsonschema`` (the metaschema of their ``$schema``, default draft
2020-12), plus shapes the metaschema allows but no instance can meet: enum values of the wrong
type, ``min* > max*``, a local ``$ref`` that does not resolve, and - by a dry run of the
generator on every leaf (:mod:`generation.structured.schema_sampler`) - a ``pattern``, ``minLength`` or
numeric keywords that cannot be met within the generator's bounds.  Parameter-less tools and
standard keywords such as ``$defs``/``anyOf`` are accepted, as by OpenAI and vLLM (the reference
rejects them).  Schema documents nested deeper than :data:`MAX_SCHEMA_DEPTH` JSON levels are
rejected before any of this (OpenAI's structured outputs allow 10 levels of object nesting,
which is 20 JSON levels).

Every check raises :class:`generation.errors.InvalidParam` whose ``param`` names the field.
"""
from __future__ import annotations

import random
from collections import OrderedDict


import orjson

from generation.errors import InvalidParam, Rejected
from generation.lanes import FairLane, paced
from .schema_sampler import (MAX_ITEMS, SchemaSampler, SchemaUnsatisfiable, is_num, pattern_refusal,
                             resolve_pointer)

MAX_SCHEMA_DEPTH = 64      # JSON nesting levels of one schema document
MAX_SCHEMA_BYTES = 1 << 20  # one schema document, serialised (jsonschema: ~10 us a byte, so ~10 s)
SMALL_SCHEMA_BYTES = 16384  # schemas up to this size are checked in a lane of their own
MEDIUM_SCHEMA_BYTES = 131072   # and those up to this size in another (~1.3 s of checking at most each)
CHECK_SECONDS = 1.0        # dry-run time for one schema (patterns, numbers)
_CHOICE_MODES = ("none", "auto", "required")
# the start of a refused schema's message: a tool's (the reference's words), and a schema the
# answer must follow (response_format, structured_outputs, ...: vLLM's xgrammar backend's words)
TOOL_SCHEMA_FAILURE = "Tool validation failed"
OUTPUT_SCHEMA_FAILURE = "Failed to transform json schema into a grammar"
RESPONSE_FORMATS = ("text", "json_object", "json_schema", "structural_tag")
_SCHEMA_CACHE_SIZE = 512  # check_schema costs ~0.5 ms; clients resend the same tools
_SCHEMA_CACHE_BYTES = 8 << 20   # serialised schemas the verdict cache may hold in all

# Keywords whose value is one subschema / a map of subschemas / a list of subschemas.
_SUB_ONE = ("additionalProperties", "additionalItems", "unevaluatedItems", "unevaluatedProperties",
            "contains", "propertyNames", "not", "if", "then", "else", "items")
_SUB_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SUB_LIST = ("allOf", "anyOf", "oneOf", "prefixItems", "items")


def json_depth_exceeds(value, limit: int) -> bool:
    """True when ``value`` (decoded JSON) nests objects/arrays deeper than ``limit`` levels.
    Iterative, so it is safe on values too deep for recursive code."""
    stack = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            if d > limit:
                return True
            stack.extend((x, d + 1) for x in v.values())
        elif isinstance(v, list):
            if d > limit:
                return True
            stack.extend((x, d + 1) for x in v)
    return False


_USAGE = 'Correct usage: `{"type": "function", "function": {"name": "my_function"}}`'


def tool_choice_name(tool_choice: dict) -> str:
    """The function a ``{"type": "function", ...}`` tool_choice names, checked with vLLM 0.34's
    messages (``entrypoints/openai/chat_completion/protocol.py`` ``check_tool_usage``):
    ``function`` not an object, no ``name`` in it, a ``name`` that is not a non-empty string
    (a tool's own ``function.name`` may be empty: vLLM's FunctionDefinition takes any str).
    The flat ``{"type": "function", "name"}`` of the Responses and Anthropic APIs is read too."""
    fn = tool_choice.get("function")
    if fn is None and "name" in tool_choice:
        name, param = tool_choice["name"], "tool_choice.name"
    elif not isinstance(fn, dict):
        raise Rejected(f"Invalid value for `function`: `{fn}` in `tool_choice`! {_USAGE}", "tool_choice.function")
    elif "name" not in fn:
        raise Rejected(f"Expected field `name` in `function` in `tool_choice`! {_USAGE}",
                       "tool_choice.function.name")
    else:
        name, param = fn["name"], "tool_choice.function.name"
    if not isinstance(name, str) or not name:
        raise Rejected(f"Invalid `name` in `function`: `{name}` in `tool_choice`! {_USAGE}", param)
    return name


def invalid_tool_choice(tool_choice) -> Rejected:
    """vLLM 0.34's ``check_tool_usage`` error for a ``tool_choice`` that is neither a named tool
    nor ``"none"``, ``"auto"`` or ``"required"``."""
    return Rejected(f"Invalid value for `tool_choice`: {tool_choice}! Only named tools, \"none\", "
                    f"\"auto\" or \"required\" are supported.", "tool_choice")


def parse_tool_choice(tool_choice) -> tuple[str, str | None]:
    """``tool_choice`` -> ``(mode, name)``; mode in none/auto/required/named.

    Accepts ``"none"|"auto"|"required"``, ``{"type":"function","function":{"name"}}``, the flat
    ``{"type":"function","name"}``, ``{"type":"allowed_tools"|"custom",...}`` and the Anthropic
    ``{"type":"auto"|"any"|"none"|"tool"}`` shapes.  Raises InvalidParam for anything else."""
    if tool_choice is None:
        return "auto", None
    if isinstance(tool_choice, str):
        if tool_choice in _CHOICE_MODES:
            return tool_choice, None
        raise invalid_tool_choice(tool_choice)
    if not isinstance(tool_choice, dict):
        raise InvalidParam("tool_choice: Input should be a string or an object.", "tool_choice")
    t = tool_choice.get("type")
    if t in ("function", "tool"):
        return "named", tool_choice_name(tool_choice)
    if t in ("allowed_tools", "custom", "auto"):
        return "auto", None
    if t == "any":
        return "required", None
    if t == "none":
        return "none", None
    raise InvalidParam(f"tool_choice.type: Input should be 'function', 'allowed_tools' or 'custom', got {t!r}.", "tool_choice.type")


def json_schema_part(response_format: dict):
    """``(json_schema object, its param prefix)`` of a response_format (chat nests it under
    ``json_schema``; the Responses ``text.format`` shape is flat)."""
    js = response_format.get("json_schema")
    if js is None and "schema" in response_format:
        return response_format, "response_format"
    return js, "response_format.json_schema"


class ToolValidator:
    """The checks, with a cache of schema verdicts.  ``holder.config`` is read at each call (the
    live :class:`generation.config.sim_config.SimConfig`: ``skip_tool_validation`` and the generator's
    flag ranges)."""

    def __init__(self, holder):
        self._holder = holder
        self._schema_ok: OrderedDict[bytes, None] = OrderedDict()     # accepted schemas only
        self._cached_bytes = 0

    def validate_request(self, tools, tool_choice) -> None:
        """Check ``tools`` (chat shape) and ``tool_choice``.

        ``tools``: list of ``{"type": "function", "function": {"name": str, "description"?: str,
        "parameters"?: JSON Schema object}}`` (``type`` may be omitted, as vLLM defaults it).

        Raises InvalidParam whose ``param`` names the field (``tools[0].function.parameters``,
        ``tool_choice``, ...): malformed tool, invalid or unsatisfiable JSON Schema (skipped with
        ``--skip-tool-validation``), unknown tool_choice, a tool_choice naming a function not in
        ``tools`` (vLLM: 400), or a forcing tool_choice without ``tools`` (vLLM: 400)."""
        names = self._validate_tools(tools)
        mode, name = parse_tool_choice(tool_choice)
        if tools is None and mode in ("required", "named"):
            raise Rejected("When using `tool_choice`, `tools` must be set.", "tool_choice")
        if mode == "named" and name not in names:
            raise Rejected(f"The tool `{name}` specified in `tool_choice` does not match any of the "
                       f"specified `tools`", "tool_choice")

    def _validate_tools(self, tools) -> set:
        if tools is None:
            return set()
        if not isinstance(tools, list):
            raise InvalidParam("tools: Input should be a valid list.", "tools")
        skip = self._holder.config.skip_tool_validation
        names = set()
        for i, tool in enumerate(paced(tools)):      # ~5 us a tool: 60,000 held the hub 0.3 s
            p = f"tools[{i}]"
            if not isinstance(tool, dict):
                raise InvalidParam(f"{p}: Input should be an object.", p)
            t = tool.get("type", "function")
            if t != "function":
                raise InvalidParam(f"{p}.type: Input should be 'function', got {t!r}.", f"{p}.type")
            fn = tool.get("function")
            if not isinstance(fn, dict):
                raise InvalidParam(f"{p}.function: Field required (an object with name, description, "
                               f"parameters).", f"{p}.function")
            name = fn.get("name")
            if not isinstance(name, str):       # vLLM's FunctionDefinition: any str, "" included
                raise InvalidParam(f"{p}.function.name: Field required (a string).", f"{p}.function.name")
            desc = fn.get("description")
            if desc is not None and not isinstance(desc, str):
                raise InvalidParam(f"{p}.function.description: Input should be a valid string.", f"{p}.function.description")
            params = fn.get("parameters")
            if params is not None:
                if skip:     # still bounded: the generator must not recurse without limit
                    self._check_depth(params, f"{p}.function.parameters")
                else:
                    self.check_schema(params, f"{p}.function.parameters")
            names.add(name)
        return names

    def validate_response_format(self, response_format) -> None:
        """Check a chat ``response_format`` (OpenAI shape; the flat Responses ``text.format``
        shape ``{"type":"json_schema","name","schema"}`` is accepted too).

        Types: ``text``, ``json_object``, ``json_schema`` (needs ``json_schema.name`` and an
        optional valid ``json_schema.schema``), ``structural_tag`` (vLLM; no effect here).
        Raises InvalidParam with ``param`` ``response_format[...]``."""
        if response_format is None:
            return
        if not isinstance(response_format, dict):
            raise InvalidParam("response_format: Input should be an object.", "response_format")
        t = response_format.get("type")
        if t not in RESPONSE_FORMATS:
            raise InvalidParam(f"response_format.type: Input should be one of {', '.join(map(repr, RESPONSE_FORMATS))}"
                           f", got {t!r}.", "response_format.type")
        if t != "json_schema":
            return
        js, prefix = json_schema_part(response_format)
        if not isinstance(js, dict):
            raise InvalidParam("response_format.json_schema: Field required for type 'json_schema'.", "response_format.json_schema")
        if not isinstance(js.get("name"), str):     # vLLM's JsonSchemaResponseFormat: any str
            raise InvalidParam(f"{prefix}.name: Field required (a string).", f"{prefix}.name")
        schema = js.get("schema")
        if schema is not None:
            self.check_schema(schema, f"{prefix}.schema", OUTPUT_SCHEMA_FAILURE)

    @staticmethod
    def _check_depth(schema, param: str) -> None:
        if json_depth_exceeds(schema, MAX_SCHEMA_DEPTH):
            raise InvalidParam(f"{param} is nested deeper than {MAX_SCHEMA_DEPTH} levels.", param)

    def check_schema(self, schema, param: str, failure: str = TOOL_SCHEMA_FAILURE) -> None:
        """Raise InvalidParam (``param``) unless ``schema`` is a JSON Schema object within
        :data:`MAX_SCHEMA_DEPTH` levels and :data:`MAX_SCHEMA_BYTES` serialised, whose every
        ``pattern`` is within the regex bounds (:func:`pattern_refusal`: checked before
        anything compiles one), that ``jsonschema`` accepts and whose every leaf the generator
        can satisfy.  Accepted schemas are remembered by value (at most
        :data:`_SCHEMA_CACHE_SIZE` and :data:`_SCHEMA_CACHE_BYTES`); a refused one leaves
        nothing behind."""
        if not isinstance(schema, dict):
            raise InvalidParam(f"{failure}: {param} should be a JSON Schema object.", param)
        self._check_depth(schema, param)
        try:
            key = orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)
        except (TypeError, ValueError):
            key = None
        if key is not None and len(key) > MAX_SCHEMA_BYTES:
            raise InvalidParam(f"{failure}: {param} is {len(key)} bytes long, more than the "
                               f"{MAX_SCHEMA_BYTES} a schema may be.", param)
        cache = self._schema_ok
        if key is not None and key in cache:
            cache.move_to_end(key)
            return
        err = patterns_problem(schema) or schema_problem(schema, self._holder.config,
                                                         len(key) if key is not None else 0)
        if err:
            raise InvalidParam(f"{failure}: {param} is not a valid JSON Schema: {err}", param)
        if key is not None and len(key) <= _SCHEMA_CACHE_BYTES // 8:
            cache[key] = None
            self._cached_bytes += len(key)
            while len(cache) > _SCHEMA_CACHE_SIZE or self._cached_bytes > _SCHEMA_CACHE_BYTES:
                self._cached_bytes -= len(cache.popitem(last=False)[0])


def patterns_problem(schema: dict) -> str | None:
    """The first ``pattern`` (or ``patternProperties`` key) of ``schema`` that
    :func:`pattern_refusal` refuses, described with its place, else None.  Runs before the
    metaschema check, whose ``format: regex`` would compile every pattern (Python's ``re``
    raises OverflowError for ``x{4294967296}``); iterative, as the depth is already bounded."""
    stack = [(schema, "$")]
    while stack:
        node, path = stack.pop()
        if isinstance(node, dict):
            pat = node.get("pattern")
            if isinstance(pat, str):
                why = pattern_refusal(pat)
                if why:
                    return f"pattern {pat[:100]!r} cannot be used: {why} (at {path})"
            props = node.get("patternProperties")
            if isinstance(props, dict):
                for pat in props:
                    why = pattern_refusal(pat)
                    if why:
                        return f"patternProperties key {pat[:100]!r} cannot be used: {why} (at {path})"
            stack.extend((v, f"{path}.{k}") for k, v in node.items() if isinstance(v, (dict, list)))
        elif isinstance(node, list):
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(node) if isinstance(v, (dict, list)))
    return None


_POOLS: dict = {}           # lane -> FairLane of metaschema checks (made on first use)


def schema_problem(schema: dict, cfg, size: int = 0) -> str | None:
    """None when ``schema`` is usable, else a one-line description of the first problem.

    The metaschema check runs in a worker thread (:func:`_metaschema_problem`): jsonschema
    takes about 10 us per byte of schema (0.3 s for 32 KiB of properties), pure Python that
    would otherwise hold the gevent hub, and every open stream with it, for that long; from a
    thread the hub keeps its turn every switch interval (5 ms).  Three lanes of one thread each,
    by size (``size``, serialised): schemas up to :data:`SMALL_SCHEMA_BYTES` never queue behind
    a larger one (four 3 MB schemas made a one-property tool wait 98 s), nor those up to
    :data:`MEDIUM_SCHEMA_BYTES` behind the ones above it, which take ~10 s each at the 1 MiB
    cap (four distinct 1 MB schemas made a 23 KB one wait 53 s); within a lane, clients take
    turns (:class:`FairLane`).  The dry run that follows
    yields to the hub by itself (:class:`SchemaSampler`)."""
    lane = "small" if size <= SMALL_SCHEMA_BYTES else "medium" if size <= MEDIUM_SCHEMA_BYTES else "large"
    pool = _POOLS.get(lane)
    if pool is None:
        pool = _POOLS[lane] = FairLane()
    cls, err = pool.apply(_metaschema_problem, (schema,))
    if err:
        return err
    trial = SchemaSampler(cfg, random.Random(0), schema, seconds=CHECK_SECONDS)
    return _walk_problems(schema, schema, "$", cls.TYPE_CHECKER, trial)


def _metaschema_problem(schema: dict) -> tuple:
    """``(validator class, problem or None)``: ``schema`` checked against its metaschema (the
    ``$schema`` it names, else draft 2020-12).  A ``$schema`` that is not a string is left to
    the 2020-12 metaschema, which reports it (``validator_for`` would raise)."""
    # jsonschema costs ~0.1 s to import: imported here, in the thread, by the first schema
    from jsonschema import Draft202012Validator, SchemaError
    from jsonschema.validators import validator_for
    named = schema.get("$schema")
    cls = validator_for(schema, default=Draft202012Validator) if isinstance(named, str) else Draft202012Validator
    try:
        cls.check_schema(schema)
    except SchemaError as e:
        where = e.json_path if e.path else "$"
        return cls, f"{e.message} (at {where})"
    except RecursionError:         # only past MAX_SCHEMA_DEPTH, which is checked first
        return cls, "the schema is nested too deeply"
    except Exception as e:         # noqa: BLE001 - a format check's own error (OverflowError, ...)
        return cls, f"{type(e).__name__}: {str(e)[:200]}"
    return cls, None


def _string_allowed(types) -> bool:
    return types is None or "string" in types


def _leaf_problem(node: dict, types, path: str, trial: SchemaSampler) -> str | None:
    """Dry-run the generator on the string and numeric keywords of ``node``."""
    try:
        if _string_allowed(types) and (isinstance(node.get("pattern"), str) or "minLength" in node):
            trial.string(node, path)
        if any(k in node for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")):
            for t in ("integer", "number"):
                if types is None and t == "integer":
                    continue
                if types is None or t in types:
                    (trial.integer if t == "integer" else trial.number)(node, path)
        mi = node.get("minItems")
        if isinstance(mi, int) and not isinstance(mi, bool) and mi > MAX_ITEMS:
            return f"minItems {mi} is above the {MAX_ITEMS}-item bound (at {path})"
    except SchemaUnsatisfiable as e:
        return str(e)
    return None


_NOT_GENERATED = ("not", "if", "propertyNames", "contains", "dependentSchemas")   # never sampled


def _walk_problems(node, root, path: str, checker, trial: SchemaSampler, leaves: bool = True) -> str | None:
    """Unsatisfiable shapes the metaschema allows: an empty enum, enum/const values of another
    type than the declared one, min > max bounds, local ``$ref`` that does not resolve, and (``leaves``:
    outside subschemas the generator never samples, such as ``not``) leaves it cannot satisfy
    within its bounds."""
    if not isinstance(node, dict):
        return None
    if leaves and node.get("enum") == []:
        # no value can be generated: xgrammar refuses it (mlc-ai/xgrammar#639), so vLLM answers 400
        return f"enum has no values (at {path}.enum)"
    t = node.get("type")
    types = [t] if isinstance(t, str) else (t if isinstance(t, list) else None)
    if types:
        from jsonschema.exceptions import UndefinedTypeCheck

        def ok(v):
            for x in types:
                try:
                    if checker.is_type(v, x):
                        return True
                except UndefinedTypeCheck:
                    pass
            return False
        enum = node.get("enum")
        if isinstance(enum, list):
            for k, v in enumerate(enum):
                if not ok(v):
                    return f"enum value {v!r} is not of type {t!r} (at {path}.enum[{k}])"
        if "const" in node and not ok(node["const"]):
            return f"const value {node['const']!r} is not of type {t!r} (at {path}.const)"
    for lo, hi in (("minItems", "maxItems"), ("minLength", "maxLength"), ("minimum", "maximum"),
                   ("minProperties", "maxProperties")):
        a, b = node.get(lo), node.get(hi)
        if is_num(a) and is_num(b) and a > b:
            return f"{lo} ({a}) is greater than {hi} ({b}) (at {path})"
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#") and resolve_pointer(root, ref) is None:
        return f"$ref {ref!r} does not resolve within the schema (at {path}.$ref)"
    if leaves and "enum" not in node and "const" not in node:
        err = _leaf_problem(node, types, path, trial)
        if err:
            return err
    for key in _SUB_ONE:
        sub = node.get(key)
        if isinstance(sub, dict):
            err = _walk_problems(sub, root, f"{path}.{key}", checker, trial,
                                 leaves and key not in _NOT_GENERATED)
            if err:
                return err
    for key in _SUB_MAP:
        subs = node.get(key)
        if isinstance(subs, dict):
            for name, sub in subs.items():
                err = _walk_problems(sub, root, f"{path}.{key}.{name}", checker, trial,
                                     leaves and key not in _NOT_GENERATED)
                if err:
                    return err
    for key in _SUB_LIST:
        subs = node.get(key)
        if isinstance(subs, list):
            for k, sub in enumerate(subs):
                err = _walk_problems(sub, root, f"{path}.{key}[{k}]", checker, trial, leaves)
                if err:
                    return err
    return None
