"""Tool calls and structured output: validation and synthesis from JSON Schema.

:class:`ToolSynthesizer` is attached to the engine by ``app.py``.  The chat blueprint (and the
APIs translated onto chat: Anthropic Messages, Responses) calls :meth:`validate_request` and
:meth:`validate_response_format` before anything is queued; the engine calls
:meth:`wants_tools` / :meth:`synthesize` / :meth:`apply_response_format` while deciding a
sequence's output.

Behaviour (api.md 8, seeds, vLLM / OpenAI where the reference is quirky):

* ``tool_choice`` ``"none"`` -> text; named function -> exactly one call of it; ``"required"``
  -> at least one call; ``"auto"`` / omitted / ``allowed_tools`` / ``custom`` -> at least zero.
  From that minimum one more call is added with ``--tool-call-extra-call-probability``% while
  fewer calls than tools, stopping at the first failed roll; ``max_tool_calls`` caps the count.
* Arguments are an instance of the tool's ``parameters`` JSON Schema (types, enum/const,
  required vs optional with the configured probabilities, ranges from the config flags
  intersected with the schema's own bounds, nested objects/arrays, anyOf/oneOf/allOf, local
  ``$ref``), serialised as compact JSON in schema property order.
* Schemas are checked with ``jsonschema`` (the metaschema of their ``$schema``, default draft
  2020-12), plus a few unsatisfiable shapes the metaschema allows (enum values of the wrong
  type, ``minItems > maxItems`` ...).  Parameter-less tools and standard keywords such as
  ``$defs``/``anyOf`` are accepted, as by OpenAI and vLLM (the reference rejects them).
"""
from __future__ import annotations

import json
import math
import re
import uuid
from collections import OrderedDict

from jsonschema import Draft202012Validator, SchemaError
from jsonschema.exceptions import UndefinedTypeCheck
from jsonschema.validators import validator_for

from .errors import APIError

# The reference's string values (api.md 8.2).
WORDS = ("testing", "hello", "Boston", "sunny", "temperature", "cloudy", "question", "Yorick",
         "silence", "lifetime")

_CHOICE_MODES = ("none", "auto", "required")
_RESPONSE_FORMATS = ("text", "json_object", "json_schema", "structural_tag")
_MAX_DEPTH = 8            # beyond it only required fields / minimal arrays are generated
_HARD_DEPTH = 40          # recursive required $refs: give up (value may not validate)
_MAX_STRING = 4096        # caps on absurd minLength / minItems (the value then fails them)
_MAX_ITEMS = 256
_BUDGET = 20000          # values per instance: nested huge minItems must not explode
_SCHEMA_CACHE_SIZE = 512  # check_schema costs ~0.5 ms; clients resend the same tools

# Keywords whose value is one subschema / a map of subschemas / a list of subschemas.
_SUB_ONE = ("additionalProperties", "additionalItems", "unevaluatedItems", "unevaluatedProperties",
            "contains", "propertyNames", "not", "if", "then", "else", "items")
_SUB_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SUB_LIST = ("allOf", "anyOf", "oneOf", "prefixItems", "items")


def _dumps(obj) -> str:
    """Compact JSON as a model would stream it (property order kept, UTF-8 kept)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


class ToolSynthesizer:
    """Tool-call and structured-output synthesis for one simulator.

    ``sim`` provides ``config`` (live :class:`generation.config.SimConfig`), ``rng`` (the seeded
    ``random.Random``, so ``--seed`` makes every draw reproducible) and ``tokenizer``."""

    def __init__(self, sim):
        self.sim = sim
        self._schema_ok: OrderedDict[str, str | None] = OrderedDict()

    # ---- validation ---------------------------------------------------------------------------
    def validate_request(self, tools, tool_choice) -> None:
        """Check ``tools`` (chat shape) and ``tool_choice`` before the request is queued.

        ``tools``: list of ``{"type": "function", "function": {"name": str, "description"?: str,
        "parameters"?: JSON Schema object}}`` (``type`` may be omitted, as vLLM defaults it).
        ``tool_choice``: ``"none"|"auto"|"required"``, ``{"type":"function","function":{"name"}}``,
        the flat ``{"type":"function","name"}``, ``{"type":"allowed_tools"|"custom",...}`` or the
        Anthropic ``{"type":"auto"|"any"|"none"|"tool"}`` shapes.

        Raises APIError 400 whose ``param`` names the field (``tools[0].function.parameters``,
        ``tool_choice``, ...): malformed tool, invalid JSON Schema (skipped with
        ``--skip-tool-validation``), unknown tool_choice, a tool_choice naming a function not in
        ``tools`` (vLLM: 400), or a forcing tool_choice without ``tools`` (vLLM: 400)."""
        names = self._validate_tools(tools)
        mode, name = self._choice(tool_choice)
        if tools is None and mode in ("required", "named"):
            raise APIError("When using `tool_choice`, `tools` must be set.", 400, "tool_choice")
        if mode == "named" and name not in names:
            raise APIError(f"The tool specified in `tool_choice` ('{name}') does not match any of the "
                           f"specified `tools`.", 400, "tool_choice")

    def _validate_tools(self, tools) -> set:
        if tools is None:
            return set()
        if not isinstance(tools, list):
            raise APIError("tools: Input should be a valid list.", 400, "tools")
        skip = self.sim.config.skip_tool_validation
        names = set()
        for i, tool in enumerate(tools):
            p = f"tools[{i}]"
            if not isinstance(tool, dict):
                raise APIError(f"{p}: Input should be an object.", 400, p)
            t = tool.get("type", "function")
            if t != "function":
                raise APIError(f"{p}.type: Input should be 'function', got {t!r}.", 400, f"{p}.type")
            fn = tool.get("function")
            if not isinstance(fn, dict):
                raise APIError(f"{p}.function: Field required (an object with name, description, "
                               f"parameters).", 400, f"{p}.function")
            name = fn.get("name")
            if not isinstance(name, str) or not name:
                raise APIError(f"{p}.function.name: Field required (a non-empty string).", 400,
                               f"{p}.function.name")
            desc = fn.get("description")
            if desc is not None and not isinstance(desc, str):
                raise APIError(f"{p}.function.description: Input should be a valid string.", 400,
                               f"{p}.function.description")
            params = fn.get("parameters")
            if params is not None and not skip:
                self.check_schema(params, f"{p}.function.parameters")
            names.add(name)
        return names

    def validate_response_format(self, response_format) -> None:
        """Check a chat ``response_format`` (OpenAI shape; the flat Responses ``text.format``
        shape ``{"type":"json_schema","name","schema"}`` is accepted too).

        Types: ``text``, ``json_object``, ``json_schema`` (needs ``json_schema.name`` and an
        optional valid ``json_schema.schema``), ``structural_tag`` (vLLM; no effect here).
        Raises APIError 400 with ``param`` ``response_format[...]``."""
        if response_format is None:
            return
        if not isinstance(response_format, dict):
            raise APIError("response_format: Input should be an object.", 400, "response_format")
        t = response_format.get("type")
        if t not in _RESPONSE_FORMATS:
            raise APIError(f"response_format.type: Input should be one of {', '.join(map(repr, _RESPONSE_FORMATS))}"
                           f", got {t!r}.", 400, "response_format.type")
        if t != "json_schema":
            return
        js, prefix = self._json_schema_part(response_format)
        if not isinstance(js, dict):
            raise APIError("response_format.json_schema: Field required for type 'json_schema'.", 400,
                           "response_format.json_schema")
        if not isinstance(js.get("name"), str) or not js["name"]:
            raise APIError(f"{prefix}.name: Field required (a non-empty string).", 400, f"{prefix}.name")
        schema = js.get("schema")
        if schema is not None:
            self.check_schema(schema, f"{prefix}.schema")

    @staticmethod
    def _json_schema_part(response_format: dict):
        js = response_format.get("json_schema")
        if js is None and "schema" in response_format:        # flat Responses text.format
            return response_format, "response_format"
        return js, "response_format.json_schema"

    def check_schema(self, schema, param: str) -> None:
        """Raise APIError 400 (``param``) unless ``schema`` is a JSON Schema object that
        ``jsonschema`` accepts and that has no obviously unsatisfiable part.  Cached by value."""
        if not isinstance(schema, dict):
            raise APIError(f"Tool validation failed: {param} should be a JSON Schema object.", 400, param)
        try:
            key = json.dumps(schema, sort_keys=True)
        except (TypeError, ValueError):
            key = None
        cache = self._schema_ok
        if key is not None and key in cache:
            cache.move_to_end(key)
            err = cache[key]
        else:
            err = _schema_problem(schema)
            if key is not None:
                cache[key] = err
                if len(cache) > _SCHEMA_CACHE_SIZE:
                    cache.popitem(last=False)
        if err:
            raise APIError(f"Tool validation failed: {param} is not a valid JSON Schema: {err}", 400, param)

    # ---- decision -----------------------------------------------------------------------------
    @staticmethod
    def _choice(tool_choice) -> tuple[str, str | None]:
        """``tool_choice`` -> ``(mode, name)``; mode in none/auto/required/named.
        Raises APIError 400 for shapes no API accepts."""
        if tool_choice is None:
            return "auto", None
        if isinstance(tool_choice, str):
            if tool_choice in _CHOICE_MODES:
                return tool_choice, None
            raise APIError(f"Invalid value for `tool_choice`: {tool_choice!r}. Only named tools, \"none\", "
                           f"\"auto\" or \"required\" are supported.", 400, "tool_choice")
        if not isinstance(tool_choice, dict):
            raise APIError("tool_choice: Input should be a string or an object.", 400, "tool_choice")
        t = tool_choice.get("type")
        if t in ("function", "tool"):
            fn = tool_choice.get("function")
            name = fn.get("name") if isinstance(fn, dict) else tool_choice.get("name")
            if not isinstance(name, str) or not name:
                raise APIError('Expected field `name` in `function` in `tool_choice`. Correct usage: '
                               '`{"type": "function", "function": {"name": "my_function"}}`', 400,
                               "tool_choice.function.name")
            return "named", name
        if t in ("allowed_tools", "custom", "auto"):
            return "auto", None
        if t == "any":
            return "required", None
        if t == "none":
            return "none", None
        raise APIError(f"tool_choice.type: Input should be 'function', 'allowed_tools' or 'custom', got {t!r}.",
                       400, "tool_choice.type")

    def wants_tools(self, req) -> bool:
        """True when ``req`` has a non-empty tool list and its tool_choice is not none (an empty
        list with ``"required"`` behaves like none, as in vLLM and OpenAI)."""
        if not req.tools:
            return False
        try:
            return self._choice(req.tool_choice)[0] != "none"
        except APIError:
            return False

    def synthesize(self, req, seq) -> bool:
        """Decide ``seq``'s tool calls (api.md 8.1) and fill its output.

        On success sets ``seq.tool_calls`` (``[{"id": "chatcmpl-tool-<32 hex>", "name",
        "arguments": JSON string, "start", "end"}]``, start/end indexing ``seq.pieces``),
        ``seq.pieces``/``seq.ids`` (the argument strings' tokens, call after call),
        ``finish_reason = "tool_calls"`` and ``completion_tokens`` (number of pieces); returns
        True.  Returns False when the draw gave zero calls (``auto``): the engine then answers
        with text.  Raises APIError 400 when a forced function is not in ``tools`` (only
        reachable with ``--skip-tool-validation``-style bypasses) or its schema cannot be used."""
        cfg = self.sim.config
        rng = self.sim.rng
        tools = [t for t in req.tools if isinstance(t, dict) and isinstance(t.get("function"), dict)]
        if not tools:
            return False
        mode, name = self._choice(req.tool_choice)
        if mode == "none":
            return False
        if mode == "named":
            chosen = [t for t in tools if t["function"].get("name") == name]
            if not chosen:
                raise APIError(f"The tool specified in `tool_choice` ('{name}') does not match any of the "
                               f"specified `tools`.", 400, "tool_choice")
            picks = [chosen[0]]
        else:
            count = 1 if mode == "required" else 0
            p = cfg.tool_call_extra_call_probability
            while count < len(tools) and rng.randrange(100) < p:
                count += 1
            picks = [tools[rng.randrange(len(tools))] for _ in range(count)]
        if req.max_tool_calls is not None:
            picks = picks[:max(req.max_tool_calls, 0)]
        if not picks:
            return False
        calls, pieces, ids = [], [], []
        for tool in picks:
            fn = tool["function"]
            args = self.arguments(fn.get("parameters"), fn.get("name"))
            tids, tpieces = self._tokens(args)
            calls.append({"id": f"chatcmpl-tool-{rng.getrandbits(128):032x}", "name": fn.get("name"),
                          "arguments": args, "start": len(pieces), "end": len(pieces) + len(tpieces)})
            pieces.extend(tpieces)
            ids.extend(tids)
        seq.tool_calls = calls
        seq.pieces = pieces
        seq.ids = ids
        seq.text = None
        seq.finish_reason = "tool_calls"
        seq.completion_tokens = len(pieces)
        return True

    def arguments(self, parameters, name=None) -> str:
        """A compact JSON object string that validates against ``parameters`` (a JSON Schema,
        or None / ``{}`` for a parameter-less function -> ``"{}"``)."""
        if not isinstance(parameters, dict) or not parameters:
            return "{}"
        schema = parameters if "type" in parameters else {**parameters, "type": "object"}
        try:
            sampler = _Sampler(self.sim.config, self.sim.rng, parameters)
            value = sampler.value(schema, 0, top=True)
            if not isinstance(value, dict):       # arguments are always an object
                value = sampler.object(schema, 0, top=True)
            return _dumps(value)
        except (TypeError, ValueError, KeyError, AttributeError, RecursionError) as e:
            # Only reachable with --skip-tool-validation and a schema no generator can read.
            raise APIError(f"Cannot generate arguments for tool '{name}' from its parameters schema: {e}",
                           400, "tools") from None

    # ---- structured output --------------------------------------------------------------------
    def apply_response_format(self, req, seq) -> None:
        """Replace a text answer by JSON as ``req.response_format`` demands (vLLM structured
        output): ``json_object`` -> ``{"response": <the sampled text>}`` (so the answer keeps
        the sampled length); ``json_schema`` -> an instance of its schema; ``text`` and
        ``structural_tag`` -> unchanged.  Sets pieces/ids; finish_reason ``stop``, or
        ``length`` (JSON cut, as vLLM cuts it) when it exceeds max_tokens or the context room."""
        rf = req.response_format
        if not isinstance(rf, dict):
            return
        t = rf.get("type")
        if t == "json_object":
            text = self._json_object_text(seq)
        elif t == "json_schema":
            js, _ = self._json_schema_part(rf)
            schema = js.get("schema") if isinstance(js, dict) else None
            if isinstance(schema, dict) and schema:
                value = _Sampler(self.sim.config, self.sim.rng, schema).value(schema, 0, top=True)
                text = _dumps(value)
            else:
                text = self._json_object_text(seq)
        else:
            return
        ids, pieces = self._tokens(text)
        room = self.sim.config.max_model_len - seq.prompt_len
        cap = room if req.max_tokens is None else min(req.max_tokens, room)
        if len(pieces) > cap:
            pieces, ids = pieces[:max(cap, 0)], ids[:max(cap, 0)]
            seq.finish_reason = "length"
        else:
            seq.finish_reason = "stop"
        seq.pieces, seq.ids = pieces, ids
        seq.text = None
        seq.completion_tokens = len(pieces)

    @staticmethod
    def _json_object_text(seq) -> str:
        overhead = 8     # tokens of {"response":""} with the simulated tokenizer
        keep = max(1, len(seq.pieces) - overhead)
        text = "".join(seq.pieces[:keep]).strip() or WORDS[0]
        return _dumps({"response": text})

    # ---- tokens -------------------------------------------------------------------------------
    def _tokens(self, text: str) -> tuple[list, list]:
        """``(ids, pieces)`` of ``text`` whose pieces join back to exactly ``text`` (a streamed
        JSON string must be reassembled byte for byte)."""
        ids, pieces = self.sim.tokenizer.encode_lossless(text)
        if "".join(pieces) != text:      # a real tokenizer's per-token decode can differ
            n = max(len(ids), 1)
            step = -(-len(text) // n)
            pieces = [text[k:k + step] for k in range(0, len(text), step)]
            ids = list(ids[:len(pieces)]) + [0] * (len(pieces) - len(ids))
        return ids, pieces


# ---------------------------------------------------------------------------------------------
# Schema checks

def _schema_problem(schema: dict) -> str | None:
    """None when ``schema`` is usable, else a one-line description of the first problem."""
    cls = validator_for(schema, default=Draft202012Validator)
    try:
        cls.check_schema(schema)
    except SchemaError as e:
        where = e.json_path if e.path else "$"
        return f"{e.message} (at {where})"
    checker = cls.TYPE_CHECKER
    return _walk_problems(schema, schema, "$", checker, 0)


def _walk_problems(node, root, path: str, checker, depth: int) -> str | None:
    """Unsatisfiable shapes the metaschema allows: enum/const values of another type than the
    declared one, min > max bounds, local ``$ref`` that does not resolve."""
    if not isinstance(node, dict) or depth > 64:
        return None
    t = node.get("type")
    types = [t] if isinstance(t, str) else (t if isinstance(t, list) else None)
    if types:
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
        if _is_num(a) and _is_num(b) and a > b:
            return f"{lo} ({a}) is greater than {hi} ({b}) (at {path})"
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#") and _resolve_pointer(root, ref) is None:
        return f"$ref {ref!r} does not resolve within the schema (at {path}.$ref)"
    for key in _SUB_ONE:
        sub = node.get(key)
        if isinstance(sub, dict):
            err = _walk_problems(sub, root, f"{path}.{key}", checker, depth + 1)
            if err:
                return err
    for key in _SUB_MAP:
        subs = node.get(key)
        if isinstance(subs, dict):
            for name, sub in subs.items():
                err = _walk_problems(sub, root, f"{path}.{key}.{name}", checker, depth + 1)
                if err:
                    return err
    for key in _SUB_LIST:
        subs = node.get(key)
        if isinstance(subs, list):
            for k, sub in enumerate(subs):
                err = _walk_problems(sub, root, f"{path}.{key}[{k}]", checker, depth + 1)
                if err:
                    return err
    return None


def _resolve_pointer(root, ref: str):
    """Resolve a same-document ``$ref`` (``#``, ``#/$defs/X``, ``#/definitions/X``); None if
    it does not resolve."""
    frag = ref[1:]
    if frag == "":
        return root
    if not frag.startswith("/"):
        return None            # anchors: not supported for generation
    node = root
    for part in frag[1:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


# ---------------------------------------------------------------------------------------------
# Instance generation

class _Sampler:
    """Draws one instance of a JSON Schema with ``rng``.

    Ranges (api.md 8.2): integers in ``[--min-tool-call-integer-param, --max-...]``, numbers in
    ``[--min-tool-call-number-param, --max-...)``, array lengths in
    ``[--min-tool-call-array-param-length, --max-...]`` - each intersected with the schema's own
    ``minimum``/``maximum``/``exclusive*``/``minItems``/``maxItems`` (the schema wins when the
    two ranges do not overlap).  Optional top-level properties appear with
    ``--tool-call-not-required-param-probability``%, optional nested fields with
    ``--object-tool-call-not-required-field-probability``%."""

    def __init__(self, cfg, rng, root):
        self.cfg = cfg
        self.rng = rng
        self.root = root
        self.left = _BUDGET

    # -- schema plumbing
    def _resolve(self, schema: dict) -> dict:
        """Inline ``$ref`` and ``allOf`` into one dict (siblings kept, as draft 2019+)."""
        for _ in range(16):
            ref = schema.get("$ref")
            if isinstance(ref, str):
                target = _resolve_pointer(self.root, ref) if ref.startswith("#") else None
                rest = {k: v for k, v in schema.items() if k != "$ref"}
                schema = _merge(target if isinstance(target, dict) else {}, rest)
                continue
            all_of = schema.get("allOf")
            if isinstance(all_of, list):
                merged = {k: v for k, v in schema.items() if k != "allOf"}
                for sub in all_of:
                    if isinstance(sub, dict):
                        merged = _merge(merged, sub)
                schema = merged
                continue
            break
        return schema

    def value(self, schema, depth: int, top: bool = False):
        """One instance of ``schema`` (a dict or boolean schema)."""
        rng = self.rng
        self.left -= 1
        if depth > _HARD_DEPTH or self.left < 0:
            return None
        if schema is True or not isinstance(schema, dict) or not schema:
            return rng.choice(WORDS)
        schema = self._resolve(schema)
        if "const" in schema:
            return schema["const"]
        t = schema.get("type")
        enum = schema.get("enum")
        if isinstance(enum, list) and enum:
            if isinstance(t, (str, list)):
                fit = [v for v in enum if _type_of(v) in _accepted(t)]
                enum = fit or enum
            return rng.choice(enum)
        for key in ("anyOf", "oneOf"):
            branches = schema.get(key)
            if isinstance(branches, list) and branches:
                usable = [b for b in branches if b is not False] or branches
                branch = rng.choice(usable)
                rest = {k: v for k, v in schema.items() if k != key}
                return self.value(_merge(rest, branch if isinstance(branch, dict) else {}), depth, top)
        kind = self._type(schema)
        if kind == "object":
            return self.object(schema, depth, top)
        if kind == "array":
            return self.array(schema, depth)
        if kind == "integer":
            return self.integer(schema)
        if kind == "number":
            return self.number(schema)
        if kind == "boolean":
            return rng.random() < 0.5
        if kind == "null":
            return None
        return self.string(schema)

    def _type(self, schema: dict) -> str:
        t = schema.get("type")
        if isinstance(t, list):
            real = [x for x in t if x != "null" and isinstance(x, str)]
            return self.rng.choice(real) if real else "null"
        if isinstance(t, str):
            return t
        keys = schema.keys()
        if any(k in keys for k in ("properties", "required", "additionalProperties", "patternProperties",
                                   "minProperties")):
            return "object"
        if any(k in keys for k in ("items", "prefixItems", "minItems", "maxItems", "uniqueItems")):
            return "array"
        if any(k in keys for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                                   "multipleOf")):
            return "number"
        return "string"

    # -- containers
    def object(self, schema: dict, depth: int, top: bool = False) -> dict:
        schema = self._resolve(schema)
        rng = self.rng
        props = schema.get("properties")
        props = props if isinstance(props, dict) else {}
        required = schema.get("required")
        required = [r for r in required if isinstance(r, str)] if isinstance(required, list) else []
        req_set = set(required)
        p = (self.cfg.tool_call_not_required_param_probability if top
             else self.cfg.object_tool_call_not_required_field_probability)
        deep = depth >= _MAX_DEPTH
        out = {}
        skipped = []
        for name, sub in props.items():
            if name in req_set or (not deep and rng.randrange(100) < p):
                out[name] = self.value(sub, depth + 1)
            else:
                skipped.append(name)
        extra = schema.get("additionalProperties")
        for name in required:
            if name not in out:
                out[name] = self.value(extra if isinstance(extra, dict) else True, depth + 1)
        min_props = schema.get("minProperties")
        if _is_int(min_props):
            for name in skipped:
                if len(out) >= min_props:
                    break
                out[name] = self.value(props[name], depth + 1)
        return out

    def array(self, schema: dict, depth: int) -> list:
        cfg, rng = self.cfg, self.rng
        prefix = schema.get("prefixItems")
        items = schema.get("items")
        if isinstance(items, list):           # draft 4-2019 tuple form
            prefix, items = items, schema.get("additionalItems", True)
        prefix = prefix if isinstance(prefix, list) else []
        s_lo, s_hi = schema.get("minItems"), schema.get("maxItems")
        if depth >= _MAX_DEPTH:
            lo = hi = s_lo if _is_int(s_lo) else 0
        else:
            lo = s_lo if _is_int(s_lo) else min(cfg.min_tool_call_array_param_length, s_hi if _is_int(s_hi) else 1 << 30)
            hi = s_hi if _is_int(s_hi) else max(cfg.max_tool_call_array_param_length, lo)
            hi = max(hi, lo)
        lo, hi = min(max(lo, 0), _MAX_ITEMS), min(max(hi, 0), _MAX_ITEMS)
        if items is False:
            hi = min(hi, len(prefix))
            lo = min(lo, hi)
        n = rng.randint(lo, hi)
        out = []
        unique = schema.get("uniqueItems") is True
        seen = set()
        attempts = 0
        while len(out) < n and attempts < n * 8 + 8 and self.left > 0:
            attempts += 1
            k = len(out)
            sub = prefix[k] if k < len(prefix) else (items if items is not None else True)
            v = self.value(sub, depth + 1)
            if unique:
                key = json.dumps(v, sort_keys=True)
                if key in seen:
                    continue
                seen.add(key)
            out.append(v)
        return out

    # -- scalars
    def _bounds(self, schema: dict, flo, fhi):
        """Numeric range ``(lo, hi, lo_excl, hi_excl)`` from the flags and the schema."""
        mn, mx = schema.get("minimum"), schema.get("maximum")
        emn, emx = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
        lo_ex = hi_ex = False
        slo = mn if _is_num(mn) else None
        shi = mx if _is_num(mx) else None
        if emn is True and slo is not None:       # draft 4 boolean form
            lo_ex = True
        elif _is_num(emn) and (slo is None or emn >= slo):
            slo, lo_ex = emn, True
        if emx is True and shi is not None:
            hi_ex = True
        elif _is_num(emx) and (shi is None or emx <= shi):
            shi, hi_ex = emx, True
        lo = flo if slo is None else max(flo, slo)
        hi = fhi if shi is None else min(fhi, shi)
        if lo > hi:                                # flag range outside the schema's: the schema wins
            width = fhi - flo
            if slo is not None and shi is not None:
                lo, hi = slo, shi
            elif slo is not None:
                lo, hi = slo, slo + width
            else:
                lo, hi = shi - width, shi
        if lo != slo:
            lo_ex = False
        if hi != shi:
            hi_ex = False
        return lo, hi, lo_ex, hi_ex

    def integer(self, schema: dict) -> int:
        cfg = self.cfg
        lo, hi, lo_ex, hi_ex = self._bounds(schema, cfg.min_tool_call_integer_param, cfg.max_tool_call_integer_param)
        ilo = math.floor(lo) + 1 if lo_ex and float(lo).is_integer() else math.ceil(lo)
        ihi = math.ceil(hi) - 1 if hi_ex and float(hi).is_integer() else math.floor(hi)
        if ilo > ihi:
            return int(ilo)
        m = schema.get("multipleOf")
        if _is_num(m) and m > 0 and float(m).is_integer():
            m = int(m)
            klo, khi = -(-ilo // m), ihi // m
            if klo <= khi:
                return self.rng.randint(klo, khi) * m
        return self.rng.randint(ilo, ihi)

    def number(self, schema: dict) -> float:
        cfg = self.cfg
        lo, hi, lo_ex, hi_ex = self._bounds(schema, cfg.min_tool_call_number_param, cfg.max_tool_call_number_param)
        m = schema.get("multipleOf")
        if _is_num(m) and m > 0:
            klo, khi = math.ceil(lo / m), math.floor(hi / m)
            if lo_ex and klo * m <= lo:
                klo += 1
            if hi_ex and khi * m >= hi:
                khi -= 1
            if klo <= khi:
                k = self.rng.randint(klo, khi)
                if float(m).is_integer():
                    return k * int(m)
                decimals = len(repr(float(m)).split(".")[1])
                return round(k * m, decimals)
        v = self.rng.uniform(lo, hi)
        r = round(v, 2)                           # models write short numbers
        if lo <= r <= hi and not (lo_ex and r <= lo) and not (hi_ex and r >= hi):
            v = r
        if (lo_ex and v <= lo) or (hi_ex and v >= hi):
            v = (lo + hi) / 2
        return v

    def string(self, schema: dict) -> str:
        """A word from the reference's list (api.md 8.2), or a value of the ``format``; fitted to
        ``minLength``/``maxLength`` and, best effort, to ``pattern``."""
        rng = self.rng
        mn, mx = schema.get("minLength"), schema.get("maxLength")
        mn = min(mn, _MAX_STRING) if _is_int(mn) else 0
        mx = mx if _is_int(mx) else None
        fmt = schema.get("format")
        s = self._formatted(fmt) if isinstance(fmt, str) else None
        if s is not None and mn <= len(s) and (mx is None or len(s) <= mx):
            return s
        pattern = schema.get("pattern")
        rx = None
        if isinstance(pattern, str):
            try:
                rx = re.compile(pattern)
            except re.error:
                rx = None
        if rx is None:
            return self._fit(rng.choice(WORDS), " ", mn, mx)
        pool = list(WORDS) + [w.lower() for w in WORDS] + [w.upper() for w in WORDS] + _PATTERN_EXTRAS
        rng.shuffle(pool)
        for cand in pool:
            for sep in (" ", "", "-", "_"):
                c = self._fit(cand, sep, mn, mx)
                if rx.search(c):
                    return c
        return self._fit(rng.choice(WORDS), " ", mn, mx)

    def _fit(self, s: str, sep: str, mn: int, mx) -> str:
        if len(s) < mn:
            s = sep.join([s] * (mn // (len(s) + len(sep)) + 2))
        if mx is not None and len(s) > mx:
            s = s[:mx]
        return s

    def _formatted(self, fmt: str) -> str | None:
        rng = self.rng
        if fmt in ("date-time", "date", "time"):
            d = f"20{rng.randint(20, 29)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
            t = f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}Z"
            return {"date-time": f"{d}T{t}", "date": d, "time": t}[fmt]
        if fmt in ("email", "idn-email"):
            return f"{rng.choice(WORDS).lower()}@example.com"
        if fmt in ("uri", "url", "iri", "uri-reference", "iri-reference"):
            return f"https://example.com/{rng.choice(WORDS).lower()}"
        if fmt == "uuid":
            return str(uuid.UUID(int=rng.getrandbits(128), version=4))
        if fmt == "ipv4":
            return ".".join(str(rng.randint(1, 254)) for _ in range(4))
        if fmt == "ipv6":
            return ":".join(f"{rng.getrandbits(16):x}" for _ in range(8))
        if fmt in ("hostname", "idn-hostname"):
            return f"{rng.choice(WORDS).lower()}.example.com"
        return None


_PATTERN_EXTRAS = ["0", "42", "2024", "12345", "abc123", "A1", "x", "ok", "+15551234567", "US", "en"]

_JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array",
               dict: "object", type(None): "null"}


def _type_of(v) -> str:
    if isinstance(v, float) and v.is_integer():
        return "integer"
    return _JSON_TYPES.get(type(v), "string")


def _accepted(t) -> set:
    """Instance types a ``type`` keyword accepts (``number`` accepts integers)."""
    ts = {t} if isinstance(t, str) else {x for x in t if isinstance(x, str)}
    if "number" in ts:
        ts.add("integer")
    return ts


def _merge(a: dict, b: dict) -> dict:
    """Shallow conjunction of two schemas: ``properties`` merged, ``required`` united, ``type``
    intersected; other keys from ``b`` win."""
    out = dict(a)
    for k, v in b.items():
        if k == "properties" and isinstance(out.get(k), dict) and isinstance(v, dict):
            out[k] = {**out[k], **v}
        elif k == "required" and isinstance(out.get(k), list) and isinstance(v, list):
            out[k] = list(dict.fromkeys(out[k] + v))
        elif k == "type" and k in out and out[k] != v:
            both = _accepted(out[k]) & _accepted(v)
            out[k] = sorted(both)[0] if len(both) == 1 else (sorted(both) or v)
            if isinstance(out[k], list) and len(out[k]) == 1:
                out[k] = out[k][0]
        else:
            out[k] = v
    return out
