"""The Responses API's objects and SSE events (:mod:`generation.adapters.responses` translates the
request; the event order is in its docstring).
"""
from __future__ import annotations

import time
from dataclasses import asdict

from generation.content import logprobs as lp
from generation.content.reasoning import content_text, counted_span, reasoning_text
from generation.engine.stream_interval import token_span, within
from .base import REMOTE_DECODE_PARAMS, created_cache_tokens, dumps, per_request_metrics
from .json_dumps import dumps_any
from .response_bodies import (function_call_item, output_message, output_text, output_text_logprob, reasoning_item,
                             responses_reasoning, responses_response, responses_text_format, responses_usage)
from .protocol import ResponsesRequest
from .token_stream import Streamed, end_aborted, rendered_tokens


class RenderCtx:
    """What rendering needs besides the engine request; ``n`` numbers the stream's events."""
    __slots__ = ("body", "req", "created", "want_logprobs", "top", "tools", "names", "text", "n", "store",
                 "block", "background", "response_id", "max_tokens", "tool_choice", "ec_transfer_params")

    def __init__(self, body: ResponsesRequest, req, want_logprobs, top, block: int = 0):
        self.body = body
        self.block = block          # prefix-cache block size (tokens), 0 without one (base.prefix_block)
        self.req = req
        self.created = int(time.time())
        self.want_logprobs = want_logprobs
        self.top = top
        self.tools = []             # echoed as the SDK's Tool models dump them; namespaced calls' names (build)
        self.names = {}
        self.tool_choice = "auto"   # as vLLM's check_tool_usage leaves it (build)
        cfg = body.text
        fmt = asdict(cfg.format) if cfg is not None and cfg.format is not None else None
        # the specification's text.format.type: {"type": "text"} where the request sent no format
        # (vLLM echoes request.text, null then: protocol.py l. 1058)
        self.text = {"format": responses_text_format(fmt) if fmt and fmt.get("type") else {"type": "text"},
                     "verbosity": cfg.verbosity if cfg is not None else None}
        self.n = 0
        self.store = False
        self.background = False
        self.response_id = f"resp_{req.request_id}"
        self.max_tokens = req.max_tokens        # SamplingParams.max_tokens: min(max_output_tokens, room) (build)
        self.ec_transfer_params = None

    def event(self, type_: str, payload: dict) -> bytes:
        """One named SSE event with the next ``sequence_number``, its fields in the order of the
        openai SDK's event model that vLLM 0.34 dumps (``model_dump_json``, responses/
        api_router.py l. 34-44): alphabetical (the SDK's models list their required fields so,
        and an event's are all required)."""
        fields = {"type": type_, "sequence_number": self.n, **payload}
        frame = b"event: " + type_.encode() + b"\ndata: " + dumps_any(dict(sorted(fields.items()))) + b"\n\n"
        self.n += 1
        return frame


# ---- rendering ------------------------------------------------------------------------------------

def _float(value, default: float) -> float:
    return default if value is None else float(value)


def base_response(ctx: RenderCtx, status: str, output: list | None = None, usage: dict | None = None,
                  metrics: dict | None = None, kv_transfer_params: dict | None = None) -> dict:
    """vLLM's ``ResponsesResponse.from_request`` (responses/protocol.py l. 1001-1066): the
    request's settings echoed, the sampling parameters as ``to_sampling_params`` resolved them
    (``temperature``/``top_p`` 1.0, penalties 0.0 when not given; ``max_output_tokens`` the
    tokens allowed; ``top_logprobs`` only with the logprobs ``include``), ``incomplete_details``
    for ``incomplete`` (always ``max_output_tokens``)."""
    d = ctx.body
    return responses_response(
        id=ctx.response_id, created_at=ctx.created,
        incomplete_details={"reason": "max_output_tokens"} if status == "incomplete" else None,
        instructions=d.instructions, metadata=d.metadata, model=ctx.req.model, output=output or [],
        parallel_tool_calls=True if d.parallel_tool_calls is None else d.parallel_tool_calls,
        temperature=_float(d.temperature, 1.0), tool_choice=ctx.tool_choice, tools=ctx.tools,
        top_p=_float(d.top_p, 1.0), background=ctx.background, max_output_tokens=ctx.max_tokens,
        max_tool_calls=d.max_tool_calls, previous_response_id=d.previous_response_id,
        prompt_cache_key=d.prompt_cache_key, reasoning=responses_reasoning(d.reasoning),
        safety_identifier=d.safety_identifier, service_tier=d.service_tier or "auto", status=status,
        text=ctx.text, top_logprobs=(d.top_logprobs or 0) if ctx.want_logprobs else None,
        truncation=d.truncation or "disabled", usage=usage, user=d.user, metrics=metrics,
        presence_penalty=_float(d.presence_penalty, 0.0), frequency_penalty=_float(d.frequency_penalty, 0.0),
        kv_transfer_params=kv_transfer_params,
        ec_transfer_params=ctx.ec_transfer_params if usage is not None else None)


def _usage(seq, block: int) -> dict:
    """``cache_write_tokens`` is what the request wrote to the prefix cache
    (:func:`created_cache_tokens`, blocks of ``block`` tokens), as vLLM 0.34's
    ``responses/serving.py`` reports ``num_cache_creation_tokens``."""
    span = counted_span(seq)
    return responses_usage(seq.prompt_len, seq.completion_tokens, seq.cached_tokens,
                           created_cache_tokens(seq, block), span[1] - span[0] if span is not None else 0)


def _incomplete_reason(seq) -> str | None:
    if seq.tool_calls:
        return None
    if seq.finish_reason == "length":
        return "max_output_tokens"
    if seq.finish_reason == "cache_threshold":
        return "cache_threshold"
    return None


def call_ids(tc: dict) -> tuple[str, str]:
    """A call's (item ``id``, ``call_id``): (``fc_<uid>``, ``call_<uid>``) for a
    ``chatcmpl-tool-<uid>`` call; a Kimi model's ``call_id`` is its chat id,
    ``functions.<name>:<i>``, as vLLM 0.34 passes it through."""
    uid = tc["uid"]
    return f"fc_{uid}", (f"call_{uid}" if tc["id"].startswith("chatcmpl-tool-") else tc["id"])


def _call_item(ctx: RenderCtx, tc: dict, status: str, arguments: str) -> dict:
    """A ``function_call`` output item; a namespaced tool's call carries its own ``name`` and
    its ``namespace`` (vLLM's ``resolve_responses_tool_call_name``)."""
    fc, call = call_ids(tc)
    name, ns = ctx.names.get(tc["name"], (tc["name"], None))
    return function_call_item(arguments=arguments, call_id=call, name=name, id=fc, namespace=ns, status=status)


def _text_part(text: str, logprobs=...) -> dict:
    return output_text(text, logprobs)


def _delta_logprobs(entries: list) -> list:
    """A delta event's logprobs: vLLM 0.34's ``_to_stream_logprobs`` (streaming_events.py l. 876):
    the openai SDK's ``response_text_delta_event.Logprob``, ``token``, ``logprob`` and
    ``top_logprobs`` of ``token`` and ``logprob``, no ``bytes``."""
    return [{"token": e["token"], "logprob": e["logprob"],
             "top_logprobs": [{"token": t["token"], "logprob": t["logprob"]} for t in e["top_logprobs"]]}
            for e in entries]


def _reasoning_item(ctx: RenderCtx, text: str | None, status: str | None = None) -> dict:
    """vLLM's reasoning output item: the reasoning as one ``reasoning_text`` part, no summary;
    ``content`` null and status ``in_progress`` as its stream opens it (streaming_events.py
    l. 973-978), status null in a body built whole (responses/utils.py l. 175-183)."""
    return reasoning_item(id=f"rs_{ctx.req.request_id}",
                          content=None if text is None else [{"text": text, "type": "reasoning_text"}],
                          status=status)


def _message_item(ctx: RenderCtx, status: str, content: list) -> dict:
    return output_message(id=f"msg_{ctx.req.request_id}", content=content, status=status)


def _logprobs(ctx: RenderCtx, seq) -> list:
    """The answer's logprobs as an ``output_text`` part holds them (the SDK's
    ``response_output_text.Logprob``: ``token``, ``bytes``, ``logprob``, ``top_logprobs``)."""
    top = ctx.top
    span = seq.reasoning_span
    texts = seq.logprob_pieces()       # each token's own text (a stop cuts only the answer's)
    pieces = texts if span is None else texts[span[2]:]
    return [output_text_logprob(lp.responses_entry(p, i, top)) for i, p in enumerate(pieces)]


def final_response(ctx: RenderCtx, sim, seq, output: list, status: str | None = None) -> dict:
    """The finished response (``responses_full_generator``, responses/serving.py l. 896-941): its
    usage, ``--enable-per-request-metrics``' ``metrics`` and the output's ``kv_transfer_params``
    (a remote decode's, as chat's)."""
    reason = _incomplete_reason(seq) if status is None else None
    out = base_response(ctx, status or ("incomplete" if reason else "completed"), output, _usage(seq, ctx.block),
                        per_request_metrics(sim, [seq]) if sim is not None else None,
                        dict(REMOTE_DECODE_PARAMS) if ctx.req.remote_decode else None)
    if reason:
        out["incomplete_details"] = {"reason": reason}     # (the simulator's cache_threshold too)
    return out


def render_response(ctx: RenderCtx, seq, sim=None, streamed: bool = False) -> dict:
    """The final ``response`` object: the non-streaming body (items as ``build_response_output_items``
    makes them), or a stream's last event (``streamed``: the items its ``output_item.done``
    events carried, serving.py l. 861-864, the reasoning item ``completed``)."""
    reason = _incomplete_reason(seq)
    if seq.tool_calls:
        output = [_call_item(ctx, tc, "completed", tc["arguments"]) for tc in seq.tool_calls]
    else:
        text = content_text(seq)
        part = (_text_part(text, _logprobs(ctx, seq)) if ctx.want_logprobs else _text_part(text))
        output = [_message_item(ctx, "incomplete" if reason else "completed", [part])]
    if seq.reasoning_span is not None:
        output.insert(0, _reasoning_item(ctx, reasoning_text(seq), "completed" if streamed else None))
    return final_response(ctx, sim, seq, output)


def stream_response(sim, ctx: RenderCtx, seq):
    """SSE body (see the module docstring).  Per token only the piece (and its logprob entry
    when asked) is serialised into a pre-rendered frame, by :func:`_token_events`."""
    ev = ctx.event
    r0 = base_response(ctx, "in_progress")
    events, answer_head, reasoning_done, rewind = _token_events(ctx, seq)
    head = ev("response.created", {"response": r0}) + ev("response.in_progress", {"response": r0})
    span = seq.reasoning_span
    if span is None:
        head += answer_head()
    else:
        ids = {"item_id": f"rs_{ctx.req.request_id}", "output_index": 0, "content_index": 0}
        # vLLM 0.34 opens the reasoning's part with response.content_part.added (streaming_events.py
        # emit_simple_reasoning_open l. 961-988)
        head += (ev("response.output_item.added", {"output_index": 0,
                                                   "item": _reasoning_item(ctx, None, "in_progress")}) +
                 ev("response.content_part.added", {**ids, "part": {"text": "", "type": "reasoning_text"}}))
    yield head
    pending = []
    streamed = Streamed(seq.index + 1)      # tokens sent, for an abort (end_aborted)
    calls = seq.tool_calls
    yield from rendered_tokens(sim, seq, events, pending, streamed)
    if end_aborted(ctx.req, [seq], streamed):
        rewind(seq.completion_tokens)       # (a token the hub rendered ahead of its send: unsent)
        yield b"".join(pending) + _aborted_end(sim, ctx, seq, calls, reasoning_done)
        return
    out = b"".join(pending) + reasoning_done()      # (reasoning to its end: the answer's item opens now)
    oi = 0 if span is None else 1
    if seq.tool_calls:
        tc = seq.tool_calls[0]
        item_id = call_ids(tc)[0]
        done = _call_item(ctx, tc, "completed", tc["arguments"])
        out += (ev("response.function_call_arguments.done",
                   {"item_id": item_id, "output_index": oi, "name": done["name"], "arguments": tc["arguments"]}) +
                ev("response.output_item.done", {"output_index": oi, "item": done}))
    else:
        ids = {"item_id": f"msg_{ctx.req.request_id}", "output_index": oi, "content_index": 0}
        text = content_text(seq)
        status = "incomplete" if _incomplete_reason(seq) else "completed"
        # vLLM 0.34's done part carries the logprobs streamed, or null (emit_simple_content_done
        # l. 915-923); the response object keeps the specification's part (no logprobs unless asked)
        done_part = _text_part(text, _logprobs(ctx, seq) if ctx.want_logprobs else None)
        out += (ev("response.output_text.done", {**ids, "text": text, "logprobs": []}) +
                ev("response.content_part.done", {**ids, "part": done_part}) +
                ev("response.output_item.done", {"output_index": oi,
                                                  "item": _message_item(ctx, status, [done_part])}))
    final = render_response(ctx, seq, sim, streamed=True)
    if ctx.store:
        sim.response_store.put_final(final)
    # OpenAI's contract: an answer cut short ends with response.incomplete, a full one with response.completed
    yield out + ev("response.incomplete" if final["status"] == "incomplete" else "response.completed",
                   {"response": final})


def _aborted_end(sim, ctx: RenderCtx, seq, calls, reasoning_done) -> bytes:
    """The end of a stream the server aborted (abort_requests, checkpoint prepare mode=abort),
    ``seq`` now holding the tokens it streamed (:func:`~.token_stream.end_aborted`).  vLLM 0.34
    (``responses/serving.py`` ``_process_simple_streaming_events``) reads the abort output (no
    new tokens) like any last one: ``processor.close_current(response_item_status("abort"))``
    closes the item it was streaming with status ``completed`` (``responses/utils.py``
    ``response_item_status``: only ``length`` is ``incomplete``), opens none; then
    ``responses_full_generator`` builds the final response from the items streamed, ``status``
    ``completed`` (its catch-all: a simple context maps only ``length`` to ``incomplete``;
    ``cancelled`` is the harmony context's), usage of the tokens streamed, and the terminal
    event is ``response.completed`` (``response.incomplete`` only for ``incomplete``).  So: the
    reasoning item closes (no answer item opens if no answer token went out), or the function
    call closes with the arguments streamed, or the message closes with the text streamed."""
    ev = ctx.event
    span = seq.reasoning_span
    output = []
    closed = reasoning_done(answer=False)
    if closed:                  # cut in its reasoning (or at its end marker): that item alone, closed
        out = closed
        output.append(_reasoning_item(ctx, reasoning_text(seq), "completed"))     # (as streamed)
    else:
        out = b""
        if span is not None:
            output.append(_reasoning_item(ctx, reasoning_text(seq), "completed"))
        oi = 0 if span is None else 1
        if calls:
            tc = calls[0]
            made = seq.completion_tokens
            args = "".join(seq.pieces[max(tc["start"], span[2] if span else 0):min(tc["end"], made)])
            item = _call_item(ctx, tc, "completed", args)
            if seq.flushed:         # the abort's final output: the arguments held back
                out += ev("response.function_call_arguments.delta",
                          {"delta": seq.flushed, "item_id": item["id"], "output_index": oi})
            out += (ev("response.function_call_arguments.done",
                       {"item_id": item["id"], "output_index": oi, "name": item["name"], "arguments": args}) +
                    ev("response.output_item.done", {"output_index": oi, "item": item}))
        else:
            ids = {"item_id": f"msg_{ctx.req.request_id}", "output_index": oi, "content_index": 0}
            text = content_text(seq)
            if seq.flushed:         # the abort's final output: the text held back (no new tokens)
                out += ev("response.output_text.delta", {**ids, "delta": seq.flushed, "logprobs": []})
            done_part = _text_part(text, _logprobs(ctx, seq) if ctx.want_logprobs else None)
            item = _message_item(ctx, "completed", [done_part])
            out += (ev("response.output_text.done", {**ids, "text": text, "logprobs": []}) +
                    ev("response.content_part.done", {**ids, "part": done_part}) +
                    ev("response.output_item.done", {"output_index": oi, "item": item}))
            item = _message_item(ctx, "completed", [_text_part(text, _logprobs(ctx, seq)) if ctx.want_logprobs
                                                    else _text_part(text)])
        output.append(item)
    final = final_response(ctx, sim, seq, output, "completed")
    if ctx.store:
        sim.response_store.put_final(final)
    return out + ev("response.completed", {"response": final})


def _token_events(ctx: RenderCtx, seq):
    """``(events, answer_head, reasoning_done, rewind)``.  ``events(k)``: token ``k``'s events (``k`` an
    index, or a stream interval's ``slice``), called once per token in order by
    :func:`rendered_tokens` or by the server's hub as a schedule's renderer, so the phase (reasoning
    or answer) is its own state: the answer's first token closes the reasoning item and opens the
    answer's (``reasoning_done()``, which is ``b""`` once that happened; the parser's markers send
    nothing); then a delta per token of the first call's arguments or of the text."""
    ev = ctx.event
    pieces = seq.pieces
    lp_pieces = seq.logprob_pieces()            # each token's own text, for its logprobs entry
    span = seq.reasoning_span
    r0, r1, c0 = span if span is not None else (0, 0, 0)
    oi = 0 if span is None else 1               # output_index of the answer's item
    calls = seq.tool_calls
    want = ctx.want_logprobs and not calls
    top = ctx.top
    if calls:
        tc = calls[0]
        lo, hi = max(tc["start"], c0), tc["end"]
        item_id = call_ids(tc)[0]
        # ResponseFunctionCallArgumentsDeltaEvent: delta, item_id, output_index, sequence_number, type
        head = b'event: response.function_call_arguments.delta\ndata: {"delta":'
        mid = b',"item_id":' + dumps(item_id) + b',"output_index":' + str(oi).encode() + b',"sequence_number":'
        tail = b',"type":"response.function_call_arguments.delta"}\n\n'

        def answer_head() -> bytes:
            return ev("response.output_item.added", {"output_index": oi, "item": _call_item(ctx, tc, "in_progress", "")})
    else:
        lo, hi = c0, len(pieces)
        msg_id = f"msg_{ctx.req.request_id}"
        # ResponseTextDeltaEvent: content_index, delta, item_id, logprobs, output_index,
        # sequence_number, type
        head = b'event: response.output_text.delta\ndata: {"content_index":0,"delta":'
        mid = b',"item_id":' + dumps(msg_id) + b',"logprobs":'
        seq_at = b',"output_index":' + str(oi).encode() + b',"sequence_number":'
        tail = b',"type":"response.output_text.delta"}\n\n'

        def answer_head() -> bytes:
            ids = {"item_id": msg_id, "output_index": oi, "content_index": 0}
            # vLLM's part opens with logprobs [] (emit_simple_content_open l. 866-871)
            return (ev("response.output_item.added", {"output_index": oi,
                                                       "item": _message_item(ctx, "in_progress", [])}) +
                    ev("response.content_part.added", {**ids, "part": _text_part("", [])}))
    reasoning_open = span is not None
    rid = f"rs_{ctx.req.request_id}"
    # ResponseReasoningTextDeltaEvent: content_index, delta, item_id, output_index, sequence_number, type
    r_head = b'event: response.reasoning_text.delta\ndata: {"content_index":0,"delta":'
    r_mid = b',"item_id":' + dumps(rid) + b',"output_index":0,"sequence_number":'
    r_tail = b',"type":"response.reasoning_text.delta"}\n\n'

    def reasoning_done(answer: bool = True) -> bytes:
        """The reasoning item's end, then the answer's item opening (not for ``answer=False``:
        a stream the server aborted in its reasoning); ``b""`` once the reasoning has ended."""
        nonlocal reasoning_open
        if not reasoning_open:
            return b""
        reasoning_open = False
        text = reasoning_text(seq)
        ids = {"item_id": rid, "output_index": 0, "content_index": 0}
        return (ev("response.reasoning_text.done", {**ids, "text": text}) +
                ev("response.content_part.done", {**ids, "part": {"text": text, "type": "reasoning_text"}}) +
                ev("response.output_item.done", {"output_index": 0, "item": _reasoning_item(ctx, text, "completed")}) +
                (answer_head() if answer else b""))

    last = [-1, 0, False]       # the last render: its first token, ctx.n and the reasoning state before it

    def events(k) -> bytes:
        last[0] = k.start if k.__class__ is slice else k
        last[1] = ctx.n
        last[2] = reasoning_open
        out = b""
        if reasoning_open:
            a, b = within(k, r0, r1)
            if a < b:
                out = r_head + dumps("".join(pieces[a:b])) + r_mid + str(ctx.n).encode() + r_tail
                ctx.n += 1
            if token_span(k)[1] <= c0:
                return out              # reasoning, or a marker: nothing more
            out += reasoning_done()
        a, b = within(k, lo, hi)
        if a >= b:
            return out
        text = "".join(pieces[a:b])
        if not text:
            # vLLM sends no event for an output without text (resolve_target_state: empty
            # content is NONE; emit_delta: no arguments, no event), its logprobs with it: a stop
            # token's, or the text a stop string's holdback kept (Sequence.hold_back)
            return out
        n = str(ctx.n).encode()
        ctx.n += 1
        if calls:
            return out + head + dumps(text) + mid + n + tail
        lps = (dumps(_delta_logprobs([lp.responses_entry(lp_pieces[j], j - c0, top) for j in range(a, b)])) if want
               else b"[]")
        return out + head + dumps(text) + mid + lps + seq_at + n + tail

    def rewind(sent: int) -> None:
        """A stream the server aborted after ``sent`` tokens went out: undo the last render if it
        was of the first token not sent (the hub renders a token's events ahead of its send:
        step mode's next token, the last token in an idle turn), its sequence numbers and its
        closing of the reasoning, so that the ending follows what the client got."""
        nonlocal reasoning_open
        if last[0] == sent:
            ctx.n, reasoning_open = last[1], last[2]

    return events, answer_head, reasoning_done, rewind
