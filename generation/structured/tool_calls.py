"""Tool-call and structured-output synthesis: what a model with tools "answers".

:class:`ToolSynthesizer` is built and handed to the engine by ``app.build_simulator``.  The chat blueprint (and the
APIs translated onto chat: Anthropic Messages, Responses) calls :meth:`validate_request` and
:meth:`validate_response_format` (:mod:`generation.structured.tool_validation`) before anything is queued;
the engine calls :meth:`wants_tools` / :meth:`synthesize` / :meth:`apply_response_format` while
deciding a sequence's output, before its first byte is sent.

Behaviour (api.md 8, seeds, vLLM / OpenAI where the reference is quirky):

* ``tool_choice`` ``"none"`` -> text; named function -> exactly one call of it; ``"required"``
  -> at least one call; ``"auto"`` / omitted / ``allowed_tools`` / ``custom`` -> at least zero.
  From that minimum one more call is added with ``--tool-call-extra-call-probability``% while
  fewer calls than tools, stopping at the first failed roll; ``max_tool_calls`` caps the count.
* Arguments are an instance of the tool's ``parameters`` JSON Schema
  (:class:`generation.structured.schema_sampler.SchemaSampler`: types, enum/const, required vs optional
  with the configured probabilities, ranges from the config flags intersected with the schema's
  own bounds, nested objects/arrays, anyOf/oneOf/allOf, local ``$ref``, ``pattern``), serialised
  as compact JSON in schema property order.
"""
from __future__ import annotations

import json

from generation.errors import InvalidParam
from .schema_sampler import WORDS, SchemaSampler
from .structured_outputs import constrained_text
from .tool_validation import ToolValidator, json_schema_part, parse_tool_choice


# vLLM 0.34's _KIMI_MODEL_TYPES (renderers/chat_utils/tool_call.py): a model of these types
# numbers its tool calls "functions.<name>:<i>" (make_tool_call_id's kimi_k2 ids), as its chat
# template renders them, where every other model's are "chatcmpl-tool-<random hex>"
KIMI_MODEL_TYPES = ("kimi_k2", "kimi_k25", "kimi_k3", "kimi_k31")

PREFIX_CHARS = 65536     # texts longer than this are tokenized by prefixes when only a few tokens are wanted
PREFIX_MARGIN = 64       # tokens past the wanted ones that a prefix must give (those near its cut may differ)


def count_tool_calls(calls) -> int:
    """How many calls an assistant message's ``tool_calls`` (or a Responses item's) holds, as
    vLLM's ``parser/utils.py`` ``count_tool_calls`` counts them: none for None, one for a string
    or an object, else the length of the list."""
    if calls is None:
        return 0
    if isinstance(calls, (str, bytes, dict)):
        return 1
    return len(calls) if isinstance(calls, (list, tuple)) else 1


def numbers_tool_calls(config) -> bool:
    """Whether the served model numbers its tool calls (``config.model_types``, its
    ``config.json``'s, in :data:`KIMI_MODEL_TYPES`): then a request's ``tool_call_index`` is the
    calls its history already holds (vLLM's ``history_tool_call_cnt``: :func:`chat_history_tool_calls`,
    :func:`responses_history_tool_calls`), counted only then, and its calls are numbered on from
    there; else the ids are random."""
    return any(t in KIMI_MODEL_TYPES for t in getattr(config, "model_types", ()) or ())


def chat_history_tool_calls(messages) -> int:
    """The tool calls a chat request's assistant messages hold (vLLM's
    ``count_chat_history_tool_calls``)."""
    return sum(count_tool_calls(m.get("tool_calls")) for m in messages or ()
               if isinstance(m, dict) and m.get("role") == "assistant")


def responses_history_tool_calls(items) -> int:
    """The tool calls a Responses request's ``input`` holds (vLLM's
    ``count_response_history_tool_calls``: each ``function_call`` item, and the ``tool_calls`` of
    an item with role ``assistant``; none for a string input; not the previous response's)."""
    if isinstance(items, str):
        return 0
    n = 0
    for item in items or ():
        if not isinstance(item, dict):
            continue
        if item.get("type") == "function_call":
            n += 1
        elif item.get("role") == "assistant":
            n += count_tool_calls(item.get("tool_calls"))
    return n


def _dumps(obj) -> str:
    """Compact JSON as a model would stream it (property order kept, UTF-8 kept)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


class ToolSynthesizer:
    """Tool-call and structured-output synthesis for one simulator.

    Given ``config`` (the live :class:`generation.config.sim_config.SimConfig`), ``rng`` (the engine's
    seeded ``random.Random``, so ``--seed`` makes every draw reproducible) and ``tokenizer``.  The
    request checks of :class:`generation.structured.tool_validation.ToolValidator` are reachable here too
    (``validate_request``, ``validate_response_format``)."""

    def __init__(self, config, rng, tokenizer):
        self.config = config
        self.rng = rng
        self.tokenizer = tokenizer
        self.validator = ToolValidator(self)
        self.validate_request = self.validator.validate_request
        self.validate_response_format = self.validator.validate_response_format

    def wants_tools(self, req) -> bool:
        """True when ``req`` has a non-empty tool list and its tool_choice is not none (an empty
        list with ``"required"`` behaves like none, as in vLLM and OpenAI)."""
        if not req.tools:
            return False
        try:
            return parse_tool_choice(req.tool_choice)[0] != "none"
        except InvalidParam:
            return False

    def synthesize(self, req, seq, rng=None, limit: int | None = None) -> bool:
        """Decide ``seq``'s tool calls (api.md 8.1) and fill its output.

        On success sets ``seq.tool_calls`` (``[{"id": "chatcmpl-tool-<uid>", "uid": 32 random hex,
        "name", "arguments": JSON string, "start", "end"}]``, start/end indexing ``seq.pieces``; a
        Kimi model's ids are ``functions.<name>:<i>`` from ``req.tool_call_index`` on, vLLM's
        ``make_tool_call_id`` for them: :func:`numbers_tool_calls`),
        ``seq.pieces``/``seq.ids`` (the argument strings' tokens, call after call),
        ``finish_reason = "tool_calls"`` and ``completion_tokens`` (number of pieces); returns
        True.  Returns False when the draw gave zero calls (``auto``): the engine then answers
        with text.  Raises InvalidParam when a forced function is not in ``tools`` (only
        reachable with ``--skip-tool-validation``-style bypasses) or its schema cannot be used.
        ``rng``: the request's generator (``Simulator.request_rng``; default the engine's); call
        ids always come from the engine's, as vLLM's random ids do not follow a request seed.

        ``limit``: the tokens ``--max-request-work`` has left for this choice (None: no cap).
        Arguments past it are tokenized only up to ``limit + 1`` tokens and no further call is
        drawn: the request is refused by :func:`generation.adapters.base.check_work` (its
        ``completion_tokens``, more than the cap, are a lower bound), without first tokenizing
        megabytes of arguments per choice (72 MB of arguments: 1.3 GB and 4.4 s a choice)."""
        cfg = self.config
        rng = rng or self.rng
        tools = [t for t in req.tools if isinstance(t, dict) and isinstance(t.get("function"), dict)]
        if not tools:
            return False
        mode, name = parse_tool_choice(req.tool_choice)
        if mode == "none":
            return False
        if mode == "named":
            chosen = [t for t in tools if t["function"].get("name") == name]
            if not chosen:
                raise InvalidParam(f"The tool specified in `tool_choice` ('{name}') does not match any of the "
                               f"specified `tools`.", "tool_choice")
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
            args = self.arguments(fn.get("parameters"), fn.get("name"), rng)
            left = None if limit is None else max(limit - len(pieces), 0)
            tids, tpieces = self._tokens(args, left)
            uid = f"{self.rng.getrandbits(128):032x}"       # drawn either way: the engine's draws stay the same
            cid = (f"chatcmpl-tool-{uid}" if req.tool_call_index is None
                   else f"functions.{fn.get('name')}:{req.tool_call_index + len(calls)}")
            calls.append({"id": cid, "uid": uid, "name": fn.get("name"),
                          "arguments": args, "start": len(pieces), "end": len(pieces) + len(tpieces)})
            pieces.extend(tpieces)
            ids.extend(tids)
            if left is not None and len(tpieces) > left:
                break                   # past the request's work cap: refused, see above
        seq.tool_calls = calls
        seq.pieces = pieces
        seq.ids = ids
        seq.text = None
        seq.finish_reason = "tool_calls"
        seq.completion_tokens = len(pieces)
        return True

    def arguments(self, parameters, name=None, rng=None) -> str:
        """A compact JSON object string that validates against ``parameters`` (a JSON Schema,
        or None / ``{}`` for a parameter-less function -> ``"{}"``)."""
        if not isinstance(parameters, dict) or not parameters:
            return "{}"
        schema = parameters if "type" in parameters else {**parameters, "type": "object"}
        try:
            sampler = SchemaSampler(self.config, rng or self.rng, parameters)
            value = sampler.sample(schema, top=True)
            if not isinstance(value, dict):       # arguments are always an object
                value = sampler.object(schema, 0, top=True)
            return _dumps(value)
        except (TypeError, ValueError, KeyError, AttributeError, RecursionError) as e:
            # SchemaUnsatisfiable (a ValueError): bounds the dry run at validation could not
            # foresee (instance size, bad luck); the rest only with --skip-tool-validation.
            raise InvalidParam(f"Cannot generate arguments for tool '{name}' from its parameters schema: {e}", "tools") from None

    # ---- structured output --------------------------------------------------------------------
    def apply_response_format(self, req, seq, rng=None) -> bool:
        """Replace a text answer by what ``req.response_format`` demands (vLLM structured
        output): ``json_object`` -> ``{"response": <the sampled text>}`` (so the answer keeps
        the sampled length); ``json_schema`` -> an instance of its schema; the
        ``structured_outputs`` constraints (:mod:`generation.structured.structured_outputs`)
        ``regex`` -> a full match, ``choice`` -> one of the choices, ``grammar`` -> a string it
        derives; ``text`` and ``structural_tag`` -> unchanged.  Sets pieces/ids; finish_reason
        ``stop``, or ``length`` (cut, as vLLM cuts it) when it exceeds max_tokens or the
        context room.  ``rng``: the request's generator (default the engine's).  Returns
        whether the answer was replaced."""
        rf = req.response_format
        if not isinstance(rf, dict):
            return False
        rng = rng or self.rng
        t = rf.get("type")
        if t == "json_object":
            text = self._json_object_text(seq)
        elif t == "json_schema":
            js, prefix = json_schema_part(rf)
            schema = js.get("schema") if isinstance(js, dict) else None
            if isinstance(schema, dict) and schema:
                try:
                    text = _dumps(SchemaSampler(self.config, rng, schema).sample(schema))
                except (TypeError, ValueError, KeyError, AttributeError, RecursionError) as e:
                    raise InvalidParam(f"Cannot generate a value of {prefix}.schema: {e}", f"{prefix}.schema") from None
            else:
                text = self._json_object_text(seq)
        else:
            text = constrained_text(rf, lambda schema: SchemaSampler(self.config, rng, schema), rng)
            if text is None:
                return False
        room = self.config.max_model_len - seq.prompt_len
        cap = room if req.max_tokens is None else min(req.max_tokens, room)
        ids, pieces = self._tokens(text, max(cap, 0))
        if len(pieces) > cap:
            pieces, ids = pieces[:max(cap, 0)], ids[:max(cap, 0)]
            seq.finish_reason = "length"
        else:
            seq.finish_reason = "stop"
        seq.pieces, seq.ids = pieces, ids
        seq.text = None
        seq.completion_tokens = len(pieces)
        return True

    @staticmethod
    def _json_object_text(seq) -> str:
        overhead = 8     # tokens of {"response":""} with the simulated tokenizer
        keep = max(1, len(seq.pieces) - overhead)
        text = "".join(seq.pieces[:keep]).strip() or WORDS[0]
        return _dumps({"response": text})

    # ---- tokens -------------------------------------------------------------------------------
    def _tokens(self, text: str, limit: int | None = None) -> tuple[list, list]:
        """``(ids, pieces)`` of ``text`` whose pieces join back to exactly ``text`` (a streamed
        JSON string must be reassembled byte for byte).

        ``limit``: only the first ``limit + 1`` tokens are wanted (the caller cuts at ``limit``,
        or refuses past it): a long text is tokenized by growing prefixes (:data:`PREFIX_CHARS`,
        then x4) until one gives :data:`PREFIX_MARGIN` tokens more than that, and its first
        ``limit + 1`` are returned.  A token that ends that far before the cut does not depend
        on the text after it (the simulated tokenizer's pieces are regex matches of at most
        128 characters plus the whitespace after them; a real tokenizer's pre-tokenized words),
        so they are the whole text's first tokens: a 72 MB JSON-schema instance answered with
        ``max_tokens`` 1 was tokenized whole, 9.5 M tokens, 1.3 GB and 3.7 s a choice."""
        if limit is not None and len(text) > PREFIX_CHARS:
            size = max(PREFIX_CHARS, 8 * (limit + PREFIX_MARGIN))
            while size < len(text):
                head = text[:size]
                ids, pieces = self.tokenizer.encode_lossless(head)
                if "".join(pieces) != head:
                    break                  # pieces of a lossy decode: the whole text's way below
                if len(pieces) > limit + PREFIX_MARGIN:
                    return list(ids[:limit + 1]), pieces[:limit + 1]
                size *= 4
        ids, pieces = self.tokenizer.encode_lossless(text)
        if "".join(pieces) != text:      # a real tokenizer's per-token decode can differ
            n = max(len(ids), 1)
            step = -(-len(text) // n)
            pieces = [text[k:k + step] for k in range(0, len(text), step)]
            ids = list(ids[:len(pieces)]) + [0] * (len(pieces) - len(ids))
        return ids, pieces
