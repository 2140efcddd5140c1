"""JSON-Schema value generation: one random instance of a schema, bounded in time and size.

Used for tool-call arguments and ``response_format`` ``json_schema`` answers
(:mod:`generation.structured.tool_calls`) and, as a dry run on every leaf, by the request checks
(:mod:`generation.structured.tool_validation`), so a schema that cannot be satisfied within the bounds is a
400 before anything is queued.

Bounds (README "Robustness limits"):

* strings at most :data:`MAX_STRING` characters, arrays at most :data:`MAX_ITEMS` items, at most
  :data:`BUDGET` values per instance;
* ``pattern``: strings come from a non-backtracking generator (:mod:`generation.structured.regex_sampler`)
  and are checked with a matcher bounded by :data:`PATTERN_SECONDS` per pattern;
* the whole instance within :data:`SAMPLE_SECONDS`;
* numbers are finite JSON numbers that pass ``jsonschema``'s own ``minimum`` / ``maximum`` /
  ``exclusive*`` / ``multipleOf`` checks (``multipleOf`` 1e-5, ``minimum`` 1e300, ...).

What cannot be met raises :class:`SchemaUnsatisfiable` naming the place in the schema.
"""
from __future__ import annotations

import json
import math
import time
import uuid
from collections import OrderedDict
from decimal import Decimal, InvalidOperation
from fractions import Fraction

from . import regex_sampler
from .numeric import EXACT_INT, int_range, is_int, is_num, number_ok, schema_bounds

# The reference's string values (api.md 8.2).
WORDS = ("testing", "hello", "Boston", "sunny", "temperature", "cloudy", "question", "Yorick",
         "silence", "lifetime")

MAX_DEPTH = 8             # beyond it only required fields / minimal arrays are generated
HARD_DEPTH = 40           # recursive required $refs: give up
MAX_STRING = 4096         # longest generated string (minLength above it is unsatisfiable)
MAX_ITEMS = 256           # longest generated array
BUDGET = 20000            # values per instance: nested huge minItems must not explode
PATTERN_SECONDS = 0.05    # matching time spent on one pattern
SAMPLE_SECONDS = 0.5      # time spent on one instance
_MIN_TRIES = 4            # pattern draws made even past the time bound (each match <= _MIN_TRY_MATCH_S)
_MIN_TRY_MATCH_S = 0.01
_PATTERN_EXTRAS = ["0", "42", "2024", "12345", "abc123", "A1", "x", "ok", "+15551234567", "US", "en"]
MAX_EXPANSION = 4096      # atoms a pattern's counted repeats may unroll to (compile: ~50 ms, ~1 MB)
MAX_PATTERN = 4096        # characters of one pattern (parsing is pure Python, ~1 us a character)
_WITNESS_CACHE = 1024     # strings found for (pattern, minLength, maxLength), reused on bad luck
_COMPILED_ATOMS = 65536   # atoms of all cached compiled patterns (~250 bytes each in memory)


class SchemaUnsatisfiable(ValueError):
    """No instance found within the bounds.  ``path`` is a JSON-path-like location in the schema
    (``$.properties.s``), ``reason`` says which keyword and bound."""

    def __init__(self, path: str, reason: str):
        super().__init__(f"{reason} (at {path})")
        self.path = path
        self.reason = reason


_witnesses: OrderedDict = OrderedDict()
_compiled: OrderedDict = OrderedDict()     # pattern -> (parsed, compiled, atoms)
_compiled_atoms = [0]


def pattern_refusal(pattern: str) -> str | None:
    """Why ``pattern`` is refused before anything compiles it (too long, its counted repeats
    unroll past :data:`MAX_EXPANSION` atoms at worst, or Python's parser rejects it, as it
    does ``x{4294967296}``), else None.  Parses only: nothing is compiled or cached."""
    if len(pattern) > MAX_PATTERN:
        return f"it is longer than {MAX_PATTERN} characters"
    try:
        atoms = regex_sampler.expansion(regex_sampler.parse(pattern))
    except regex_sampler.Unsupported:       # perhaps regex-only syntax: bounded from its text
        atoms = regex_sampler.text_expansion(pattern)
    if atoms > MAX_EXPANSION:
        return f"its counted repeats unroll to more than {MAX_EXPANSION} atoms"
    return None


def _pattern(pattern: str):
    """``(parsed, compiled, why)`` for a pattern; ``compiled`` is None (``why`` says why) when
    the pattern is unusable.  Usable patterns are cached (at most :data:`_WITNESS_CACHE`
    patterns and :data:`_COMPILED_ATOMS` atoms); refused ones are neither compiled nor kept."""
    hit = _compiled.get(pattern)
    if hit is not None:
        _compiled.move_to_end(pattern)
        return hit[0], hit[1], None
    why = pattern_refusal(pattern)
    if why is not None:
        return None, None, why
    try:
        parsed = regex_sampler.parse(pattern)
        atoms = regex_sampler.expansion(parsed)
    except regex_sampler.Unsupported:
        parsed, atoms = None, regex_sampler.text_expansion(pattern)
    compiled = regex_sampler.compile_bounded(pattern)
    if compiled is None:
        return parsed, None, "it is not a supported regular expression"
    atoms = max(atoms, 1)
    _compiled[pattern] = (parsed, compiled, atoms)
    _compiled_atoms[0] += atoms
    while len(_compiled) > _WITNESS_CACHE or _compiled_atoms[0] > _COMPILED_ATOMS:
        _compiled_atoms[0] -= _compiled.popitem(last=False)[1][2]
    return parsed, compiled, None


class SchemaSampler:
    """Draws one instance of a JSON Schema with ``rng`` (a ``random.Random``).

    ``cfg`` gives the flag ranges (api.md 8.2): integers in ``[--min-tool-call-integer-param,
    --max-...]``, numbers in ``[--min-tool-call-number-param, --max-...)``, array lengths in
    ``[--min-tool-call-array-param-length, --max-...]`` - each intersected with the schema's own
    bounds (the schema wins when the two ranges do not overlap).  Optional top-level properties
    appear with ``--tool-call-not-required-param-probability``%, optional nested fields with
    ``--object-tool-call-not-required-field-probability``%.  ``root`` resolves local ``$ref``.

    Every method raises :class:`SchemaUnsatisfiable` when the bounds cannot be met."""

    def __init__(self, cfg, rng, root, seconds: float = SAMPLE_SECONDS):
        self.cfg = cfg
        self.rng = rng
        self.root = root
        self.left = BUDGET
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds

    def sample(self, schema, top: bool = True):
        """One instance of ``schema`` (the root)."""
        return self.value(schema, 0, top, "$")

    # -- schema plumbing
    def _resolve(self, schema: dict) -> dict:
        """Inline ``$ref`` and ``allOf`` into one dict (siblings kept, as draft 2019+)."""
        for _ in range(16):
            ref = schema.get("$ref")
            if isinstance(ref, str):
                target = resolve_pointer(self.root, ref) if ref.startswith("#") else None
                rest = {k: v for k, v in schema.items() if k != "$ref"}
                schema = merge(target if isinstance(target, dict) else {}, rest)
                continue
            all_of = schema.get("allOf")
            if isinstance(all_of, list):
                merged = {k: v for k, v in schema.items() if k != "allOf"}
                for sub in all_of:
                    if isinstance(sub, dict):
                        merged = merge(merged, sub)
                schema = merged
                continue
            break
        return schema

    def value(self, schema, depth: int, top: bool = False, path: str = "$"):
        """One instance of ``schema`` (a dict or boolean schema) found at ``path``."""
        rng = self.rng
        self.left -= 1
        if self.left < 0:
            raise SchemaUnsatisfiable(path, f"the instance would have more than {BUDGET} values")
        if depth > HARD_DEPTH:
            raise SchemaUnsatisfiable(path, f"required values nest deeper than {HARD_DEPTH} levels")
        if time.monotonic() > self.deadline:
            raise SchemaUnsatisfiable(path, f"no instance found within {self.seconds:g} s")
        if schema is True or not isinstance(schema, dict) or not schema:
            return rng.choice(WORDS)
        schema = self._resolve(schema)
        t = schema.get("type")
        if "const" in schema:
            return _as_integer(schema["const"], t)
        enum = schema.get("enum")
        if isinstance(enum, list) and enum:
            if isinstance(t, (str, list)):
                fit = [v for v in enum if _type_of(v) in _accepted(t)]
                enum = fit or enum
            return _as_integer(rng.choice(enum), t)
        for key in ("anyOf", "oneOf"):
            branches = schema.get(key)
            if isinstance(branches, list) and branches:
                usable = [b for b in branches if b is not False] or branches
                k = rng.randrange(len(usable))
                branch = usable[k]
                rest = {k2: v for k2, v in schema.items() if k2 != key}
                return self.value(merge(rest, branch if isinstance(branch, dict) else {}), depth, top,
                                  f"{path}.{key}[{k}]")
        kind = self._type(schema)
        if kind == "object":
            return self.object(schema, depth, top, path)
        if kind == "array":
            return self.array(schema, depth, path)
        if kind == "integer":
            return self.integer(schema, path)
        if kind == "number":
            return self.number(schema, path)
        if kind == "boolean":
            return rng.random() < 0.5
        if kind == "null":
            return None
        return self.string(schema, path)

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
    def object(self, schema: dict, depth: int, top: bool = False, path: str = "$") -> dict:
        schema = self._resolve(schema)
        rng = self.rng
        props = schema.get("properties")
        props = props if isinstance(props, dict) else {}
        required = schema.get("required")
        required = [r for r in required if isinstance(r, str)] if isinstance(required, list) else []
        req_set = set(required)
        p = (self.cfg.tool_call_not_required_param_probability if top
             else self.cfg.object_tool_call_not_required_field_probability)
        deep = depth >= MAX_DEPTH
        out = {}
        skipped = []
        for name, sub in props.items():
            if name in req_set or (not deep and rng.randrange(100) < p):
                out[name] = self.value(sub, depth + 1, False, f"{path}.properties.{name}")
            else:
                skipped.append(name)
        extra = schema.get("additionalProperties")
        for name in required:
            if name not in out:
                out[name] = self.value(extra if isinstance(extra, dict) else True, depth + 1, False,
                                       f"{path}.additionalProperties")
        min_props = schema.get("minProperties")
        if is_int(min_props):
            for name in skipped:
                if len(out) >= min_props:
                    break
                out[name] = self.value(props[name], depth + 1, False, f"{path}.properties.{name}")
        return out

    def array(self, schema: dict, depth: int, path: str = "$") -> list:
        cfg, rng = self.cfg, self.rng
        prefix = schema.get("prefixItems")
        items = schema.get("items")
        if isinstance(items, list):           # draft 4-2019 tuple form
            prefix, items = items, schema.get("additionalItems", True)
        prefix = prefix if isinstance(prefix, list) else []
        s_lo, s_hi = schema.get("minItems"), schema.get("maxItems")
        if is_int(s_lo) and s_lo > MAX_ITEMS:
            raise SchemaUnsatisfiable(path, f"minItems {s_lo} is above the {MAX_ITEMS}-item bound")
        if depth >= MAX_DEPTH:
            lo = hi = s_lo if is_int(s_lo) else 0
        else:
            lo = s_lo if is_int(s_lo) else min(cfg.min_tool_call_array_param_length, s_hi if is_int(s_hi) else 1 << 30)
            hi = s_hi if is_int(s_hi) else max(cfg.max_tool_call_array_param_length, lo)
            hi = max(hi, lo)
        lo, hi = min(max(lo, 0), MAX_ITEMS), min(max(hi, 0), MAX_ITEMS)
        if items is False:
            hi = min(hi, len(prefix))
            lo = min(lo, hi)
        n = rng.randint(lo, hi)
        out = []
        unique = schema.get("uniqueItems") is True
        seen = set()
        attempts = 0
        while len(out) < n and attempts < n * 8 + 8:
            attempts += 1
            k = len(out)
            if k < len(prefix):
                sub, where = prefix[k], f"{path}.prefixItems[{k}]"
            else:
                sub, where = (items if items is not None else True), f"{path}.items"
            v = self.value(sub, depth + 1, False, where)
            if unique:
                key = json.dumps(v, sort_keys=True)
                if key in seen:
                    continue
                seen.add(key)
            out.append(v)
        return out

    # -- numbers
    def _bounds(self, schema: dict, flo, fhi):
        """``(lo, hi, lo_excl, hi_excl)``: the flag range intersected with the schema's (the
        schema's alone when they do not overlap)."""
        slo, shi, slo_ex, shi_ex = schema_bounds(schema)
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
            if not (math.isfinite(lo) and math.isfinite(hi)):
                lo = hi = slo if slo is not None else shi
        lo_ex = slo_ex and lo == slo
        hi_ex = shi_ex and hi == shi
        return lo, hi, lo_ex, hi_ex

    def integer(self, schema: dict, path: str = "$") -> int:
        """An ``int`` (never a float, even for float bounds or ``multipleOf``) uniform in the
        flag range intersected with the schema's ``minimum`` / ``maximum`` / ``exclusive*``."""
        cfg = self.cfg
        lo, hi, lo_ex, hi_ex = self._bounds(schema, cfg.min_tool_call_integer_param, cfg.max_tool_call_integer_param)
        m = schema.get("multipleOf")
        if is_num(m) and m > 0:
            return self._multiple(schema, lo, hi, lo_ex, hi_ex, m, True, path)
        ilo, ihi = int_range(lo, hi, lo_ex, hi_ex)
        cands = [self.rng.randint(ilo, ihi)] if ilo <= ihi else []
        slo, shi, _, _ = schema_bounds(schema)
        cands += [int(x) + d for x in (slo, shi) if x is not None for d in (-1, 0, 1)] + [0]
        for v in cands:
            if number_ok(v, schema):
                return v
        raise SchemaUnsatisfiable(path, "no integer satisfies minimum/maximum")

    def number(self, schema: dict, path: str = "$"):
        """A whole number (an ``int``, JSON ``42``) uniform in the flag range intersected with the
        schema's bounds when that range holds one within +-2**53, as models write ``number``
        fields (counts, ids, milliseconds; Codex reads its ``number`` arguments ``session_id``,
        ``yield_time_ms`` as Rust integers and refuses ``53.48``); else a float rounded to two
        decimals when that fits, else any float in range."""
        cfg = self.cfg
        lo, hi, lo_ex, hi_ex = self._bounds(schema, cfg.min_tool_call_number_param, cfg.max_tool_call_number_param)
        m = schema.get("multipleOf")
        if is_num(m) and m > 0:
            return self._multiple(schema, lo, hi, lo_ex, hi_ex, m, False, path)
        flag_end = schema_bounds(schema)[1] is None or hi == cfg.max_tool_call_number_param
        ilo, ihi = int_range(lo, hi, lo_ex, hi_ex or flag_end)     # the flag range is [min, max)
        ilo, ihi = max(ilo, -EXACT_INT), min(ihi, EXACT_INT)
        if ilo <= ihi:
            v = self.rng.randint(ilo, ihi)
            if number_ok(v, schema):
                return v
        r = self.rng.random()
        v = lo * (1 - r) + hi * r                 # no overflow, unlike lo + (hi - lo) * r
        cands = [round(v, 2), v, lo / 2 + hi / 2,  # models write short numbers
                 math.nextafter(lo, math.inf) if lo_ex else lo,
                 math.nextafter(hi, -math.inf) if hi_ex else hi]
        for in_range in (True, False):
            for c in cands:
                if (math.isfinite(c) and (not in_range or lo <= c <= hi) and number_ok(c, schema)):
                    return c
        raise SchemaUnsatisfiable(path, "no finite number satisfies minimum/maximum")

    def _multiple(self, schema, lo, hi, lo_ex, hi_ex, m, integer: bool, path: str):
        """A multiple of ``m`` in the range (then in the schema's own range) that passes
        :func:`number_ok`.  ``m`` is read as the decimal it is written as (0.1 is 1/10)."""
        try:
            fm = Fraction(Decimal(repr(m))) if isinstance(m, float) else Fraction(m)
        except (InvalidOperation, ValueError):
            raise SchemaUnsatisfiable(path, f"multipleOf {m!r} is not usable") from None
        step = Fraction(fm.numerator) if integer else fm     # integer multiples of p/q: multiples of p
        slo, shi, slo_ex, shi_ex = schema_bounds(schema)
        own = (Fraction(slo) if slo is not None else None, Fraction(shi) if shi is not None else None)
        if own[0] is None and own[1] is None:
            own = (-16 * step, 16 * step)
        elif own[0] is None:
            own = (own[1] - 16 * step, own[1])
        elif own[1] is None:
            own = (own[0], own[0] + 16 * step)
        rng = self.rng
        for a, b, aex, bex in ((Fraction(lo), Fraction(hi), lo_ex, hi_ex), (*own, slo_ex, shi_ex)):
            klo, khi = math.ceil(a / step), math.floor(b / step)
            if aex and klo * step == a:
                klo += 1
            if bex and khi * step == b:
                khi -= 1
            if klo > khi:
                continue
            ks = [rng.randint(klo, khi) for _ in range(6)] + [klo, khi]
            ks += [k for k in (0, (klo + khi) // 2) if klo <= k <= khi]
            for k in ks:
                q = k * step
                try:
                    v = int(q) if q.denominator == 1 and (integer or not isinstance(m, float)) else float(q)
                except OverflowError:
                    continue
                if isinstance(v, float) and not math.isfinite(v):
                    continue
                if number_ok(v, schema):
                    return v
        raise SchemaUnsatisfiable(path, f"no finite {'integer' if integer else 'number'} that is a multipleOf "
                                        f"{m!r} satisfies minimum/maximum")

    # -- strings
    def string(self, schema: dict, path: str = "$") -> str:
        """A word from the reference's list (api.md 8.2), a value of the ``format``, or a string
        drawn from ``pattern``; fitted to ``minLength``/``maxLength``."""
        rng = self.rng
        mn, mx = schema.get("minLength"), schema.get("maxLength")
        mn = mn if is_int(mn) and mn > 0 else 0
        mx = mx if is_int(mx) else None
        if mn > MAX_STRING:
            raise SchemaUnsatisfiable(path, f"minLength {mn} is above the {MAX_STRING}-character bound")
        pattern = schema.get("pattern")
        if isinstance(pattern, str):
            return self.pattern_string(pattern, mn, mx, path)
        fmt = schema.get("format")
        s = self._formatted(fmt) if isinstance(fmt, str) else None
        if s is not None and mn <= len(s) and (mx is None or len(s) <= mx):
            return s
        return _fit(rng.choice(WORDS), " ", mn, MAX_STRING if mx is None else min(mx, MAX_STRING))

    def pattern_string(self, pattern: str, mn: int, mx, path: str) -> str:
        """A string of length in ``[mn, mx]`` that ``pattern`` matches (searched, as JSON Schema
        does).  Words first (as the reference answers), then strings drawn from the pattern,
        padded when short; each checked with a time-bounded matcher."""
        parsed, compiled, why = _pattern(pattern)
        cap = MAX_STRING if mx is None else min(mx, MAX_STRING)
        if compiled is None:
            raise SchemaUnsatisfiable(path, f"pattern {pattern!r} cannot be used: {why}")
        rng = self.rng
        end = min(self.deadline, time.monotonic() + PATTERN_SECONDS)

        def ok(c: str, floor: float = 0.001) -> bool:
            return mn <= len(c) <= cap and regex_sampler.matches(compiled, c, max(end - time.monotonic(), floor))

        pool = list(WORDS) + [w.lower() for w in WORDS] + _PATTERN_EXTRAS
        for cand in rng.sample(pool, 8):
            for sep in (" ", ""):
                c = _fit(cand, sep, mn, cap)
                if ok(c):
                    return c
                if time.monotonic() > end:
                    break
        spread = 4
        too_long = False
        tries = 0
        # the first draws run even when the words used up the time (a loaded machine, other
        # greenlets): a plain pattern such as ^wf_[a-z0-9-]{6,}$ must not become a 400
        while parsed is not None and (tries < _MIN_TRIES or time.monotonic() < end):
            tries += 1
            floor = _MIN_TRY_MATCH_S if tries <= _MIN_TRIES else 0.001
            try:
                s = regex_sampler.generate(parsed, rng, cap, spread)
            except regex_sampler.TooLong:
                too_long = spread == 0
                if too_long:
                    break
                spread //= 2
                continue
            except regex_sampler.Unsupported:
                break
            time.sleep(0)      # under gevent's monkey patch: let other requests run between tries
            if ok(s, floor):
                return _remember((pattern, mn, mx), s)
            if len(s) < mn:
                pad = (s[-1:] or "x") * (mn - len(s))
                for c in (s + pad, pad + s):
                    if ok(c, floor):
                        return _remember((pattern, mn, mx), c)
                spread = min(max(spread * 2, 1), cap)
        hit = _witnesses.get((pattern, mn, mx))
        if hit is not None:
            return hit
        bound = f"its shortest match is longer than {cap}" if too_long else f"within {PATTERN_SECONDS} s"
        raise SchemaUnsatisfiable(path, f"no string of length {mn}..{cap} matching pattern {pattern!r} "
                                        f"found ({bound})")

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


def _as_integer(v, t):
    """An integral float of an ``enum`` / ``const`` as an ``int`` when the schema's ``type``
    allows integers but not other numbers (``{"type": "integer", "enum": [1.0]}`` gives ``1``)."""
    ts = {t} if isinstance(t, str) else {x for x in t if isinstance(x, str)} if isinstance(t, list) else set()
    if "integer" in ts and "number" not in ts and isinstance(v, float) and v.is_integer() and abs(v) <= EXACT_INT:
        return int(v)
    return v


def _remember(key, s: str) -> str:
    _witnesses[key] = s
    _witnesses.move_to_end(key)
    if len(_witnesses) > _WITNESS_CACHE:
        _witnesses.popitem(last=False)
    return s


def _fit(s: str, sep: str, mn: int, mx) -> str:
    if len(s) < mn:
        s = sep.join([s] * (mn // (len(s) + len(sep)) + 2))
    if mx is not None and len(s) > mx:
        s = s[:max(mx, 0)]
    return s


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


def merge(a: dict, b: dict) -> dict:
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


def resolve_pointer(root, ref: str):
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
