"""JSON integer literals past 64 bits, read exactly as vLLM reads them.

vLLM parses a body with ``json.loads`` and pydantic: ``"seed": 123456789012345678901234567890``
is that integer, and its 400 names it digit for digit (``'input': '1234...890'``, ``n must be at
most 16384, got 1234...890``).  orjson, which reads every body here, makes a float of an integer
literal outside int64 / uint64, so the answer named ``123456789012345677877719597056``.

Nothing is paid for that on the common path but holding the body while it is read
(:func:`hold`): only a reader that meets an integral float of magnitude 2**63 or more (a
field's int check, :func:`exact_integer`) has the body parsed again with ``json.loads`` (off the
hub when it is large), every such float in the body replaced in place by the integer its literal
was, and gets that integer.  A float literal (``1e30``) stays a float, as in vLLM.
"""
from __future__ import annotations

import contextvars
import json

# (body, raw) of the JSON body being read, until its schema load is over; then None.  After an
# exact re-read: the floats orjson made -> the integers their literals were (AMBIGUOUS where two
# literals gave one float)
_HELD = contextvars.ContextVar("wide_ints_held", default=None)
AMBIGUOUS = object()
WIDE = float(1 << 63)


# hold((body, raw)): the JSON body ``body`` was read from ``raw`` (blueprints.common.parse_json_body);
# release(None): its schema load is over (schemas.loading.load), nothing held past it.  Bound
# methods, called once per request each: ~0.13 us apiece
hold = _HELD.set
release = _HELD.set


def exact_integer(value: float, parent=None, key=None):
    """For ``value``, an integral float of magnitude 2**63 or more that a field reading an int
    met: the integer its JSON literal was (every such float of the held body is replaced in
    place by its integer at the first call), ``value`` itself when it was a float literal
    (``1e30``: pydantic's ``int_parsing_size``), or None where that is unknown (no body held,
    two literals rounded to this float): the caller's old reading.  ``parent[key]``: where the
    value was read (a field's object and name), looked at first once the body is exact, so that
    two literals that round to one float each keep their own."""
    state = _HELD.get()
    if state is None:
        return None
    if state.__class__ is tuple:
        state = _exact(*state)
        _HELD.set(state)
    if parent.__class__ is dict:
        got = parent.get(key)
        if got.__class__ is int and float(got) == value:
            return got
    got = state.get(value, value)
    return None if got is AMBIGUOUS else got


def make_exact() -> None:
    """Re-read the held body exactly now (every integral float of magnitude 2**63 or more that a
    literal past 64 bits gave replaced in place by that integer), as :func:`exact_integer` does at
    its first call: for fields read as values, not through an int check (``vllm_xargs``, whose
    engine refuses integers past MessagePack's range: :func:`~.extra_args.exact_extra_args`)."""
    state = _HELD.get()
    if state.__class__ is tuple:
        _HELD.set(_exact(*state))


# (bytes, lane): a body larger than that is re-read in the lane (``lane() -> FairLane``), set by
# schemas.loading, whose validation lane it is (a layer above this one)
OFF_HUB: list = [1 << 62, None]


def _exact(body, raw: bytes) -> dict:
    from generation.lanes import on_hub_thread
    limit, lane = OFF_HUB
    if len(raw) > limit and lane is not None and on_hub_thread():
        return lane().apply(_patch, (body, raw))
    return _patch(body, raw)


def _patch(body, raw: bytes) -> dict:
    """Parse ``raw`` exactly and write each integer whose literal orjson read as a float into
    ``body`` (orjson's value of the same document); returns float -> integer."""
    try:
        exact = json.loads(raw)
    except (ValueError, RecursionError):
        return {}
    found: dict = {}
    pending = [(body, exact)]
    while pending:
        ours, theirs = pending.pop()
        if ours.__class__ is dict:
            if theirs.__class__ is not dict:
                continue
            items = ours.items()
            get = theirs.get
            pairs = [(k, v, get(k)) for k, v in items if v.__class__ in (float, dict, list)]
        elif ours.__class__ is list:
            if theirs.__class__ is not list or len(theirs) != len(ours):
                continue
            kinds = set(map(type, ours))            # a C loop: a long list of token ids costs little
            if float not in kinds and dict not in kinds and list not in kinds:
                continue
            pairs = [(i, v, theirs[i]) for i, v in enumerate(ours) if v.__class__ in (float, dict, list)]
        else:
            continue
        for key, v, e in pairs:
            if v.__class__ is float:
                if e.__class__ is int and abs(v) >= WIDE:
                    ours[key] = e                   # a value, not a key: safe while a load iterates
                    seen = found.get(v, e)
                    found[v] = e if seen == e else AMBIGUOUS
            else:
                pending.append((v, e))
    return found
