"""Cohere's Chat v2 API (``POST /cohere/v2/chat``) as vLLM 0.34 serves it
(``vllm/entrypoints/cohere/serving.py``, ``CohereServingChatV2``): the request is translated into
a chat completion (``to_chat_completion_request``) and served as one, by the chat adapter
(:class:`~generation.adapters.chat.ChatAdapter`: its checks, prompt, engine request, timing,
admission and metrics); only the answer is Cohere's.

Translation (:func:`to_chat_body`): system content parts joined; user text / ``image_url``
parts as chat parts (one text part: a string); assistant text parts joined into ``content``,
``thinking`` parts and ``tool_plan`` into ``reasoning``, ``tool_calls`` as chat's (missing
arguments ``"{}"``); tool content parts as text parts, a ``document`` part as its JSON;
``max_tokens`` -> ``max_tokens`` and ``max_completion_tokens``, ``stop_sequences`` -> ``stop``,
``p`` / ``k`` -> ``top_p`` / ``top_k``, ``logprobs`` (with ``return_token_ids``),
``response_format`` ``json_object`` -> ``json_schema`` named ``cohere_v2_json_schema`` (a
``json_object`` without a schema), tools as function tools (``strict`` with
``strict_tools``), ``tool_choice`` ``REQUIRED`` / ``NONE`` -> ``required`` / ``none``, ``auto``
with tools; ``documents`` (ids ``doc_<i>`` where missing), ``safety_mode``, ``citation_options``
and ``thinking`` go into ``chat_template_kwargs``, as the template may read them.  A stream
always has its usage (``stream_options.include_usage``).

The answer (``_chat_completion_to_v2``): ``{id, finish_reason, message, usage, logprobs?,
kv_transfer_params?}``, nulls left out; ``finish_reason`` ``COMPLETE`` / ``STOP_SEQUENCE``
(a matched stop string) / ``MAX_TOKENS`` / ``TOOL_CALL`` / ``ERROR``; ``message``: ``role``,
``tool_calls``, ``tool_plan``, ``content`` (a ``thinking`` block, then a ``text`` block);
``usage.billed_units`` and ``usage.tokens`` (input, output: floats, as vLLM's models hold
them) and ``cached_tokens`` when usage has prompt details.  A stream
(``_chat_completion_stream_to_v2``): bare ``data:`` events typed by ``type``: ``message-start``,
per block ``content-start`` / ``content-delta`` / ``content-end`` (a reasoning block is
``thinking``), per call ``tool-call-start`` (its first argument piece) / ``tool-call-delta`` /
``tool-call-end``, ``message-end`` with ``finish_reason`` and usage, then ``data: [DONE]``.
With ``--no-cohere-is-reasoning-model`` reasoning is ``tool_plan`` on a tool-call answer and
``tool-plan-delta`` events in a stream, as older Command models report it.
"""
from __future__ import annotations

import json

from generation.content.logprobs import logprob
from generation.lanes import paced

from ..errors import Rejected, SimulatorError
from .base import dumps, request_usage, usage_details
from .chat import ChatAdapter, finish_reason as chat_finish_reason
from .fields import check_sampling_ranges, tokens_as_ids
from .token_stream import Streamed, end_aborted, rendered_tokens
from .protocol import ChatCompletionRequest, StreamOptions

# vLLM's finish reasons -> Cohere's (``_FINISH_REASON_MAP``); anything else is COMPLETE
FINISH_REASONS = {"stop": "COMPLETE", "length": "MAX_TOKENS", "tool_calls": "TOOL_CALL",
                  "stop_sequence": "STOP_SEQUENCE", "error": "ERROR"}
DONE = b"data: [DONE]\n\n"


def cohere_finish_reason(reason: str | None, stop_reason) -> str:
    """``_map_finish_reason``: a stop on a matched stop string (a ``str`` ``stop_reason``) is
    ``STOP_SEQUENCE``."""
    if reason == "stop" and isinstance(stop_reason, str):
        return "STOP_SEQUENCE"
    return FINISH_REASONS.get(reason, "COMPLETE")


# ---- request translation ----------------------------------------------------------------------

def _joined(content) -> str:
    """``_coerce_text_content``: a string, or the non-empty ``text`` of each part, joined."""
    if isinstance(content, str):
        return content
    return "".join(t for t in (getattr(b, "text", None) for b in content) if t)


def _user(m) -> dict:
    if isinstance(m.content, str):
        return {"role": "user", "content": m.content}
    parts = []
    for b in paced(m.content):
        if b.type == "text":
            parts.append({"type": "text", "text": b.text})
        elif b.type == "image_url":
            url = {"url": b.image_url.url}
            if b.image_url.detail is not None:
                url["detail"] = b.image_url.detail
            parts.append({"type": "image_url", "image_url": url})
    if len(parts) == 1 and parts[0]["type"] == "text":
        return {"role": "user", "content": parts[0]["text"]}
    return {"role": "user", "content": parts}


def _assistant(m) -> dict:
    out = {"role": "assistant"}
    blocks = m.content if isinstance(m.content, list) else ()
    texts = [m.content] if isinstance(m.content, str) else [b.text for b in blocks if b.type == "text"]
    thinking = [b.thinking for b in blocks if b.type == "thinking"]
    if m.tool_plan:                # Cohere's plan before tool calls: reasoning to a chat template
        thinking.append(m.tool_plan)
    if texts:
        out["content"] = "".join(texts)
    if thinking:
        out["reasoning"] = "".join(thinking)
    if m.tool_calls:
        out["tool_calls"] = [{"id": tc.id, "type": "function",
                              "function": {"name": (tc.function.name if tc.function else "") or "",
                                           "arguments": (tc.function.arguments if tc.function else None) or "{}"}}
                             for tc in m.tool_calls]
    return out


def _document_json(doc) -> str:
    """A tool message's ``document`` part as vLLM writes it into the text: ``json.dumps`` of
    the SDK model's ``model_dump(exclude_none=True)`` (its fields, then its extra keys)."""
    fields = {"data": doc.data, "id": doc.id, **doc.extra}
    return json.dumps({k: v for k, v in fields.items() if v is not None})


def _tool(m) -> dict:
    if isinstance(m.content, str):
        return {"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content}
    parts = [{"type": "text", "text": b.text if b.type == "text" else _document_json(b.document)}
             for b in m.content]
    return {"role": "tool", "tool_call_id": m.tool_call_id, "content": parts}


_MESSAGES = {"system": lambda m: {"role": "system", "content": _joined(m.content)},
             "user": _user, "assistant": _assistant, "tool": _tool}


def _documents(docs) -> list:
    """The ``documents`` template kwarg: ``{"id", "data"}`` per document (``doc_<i>`` when it
    has no id; a string is ``{"text": ...}``)."""
    out = []
    for i, d in enumerate(paced(docs)):      # ~0.7 us a document: 750,000 held the hub 0.55 s
        if isinstance(d, str):
            out.append({"id": f"doc_{i}", "data": {"text": d}})
        else:
            out.append({"id": d.id or f"doc_{i}", "data": d.data})
    return out


def _tools(tools, strict: bool) -> list:
    out = []
    for i, t in enumerate(paced(tools)):
        fn = t.function
        if fn is None:      # vLLM: an AttributeError, its 500; a client's mistake here
            raise Rejected("tools[].function is required: a tool needs a function with a name and parameters.",
                           f"tools[{i}].function")
        f = {"name": fn.name, "description": fn.description, "parameters": fn.parameters}
        if strict:
            f["strict"] = True
        out.append({"type": "function", "function": f})
    return out


def _template_kwargs(b) -> dict | None:
    """``_apply_cohere_template_kwargs``: the request's kwargs, with the Cohere fields under
    their names unless the request's own kwargs hold them.  The citation bookkeeping vLLM also
    puts there is read only by Cohere's own renderer and parser, which the simulator has not."""
    kwargs = dict(b.chat_template_kwargs or {})
    if b.documents:
        kwargs.setdefault("documents", _documents(b.documents))
    if b.safety_mode is not None:
        kwargs.setdefault("safety_mode", str(b.safety_mode).lower())
    if b.citation_options is not None:
        kwargs.setdefault("citation_options", {k: v for k, v in {"mode": b.citation_options.mode,
                                                                  **b.citation_options.extra}.items()
                                               if v is not None})
    if b.thinking is not None:
        kwargs.setdefault("thinking", {k: v for k, v in {"type": b.thinking.type, "token_budget": b.thinking.token_budget,
                                                          **b.thinking.extra}.items() if v is not None})
    return kwargs or None


def _response_format(rf) -> dict | None:
    if rf is None or rf.type == "text":
        return None
    if rf.json_schema:
        return {"type": "json_schema", "json_schema": {"name": "cohere_v2_json_schema", "schema": rf.json_schema}}
    return {"type": "json_object"}


def to_chat_body(b) -> dict:
    """vLLM's ``_convert_v2_to_chat_completion`` of a validated request (``schemas.cohere``):
    the chat completion's body (its fields that are set).  Raises Rejected for a tool without
    its function."""
    stream = bool(b.stream)
    tools = _tools(b.tools, bool(b.strict_tools)) if b.tools else None
    body = {"model": b.model, "messages": [_MESSAGES[m.role](m) for m in paced(b.messages)],
            "max_tokens": b.max_tokens, "max_completion_tokens": b.max_tokens, "stop": b.stop_sequences,
            "temperature": b.temperature, "top_p": b.p, "top_k": b.k, "seed": b.seed,
            "frequency_penalty": b.frequency_penalty, "presence_penalty": b.presence_penalty,
            "logprobs": b.logprobs, "return_token_ids": b.logprobs, "priority": b.priority or 0,
            "kv_transfer_params": b.kv_transfer_params, "chat_template_kwargs": _template_kwargs(b),
            "stream": stream, "stream_options": {"include_usage": True} if stream else None,
            "response_format": _response_format(b.response_format), "tools": tools,
            "tool_choice": {"REQUIRED": "required", "NONE": "none"}.get(b.tool_choice, "auto" if tools else None)}
    return {k: v for k, v in body.items() if v is not None}


def chat_request(body: dict) -> ChatCompletionRequest:
    """The typed chat request of :func:`to_chat_body`'s body (valid by construction)."""
    opts = body.get("stream_options")
    return ChatCompletionRequest(**{**body, "stream_options": StreamOptions(**opts, given=True) if opts else None})


def _sampling_error(b):
    """The error of vLLM's ``SamplingParams._verify_args`` on the chat request ``b``, or None:
    its ranges (:func:`check_sampling_ranges`, its order), then ``max_tokens`` at least 1 (the
    limit it gets, ``max_tokens`` and ``max_completion_tokens`` both the Cohere field)."""
    try:
        check_sampling_ranges(b)
    except SimulatorError as err:
        return err
    if b.max_tokens is not None and b.max_tokens < 1:
        return Rejected(f"max_tokens must be at least 1, got {b.max_tokens}.", "max_tokens", b.max_tokens)
    return None


# ---- the answer --------------------------------------------------------------------------------

def cohere_usage(prompt: int, completion: int, details: dict | None) -> dict:
    """``CohereUsage``: billed units and tokens (floats), ``cached_tokens`` with the details."""
    counts = {"input_tokens": float(prompt), "output_tokens": float(completion)}
    out = {"billed_units": counts, "tokens": dict(counts)}
    if details is not None and details.get("cached_tokens") is not None:
        out["cached_tokens"] = float(details["cached_tokens"])
    return out


class CohereChatAdapter(ChatAdapter):
    """``POST /cohere/v2/chat``: a chat completion (``self.body``, translated from the Cohere
    request ``self.cohere``) answered in Cohere's shapes.  ``reasoning_model``: vLLM's
    ``--cohere-is-reasoning-model``."""
    image_output = False

    def __init__(self, sim, body):
        super().__init__(sim, chat_request(to_chat_body(body)))
        self.cohere = body
        self.reasoning_model = sim.config.cohere_is_reasoning_model
        self.open_end = b""        # the event closing the stream's open block (an error closes it)
        self.rid = None

    def build(self, rid: str, force_cache_threshold: bool):
        self.rid = rid
        return super().build(rid, force_cache_threshold)

    def named_error(self, err: BaseException) -> None:
        """An error after the request was admitted (the engine paused, a failed generation) came
        after vLLM named it: the Cohere envelope's ``id`` is ``chatcmpl-<id>``."""
        if isinstance(err, SimulatorError):
            err.vllm_request_id = f"chatcmpl-{self.rid}"

    def check(self, force_cache_threshold: bool, prompts: int = 1) -> None:
        """Chat's checks, with its sampling ones as vLLM meets them on this route: the
        ``SamplingParams`` of ``to_sampling_params`` (sampling_params.py l. 642-700: the ranges,
        then ``max_tokens`` at least 1, in its words) come after the request is named
        (chat_completion/serving.py l. 321-327, 365), so the Cohere envelope's ``id`` is
        ``chatcmpl-<id>`` (api_router.py l. 86-100, 146): the error carries it (``vllm_request_id``)."""
        late = _sampling_error(self.body)
        try:
            super().check(force_cache_threshold, prompts)
        except SimulatorError as err:
            if late is None or not (err.message == late.message or err.param in ("max_tokens", "max_completion_tokens")):
                raise
            self.named_error(late)
            raise late from None

    def render(self, seqs) -> dict:
        """``_chat_completion_to_v2`` of the chat completion."""
        chat = super().render(seqs)
        choice = chat["choices"][0]
        msg = choice["message"]
        blocks = []
        if msg.get("reasoning"):
            blocks.append({"type": "thinking", "thinking": msg["reasoning"]})
        if msg["content"]:
            blocks.append({"type": "text", "text": msg["content"]})
        message = {"role": "assistant"}
        calls = msg.get("tool_calls")
        if calls:
            message["tool_calls"] = [{"id": tc["id"], "type": "function", "function": tc["function"]} for tc in calls]
            if not self.reasoning_model and msg.get("reasoning"):
                message["tool_plan"] = msg["reasoning"]
                blocks = [b for b in blocks if b["type"] != "thinking"]
        if blocks:
            message["content"] = blocks
        usage = chat["usage"]
        out = {"id": chat["id"], "finish_reason": cohere_finish_reason(choice["finish_reason"], choice["stop_reason"]),
               "message": message,
               "usage": cohere_usage(usage["prompt_tokens"], usage["completion_tokens"],
                                     usage.get("prompt_tokens_details"))}
        seq = seqs[0]
        if self.body.logprobs and seq.ids:
            # ``_build_logprobs``: chat's logprobs zipped with its token_ids, both over every output
            # token (chat_completion/serving.py l. 1009-1021, 1078-1081): the reasoning, its
            # markers and a tool call's tokens too, where the simulator's chat keeps the content's
            as_ids = tokens_as_ids(self.sim, self.body)
            out["logprobs"] = [{"text": f"token_id:{t}" if as_ids else p, "token_ids": [t], "logprobs": [logprob(k)]}
                               for k, (p, t) in enumerate(zip(seq.logprob_pieces(), seq.ids))]
        if chat.get("kv_transfer_params"):
            out["kv_transfer_params"] = chat["kv_transfer_params"]
        return out

    def stream(self, seqs):
        return stream_v2(self, seqs[0])

    def stream_error(self, body: dict) -> bytes:
        """vLLM's stream after a failure: the open block closed, a ``message-end`` with the
        error (``json.dumps``, its spacing) and ``finish_reason`` ``ERROR``, ``[DONE]``."""
        end = {"type": "message-end", "delta": {"error": body["error"]["message"], "finish_reason": "ERROR"}}
        out = self.open_end + b"data: " + json.dumps(end).encode() + b"\n\n" + DONE
        self.open_end = b""
        return out


def _event(obj: dict) -> bytes:
    return b"data: " + dumps(obj) + b"\n\n"


def _content_start(index: int, kind: str) -> bytes:
    # the SDK's delta model orders the text before its type
    return _event({"index": index, "delta": {"message": {"content": {kind: "", "type": kind}}},
                   "type": "content-start"})


def stream_v2(adapter: CohereChatAdapter, seq):
    """The SSE body (``_chat_completion_stream_to_v2`` over chat's chunks): ``message-start``
    with the first output (chat's role chunk), blocks as the tokens come, the open one closed
    before the next opens; ``adapter.open_end`` holds the event that closes the open block."""
    sim, req = adapter.sim, adapter.req
    cid = f"chatcmpl-{req.request_id}"
    start = first_event = _event({"id": cid, "delta": {"message": {"role": "assistant"}}, "type": "message-start"})
    span = seq.reasoning_span
    c0 = span[2] if span is not None else 0
    calls = seq.tool_calls
    call_of = seq.tool_call_of_piece() if calls else None
    blocks = 0            # content blocks opened so far (their indexes)
    opened = 0            # tool calls started so far
    kind = None           # the open block: "thinking", "text", "tool" or None

    def close() -> bytes:
        nonlocal kind
        out, kind, adapter.open_end = adapter.open_end, None, b""
        return out

    def open_block(new: str) -> bytes:
        nonlocal kind, blocks
        out = close() + _content_start(blocks, new)
        kind = new
        adapter.open_end = _event({"index": blocks, "type": "content-end"})
        blocks += 1
        return out

    def delta(key: str, piece: str) -> bytes:
        return _event({"index": blocks - 1, "delta": {"message": {"content": {key: piece}}}, "type": "content-delta"})

    def start_call(c: int, piece: str) -> bytes:
        nonlocal kind
        tc = calls[c]
        out = close() + _event({"index": c, "delta": {"message": {"tool_calls": {
            "id": tc["id"], "type": "function", "function": {"name": tc["name"], "arguments": piece}}}},
            "type": "tool-call-start"})
        kind = "tool"
        adapter.open_end = _event({"index": c, "type": "tool-call-end"})
        return out

    pending = None        # [event key, pieces]: the deltas of one kind a group holds, sent as one event

    def flush() -> bytes:
        nonlocal pending
        if pending is None:
            return b""
        (what, c), text = pending[0], "".join(pending[1])
        pending = None
        if what == "plan":
            return _event({"delta": {"message": {"tool_plan": text}}, "type": "tool-plan-delta"})
        if what == "args":
            return _event({"index": c, "delta": {"message": {"tool_calls": {"function": {"arguments": text}}}},
                           "type": "tool-call-delta"})
        return delta(what, text)

    def add(key: tuple, piece: str, before) -> bytes:
        """``piece`` joins the pending delta of ``key``; another key sends the pending one, then
        ``before()`` (the block or call the new delta needs)."""
        nonlocal pending
        if pending is not None and pending[0] == key:
            pending[1].append(piece)
            return b""
        out = flush() + before()
        pending = [key, [piece]]
        return out

    def thinking() -> bytes:
        return open_block("thinking") if kind != "thinking" else b""

    def text() -> bytes:
        return open_block("text") if kind != "text" else b""

    def events(item) -> bytes:
        # one output: a token, or with a stream interval a group of them (chat's one chunk, its
        # reasoning, content and call arguments each one delta).  Called once per output, in
        # order (the open block is its state), by rendered_tokens or the server's hub
        nonlocal start, opened
        out, start = start, b""
        for k in (range(item.start, item.stop) if type(item) is slice else (item,)):
            piece = seq.pieces[k]
            if k < c0:
                if not span[0] <= k < span[1]:
                    continue                  # the parser's markers: no delta
                if not adapter.reasoning_model:
                    out += add(("plan", 0), piece, close)
                else:
                    out += add(("thinking", 0), piece, thinking)
            elif calls:
                c = call_of[k]
                if opened <= c:
                    out += flush()
                    while opened < c:         # calls without argument tokens
                        out += start_call(opened, "")
                        opened += 1
                    out += start_call(c, piece)   # chat's first chunk of a call: its id, name, first piece
                    opened += 1
                elif piece:
                    out += add(("args", c), piece, bytes)
            elif piece:                       # vLLM: ``if delta.content:``, no event for no text
                out += add(("text", 0), piece, text)
        return out + flush()

    ready = []
    streamed = Streamed(seq.index + 1)      # tokens sent, for an abort (end_aborted)
    yield from rendered_tokens(sim, seq, events, ready, streamed)
    if end_aborted(req, [seq], streamed):
        # The blocks as the client saw them: in step mode the hub renders a stream's next token
        # while the engine steps (server/sse_emitter.py _render_ahead), and that render changed
        # this state (message-start consumed, the thinking block closed, a text block or a tool
        # call opened) though its events were never sent.  Replayed from the tokens sent.
        start, blocks, opened, kind, pending, adapter.open_end = first_event, 0, 0, None, None, b""
        held = seq.flushed                        # not sent: the abort's final output sends it
        if held:
            seq.pieces[-1] = seq.pieces[-1][:-len(held)]
        for k in range(seq.completion_tokens):
            events(k)
        if held:
            seq.pieces[-1] += held
        calls = calls and calls[:opened]          # the calls it started: none more
    out = b"".join(ready) + start
    if seq.flushed and not calls:                 # the text a stop string's holdback kept
        out += add(("text", 0), seq.flushed, text) + flush()
    while calls and opened < len(calls):          # calls without argument tokens
        out += start_call(opened, "")
        opened += 1
    usage = request_usage([seq], usage_details(sim), final_chunk=True)
    end = {"finish_reason": cohere_finish_reason(chat_finish_reason(req, seq), seq.stop_reason),
           "usage": cohere_usage(usage["prompt_tokens"], usage["completion_tokens"],
                                 usage.get("prompt_tokens_details"))}
    yield out + close() + _event({"id": cid, "delta": end, "type": "message-end"}) + DONE
