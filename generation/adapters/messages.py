"""The Anthropic Messages API (``POST /v1/messages``, ``/v1/messages/count_tokens``), translated
onto the engine's request the way vLLM's ``_convert_anthropic_to_openai_request`` does.

Translation (:func:`to_chat_messages` and friends): ``system`` -> a leading system message;
image blocks -> ``image_url`` parts; ``tool_use`` blocks -> assistant ``tool_calls``;
``tool_result`` blocks -> ``tool`` messages placed before the rest of their message;
``input_schema`` tools -> chat function tools; ``tool_choice`` auto/any/tool/none ->
auto/required/named/none; ``stop_sequences`` -> the engine's stop strings (the matched one is
the sequence's ``stop_reason``).  Tokenization, queueing, timing, metrics and P/D are the
engine's, as for chat.  The answer is rendered in Anthropic's shapes: a ``message`` object, or
the named SSE events ``message_start``, ``content_block_start``, ``content_block_delta``
(``text_delta`` / ``input_json_delta``), ``content_block_stop``, ``message_delta``,
``message_stop`` (no ``[DONE]``, and no ``ping``: vLLM 0.34's converter sends none), each laid
out as vLLM dumps its ``AnthropicStreamEvent`` (``exclude_unset``, the model's field order:
``type``, ``message``, ``delta``, ``content_block``, ``index``, ``usage``;
``anthropic/protocol.py``).  Errors use Anthropic's envelope.
"""
from __future__ import annotations

import dataclasses
import json

from generation.engine.request import GenerationRequest
from generation.engine.stream_interval import token_span, within
from generation.lanes import paced
from ..errors import FieldNames, InvalidParam, Rejected
from .base import (REMOTE_DECODE_PARAMS, remote_decode_params, Adapter, chat_prompt, check_kv_transfer, check_limits, check_tools, created_cache_tokens, dumps, usage_details)
from .token_stream import Streamed, end_aborted, rendered_tokens
from .extra_args import check_extra_args
from .fields import check_min_tokens, check_sampling_ranges
from .protocol import AnthropicTool, AnthropicToolChoice, CountTokensRequest, MessagesRequest
from .sampling import anthropic_constraint, anthropic_kwargs, anthropic_reasoning, tool_parser_type
from generation.structured.tool_calls import chat_history_tool_calls, numbers_tool_calls
from generation.content.reasoning import content_text, reasoning_text, signature

# finish_reason -> stop_reason (api.md 5.4.2; cache_threshold reads as a cut-short answer).
_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "cache_threshold": "max_tokens",
                 "tool_calls": "tool_use", "remote_decode": "end_turn"}


# the checkers' chat-completions field names, as an Anthropic request spells them
MESSAGES_FIELDS = FieldNames((r"tools\[(\d+)\]\.function\.parameters", r"tools[\1].input_schema"),
                             (r"tools\[(\d+)\]\.function", r"tools[\1]"),
                             (r"response_format\.json_schema", "output_config.format"))


class MessagesAdapter(Adapter):
    envelope = "anthropic"
    render_type = "chat"      # vLLM renders the request's chat completion (OnlineRenderer.render_chat)
    image_output = True       # the reference: the image latency only, no image in the output
    body: MessagesRequest
    external_id_format = "chatcmpl-{rid}"     # vLLM serves it as a chat completion

    def build(self, rid: str, force_cache_threshold: bool) -> GenerationRequest:
        sim, b = self.sim, self.body
        model, lora = sim.resolve_model(b.model)
        declared = resolved_tools(b)
        tools = to_chat_tools(declared)
        tool_choice = to_chat_tool_choice(b.tool_choice)
        with MESSAGES_FIELDS:
            check_tools(sim, tools, tool_choice, None)
            kwargs = anthropic_kwargs(sim, b)
            reasoning = anthropic_reasoning(sim, b.thinking, b.output_config, b.chat_template_kwargs, kwargs)
            constraint = anthropic_constraint(sim, b.output_config)
        # vLLM's chat request (to_sampling_params) checks these for SamplingParams.extra_args
        check_extra_args(b.vllm_xargs, b.kv_transfer_params, b.ec_transfer_params)
        ignore_eos = bool(b.ignore_eos)
        check_limits(b.max_tokens, ignore_eos)
        check_min_tokens(b.min_tokens, b.max_tokens)
        check_sampling_ranges(b)
        stream = bool(b.stream)
        check_kv_transfer(b.kv_transfer_params, stream)
        if b.stop_sequences and not all(b.stop_sequences):
            # vLLM passes stop_sequences to chat's stop as they are: SamplingParams refuses "" there
            raise Rejected("stop cannot contain an empty string.")
        tc = b.tool_choice
        messages = to_chat_messages(b, merge_inline_system(sim))
        prompt = chat_prompt(sim, messages, tools=tools, chat_template_kwargs=kwargs)
        self.req = GenerationRequest(
            request_id=rid, model=model, lora=lora, prompts=[prompt], n=1,
            max_tokens=b.max_tokens, min_tokens=b.min_tokens or 0, ignore_eos=ignore_eos, stream=stream,
            tools=callable_tools(b, tools, declared), tool_choice=tool_choice,
            stop=list(b.stop_sequences) if b.stop_sequences else None, kv_transfer_params=b.kv_transfer_params,
            force_cache_threshold=force_cache_threshold,
            max_tool_calls=1 if tc is not None and tc.disable_parallel_tool_use else None,
            response_format=constraint, temperature=b.temperature, reasoning=reasoning,
            tool_parser=tool_parser_type(sim, "chat_completions", tools, tool_choice, stream),
            # vLLM converts the request to chat and counts the history there
            tool_call_index=chat_history_tool_calls(messages) if tools and numbers_tool_calls(sim.config) else None)
        return self.req

    def render(self, seqs) -> dict:
        seq = seqs[0]
        return render_message(self.req, seq, seq.stop_reason, cache_block(self.sim))

    def stream(self, seqs):
        seq = seqs[0]
        return stream_message(self.sim, self.req, seq, seq.stop_reason)

    def stream_error(self, body: dict) -> bytes:
        return _frame("error", body)


def count_tokens(sim, body: CountTokensRequest) -> int:
    """The prompt tokens /v1/messages would report for ``body`` (tools count only through a
    real chat template; the simulated flattening ignores them).  Raises ModelNotFound."""
    sim.resolve_model(body.model)
    ids, _ = sim.tokenize_messages(to_chat_messages(body, merge_inline_system(sim)),
                                   tools=to_chat_tools(resolved_tools(body)),
                                   chat_template_kwargs=anthropic_kwargs(sim, body))
    return len(ids)


# ---- request translation ----------------------------------------------------------------------

def _image_block(block: dict) -> dict:
    src = block["source"]
    if src.get("type") == "base64":
        url = f"data:{src.get('media_type')};base64,{src.get('data')}"
    else:
        url = src.get("url")
    return {"type": "image_url", "image_url": {"url": url}}


# Claude Code's per-request attribution block: vLLM drops it (its hash would defeat prefix caching).
BILLING_HEADER = "x-anthropic-billing-header"


def _system_texts(content) -> list:
    """The text of a ``system`` value or an inline system message, without the billing header."""
    if isinstance(content, str):
        return [content] if content and not content.startswith(BILLING_HEADER) else []
    return [b["text"] for b in content or () if b.get("type") == "text" and b.get("text")
            and not b["text"].startswith(BILLING_HEADER)]


def system_prompt(body: CountTokensRequest, merge: bool = True) -> str:
    """vLLM's ``_convert_system_message``: the top-level ``system`` text, then (``merge``: the
    chat template wants one leading system message, :func:`merge_inline_system`) the text of
    every ``role: "system"`` message inside ``messages``, joined with nothing in between ("" if
    none)."""
    parts = _system_texts(body.system)
    if merge:
        for m in body.messages:
            if m.role == "system":
                parts.extend(_system_texts(m.content))
    return "".join(parts)


_PROBE = [{"role": "system", "content": "t"}, {"role": "user", "content": "t"},
          {"role": "system", "content": "t"}, {"role": "user", "content": "t"}]


def merge_inline_system(sim) -> bool:
    """vLLM 0.34's ``_should_merge_inline_system`` (anthropic/serving.py): inline system messages
    are merged into the leading system prompt when the chat template cannot render a system
    message after a user one (``_detect_merge_inline_system``: the template rendered on system,
    user, system, user raises - Qwen's ``loop.first`` guard), or when there is no template to
    ask (the simulated tokenizer without ``--chat-template``).  Otherwise they stay in place.
    The probe renders through the tokenizer's own bounded path (``chat_text``); decided once per
    simulator."""
    cached = getattr(sim, "_merge_inline_system", None)
    if cached is not None:
        return cached
    tok = sim.tokenizer
    merge = True
    if getattr(tok, "chat_template", None) or getattr(getattr(tok, "_tok", None), "chat_template", None):
        try:
            tok.chat_text(_PROBE, add_generation_prompt=False)
            merge = False
        except Exception:       # noqa: BLE001 - vLLM: any failure means system-first ordering
            pass
    sim._merge_inline_system = merge
    return merge


def to_chat_messages(body: CountTokensRequest, merge: bool = True) -> list:
    """Validated Anthropic ``system`` + ``messages`` -> chat messages, as vLLM 0.34's
    ``_convert_messages`` builds them (anthropic/serving.py).

    The system text (top-level, and with ``merge`` (:func:`merge_inline_system`) the inline
    ``system`` messages, see :func:`system_prompt`) leads as one system message; without
    ``merge`` each inline one is a system message in its place.  A string content is kept as it is (``""``
    too).  In blocks: non-empty ``text`` and ``image`` become content parts (one text part is
    the content string); ``tool_use`` becomes a call (``json.dumps`` of its input: the client's
    key order, default separators); a user's ``tool_result`` becomes a ``tool`` message
    (``tool_call_id`` = ``tool_use_id``) placed before the rest of its message, its content the
    text items joined by newlines (``""`` if none), and its images a user message of
    ``image_url`` parts right after it; an assistant's ``tool_result`` is the text part ``Tool
    result: <content>``; ``thinking`` blocks are the message's ``reasoning``, joined (chat
    templates read it as ``reasoning_content``).  A user message left with no content is dropped
    (its tool messages stay); an assistant one is kept (vLLM appends it, ``content`` None here)."""
    out = []
    system = system_prompt(body, merge)
    if system:
        out.append({"role": "system", "content": system})
    for m in body.messages:
        role, content = m.role, m.content
        if role == "system":
            if not merge:               # in place, as vLLM keeps it for a template that takes it
                text = "".join(_system_texts(content))
                if text:
                    out.append({"role": "system", "content": text})
            continue
        if isinstance(content, str):
            out.append({"role": role, "content": content})
            continue
        parts, calls, reasoning = [], [], []
        for b in content:
            t = b["type"]
            if t == "thinking":
                if b.get("thinking") is not None:
                    reasoning.append(b["thinking"])
            elif t == "tool_result":
                if role == "user":
                    out.extend(_tool_result_messages(b))
                else:
                    rc = b.get("content")
                    parts.append({"type": "text", "text": f"Tool result: {str(rc) if rc else ''}"})
            elif t == "tool_use":
                calls.append({"id": b["id"], "type": "function",
                              "function": {"name": b["name"], "arguments": json.dumps(b.get("input") or {})}})
            elif t == "text":
                if b["text"]:
                    parts.append({"type": "text", "text": b["text"]})
            elif t == "image":
                parts.append(_image_block(b))
        if not parts and role == "user":
            continue                    # no content: vLLM drops a user message (its tool messages stay)
        msg = {"role": role, "content": parts or None}
        if len(parts) == 1 and parts[0]["type"] == "text":
            msg["content"] = parts[0]["text"]
        if reasoning:
            msg["reasoning"] = "".join(reasoning)
        if calls:
            msg["tool_calls"] = calls
        out.append(msg)
    return out


def _tool_result_messages(block: dict) -> list:
    """A user's ``tool_result`` block as vLLM 0.34's ``_convert_user_tool_result``: the ``tool``
    message (its text items joined by newlines), then a user message with its images, if any."""
    rc = block.get("content")
    images = []
    if isinstance(rc, list):
        texts = []
        for item in rc:
            if not isinstance(item, dict):
                continue
            if item.get("type") == "text":
                texts.append(item.get("text", ""))
            elif item.get("type") == "image":
                images.append(_image_block(item))
        rc = "\n".join(texts)
    out = [{"role": "tool", "tool_call_id": block["tool_use_id"], "content": rc or ""}]
    if images:
        out.append({"role": "user", "content": images})
    return out


def resolved_tools(body) -> list | None:
    """vLLM 0.34's ``_resolve_tools``: ``tools`` as the ``tool_addition`` / ``tool_removal``
    blocks of the conversation's system messages leave them at its end, in order: an addition by
    reference un-defers a declared tool (``defer_loading`` None), one by definition declares (or
    replaces) it, a removal drops it, and a later addition brings it back.  A reference to a
    tool ``tools`` does not declare is vLLM's 400 (a ValueError there).  ``body.tools`` itself
    when the conversation changes nothing."""
    changes = [block for m in body.messages if not isinstance(m.content, str) for block in m.content
               if block.get("type") in ("tool_addition", "tool_removal")]
    if not changes:
        return getattr(body, "tools", None)
    tools = {t.name: t for t in body.tools or ()}
    removed = set()
    for block in changes:
        kind, change = block["type"], block["tool"]
        if change["type"] == "tool_definition":
            d = change["definition"]
            name = d["name"]
            tools[name] = AnthropicTool(type=d.get("type"), name=name, description=d.get("description"),
                                        input_schema=d["input_schema"], cache_control=d.get("cache_control"),
                                        strict=d.get("strict"), defer_loading=d.get("defer_loading"))
        else:
            name = change["name"]
            if name not in tools:
                raise InvalidParam(f"{kind} references tool {name!r}, which is not declared in tools")
            if kind == "tool_addition":
                tools[name] = dataclasses.replace(tools[name], defer_loading=None)
        if kind == "tool_removal":
            removed.add(name)
        else:
            removed.discard(name)
    return [t for name, t in tools.items() if name not in removed]


def to_chat_tools(tools) -> list | None:
    """Anthropic ``{name, description, input_schema}`` -> chat function tools (None if empty); an
    ``input_schema`` without ``type`` gets ``"type": "object"`` (last), as vLLM 0.34 reads it."""
    if not tools:
        return None
    out = []
    for t in paced(tools):
        schema = t.input_schema
        if "type" not in schema:        # vLLM 0.34's AnthropicTool.validate_input_schema adds it
            schema = {**schema, "type": "object"}
        fn = {"name": t.name, "parameters": schema}
        if t.description is not None:
            fn["description"] = t.description
        out.append({"type": "function", "function": fn})
    return out


def callable_tools(body, tools: list | None, declared: list | None = None) -> list | None:
    """The chat tools the simulated model may call: all of ``tools`` but those sent with
    ``defer_loading: true`` that no ``tool_reference`` block of the conversation (a tool
    search's answer) and no named ``tool_choice`` has loaded, as Anthropic's tool search
    hides a deferred tool until it is found (Claude Code answers a call of its
    ``DeferredToolPlaceholder`` with ``No such tool available``).  The prompt still carries
    every tool, as vLLM's chat template gets them all.  None when none is callable."""
    if not tools:
        return tools
    deferred = {t.name for t in (body.tools if declared is None else declared) if t.defer_loading}
    if not deferred:
        return tools
    loaded = set()
    if body.tool_choice is not None and body.tool_choice.type == "tool":
        loaded.add(body.tool_choice.name)
    for msg in body.messages or ():
        for block in msg.content if isinstance(msg.content, list) else ():
            if not isinstance(block, dict):
                continue
            inner = block.get("content") if block.get("type") == "tool_result" else [block]
            for ref in inner if isinstance(inner, list) else ():
                if isinstance(ref, dict) and ref.get("type") == "tool_reference":
                    loaded.add(ref.get("tool_name", ref.get("name")))
    hidden = deferred - loaded
    out = [t for t in tools if t["function"]["name"] not in hidden]
    return out or None


def to_chat_tool_choice(choice: AnthropicToolChoice | None):
    """Anthropic tool_choice -> chat: auto -> "auto", any -> "required", none -> "none",
    ``{"type":"tool","name":X}`` -> ``{"type":"function","function":{"name":X}}``."""
    if choice is None or choice.type is None:
        return None
    if choice.type == "tool":
        return {"type": "function", "function": {"name": choice.name}}
    return {"auto": "auto", "any": "required", "none": "none"}[choice.type]


# ---- rendering ------------------------------------------------------------------------------------

def tool_use_id(tc: dict) -> str:
    """A call's ``tool_use`` id: ``toolu_<uid>`` (Anthropic's id style) for a
    ``chatcmpl-tool-<uid>`` call; a Kimi model's ``functions.<name>:<i>`` as it is (vLLM 0.34
    passes the chat call's id through)."""
    return "toolu_" + tc["uid"] if tc["id"].startswith("chatcmpl-tool-") else tc["id"]


def cache_block(sim) -> int | None:
    """What :func:`_usage` needs to know of the cache: None without cache information (no
    ``--enable-prompt-tokens-details`` nor ``--enable-kvcache``, as :func:`usage_details`), else
    the block size of the prefix cache that stores prompts (:func:`prefix_block`), 0 when there
    is none."""
    pd = usage_details(sim)
    return None if pd is None else pd.block


def _usage(seq, output_tokens: int, block: int | None) -> dict:
    """Anthropic usage as vLLM 0.34's ``anthropic/serving.py`` ``_to_anthropic_usage``: the
    prefix-cache hits are ``cache_read_input_tokens``, the prompt tokens this request wrote to
    the cache ``cache_creation_input_tokens`` (:func:`created_cache_tokens`), and
    ``input_tokens`` the rest (Anthropic's accounting: the three add up to the prompt).  Without
    cache information (``block`` None, :func:`cache_block`) both cache counters are left out,
    as vLLM 0.34 leaves them unset."""
    if block is None:
        return {"input_tokens": seq.prompt_len, "output_tokens": output_tokens}
    cached = seq.cached_tokens
    created = created_cache_tokens(seq, block)
    # AnthropicUsage's field order (anthropic/protocol.py): input, output, then the cache counters
    return {"input_tokens": max(0, seq.prompt_len - cached - created), "output_tokens": output_tokens,
            "cache_creation_input_tokens": created, "cache_read_input_tokens": cached}


def _stop_reason(seq, stop_sequence, tool_used: bool, tool_complete: bool) -> tuple[str | None, str | None]:
    """``(stop_reason, stop_sequence)`` as vLLM 0.34's ``_to_anthropic_stop_reason``: an aborted
    answer (``finish_reason`` ``abort``: abort_requests, checkpoint prepare mode=abort) has
    neither; ``max_tokens`` always wins; then ``tool_use`` (no stop sequence) when the calls are
    complete; a matched stop string (``stop_sequence``) wins over calls it cut short, as such a
    call must not run; then ``tool_use`` for any call, else the finish reason's.  Not streamed,
    the calls are complete when there are any (their arguments were json-decoded); streamed,
    when the last call's arguments as sent are JSON (``tool_complete``)."""
    reason = seq.finish_reason
    if reason == "abort":
        return None, None
    if reason in ("length", "cache_threshold"):
        return "max_tokens", None
    if tool_complete:
        return "tool_use", None
    if stop_sequence is not None:
        return "stop_sequence", stop_sequence
    if reason == "tool_calls" or tool_used:
        return "tool_use", None
    return _STOP_REASONS.get(reason, "end_turn"), None


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _thinking_block(req, seq) -> dict | None:
    """The ``thinking`` block of an answer with a reasoning span (vLLM with
    ``--reasoning-parser``): its text and an opaque ``signature``."""
    text = reasoning_text(seq)
    if not text:        # vLLM 0.34's messages_full_converter: ``if choice.message.reasoning:``
        return None
    return {"type": "thinking", "thinking": text, "signature": signature(req.request_id, text)}


def render_message(req, seq, stop_sequence, cache_info: int | None) -> dict:
    """Non-streaming ``message`` object: a ``thinking`` block first when the answer reasons;
    ``cache_info``: :func:`cache_block`, for the usage's cache counters (:func:`_usage`)."""
    thinking = _thinking_block(req, seq)
    if seq.tool_calls:
        try:
            content = [{"type": "tool_use", "id": tool_use_id(tc), "name": tc["name"],
                        "input": json.loads(tc["arguments"] or "{}")} for tc in seq.tool_calls]
        except json.JSONDecodeError as e:
            # a named call's arguments cut by a stop string: vLLM's messages_full_converter
            # json.loads them, and create_messages answers its ValueError as a 400 (its words)
            raise InvalidParam(str(e)) from None
    else:
        text = content_text(seq)
        content = [{"type": "text", "text": text}] if text else []
    if thinking is not None:
        content.insert(0, thinking)
    if not content:
        # vLLM 0.34's messages_full_converter: an empty answer is one empty text block, not []
        # (anthropic/serving.py l. 986-990: strict clients read content[0])
        content = [{"type": "text", "text": ""}]
    # AnthropicMessagesResponse's field order (anthropic/protocol.py l. 441-453): content before model
    used = bool(seq.tool_calls)
    reason, stop_sequence = _stop_reason(seq, stop_sequence, used, used)
    body = {"id": f"msg_{req.request_id}", "type": "message", "role": "assistant", "content": content,
            "model": req.model, "stop_reason": reason, "stop_sequence": stop_sequence,
            "usage": _usage(seq, seq.completion_tokens, cache_info)}
    # vLLM 0.34 answers model_dump(exclude_none=True) (anthropic/api_router.py l. 83): a null
    # stop_sequence (no stop string matched) or stop_reason (an aborted answer) is left out
    if stop_sequence is None:
        del body["stop_sequence"]
    if body["stop_reason"] is None:
        del body["stop_reason"]
    if req.remote_decode:
        # a P/D prefill's transfer parameters, as messages_full_converter copies the chat answer's
        # (anthropic/serving.py l. 941-950; kept by exclude_none where set)
        body["kv_transfer_params"] = remote_decode_params([seq])
    return body


def _frame(name: str, obj) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + dumps(obj) + b"\n\n"


def _delta(index: int, delta: dict) -> bytes:
    return _frame("content_block_delta", {"type": "content_block_delta", "delta": delta, "index": index})


def _block_start(index: int, block: dict) -> bytes:
    return _frame("content_block_start", {"type": "content_block_start", "content_block": block, "index": index})


def stream_message(sim, req, seq, stop_sequence):
    """SSE body in Anthropic's event order.  ``message_start`` goes out at once (Anthropic sends
    it before the first token).  An answer with a reasoning span opens with a ``thinking`` block
    (index 0): ``thinking_delta`` per reasoning token, then one ``signature_delta`` before its
    ``content_block_stop``; the parser's markers send nothing.  Text (``text_delta``) or
    ``tool_use`` blocks (``input_json_delta``) follow.  ``message_delta`` carries the whole
    usage, input tokens included (as vLLM and Anthropic send it; LangChain's ChatAnthropic reads
    usage only there; the cache counters as :func:`_usage`)."""
    cache_info = cache_block(sim)
    # AnthropicMessagesResponse's field order (anthropic/protocol.py): content before model
    start = {"id": f"msg_{req.request_id}", "type": "message", "role": "assistant", "content": [],
             "model": req.model, "stop_reason": None, "stop_sequence": None, "usage": _usage(seq, 0, cache_info)}
    yield _frame("message_start", {"type": "message_start", "message": start})
    calls = seq.tool_calls
    span = seq.reasoning_span
    c0 = span[2] if span is not None else 0
    # vLLM's converter opens a thinking block on the first non-empty reasoning delta: an answer
    # whose reasoning is empty (its first token ends it) has none, as the body has none
    thinking = span is not None and any(seq.pieces[span[0]:span[1]])
    base = 1 if thinking else 0                  # index of the first text / tool_use block
    # vLLM's converter skips an empty text delta (anthropic/serving.py l. 1196-1199): the tokens a
    # stop string or stop token leaves without text open no block and send nothing
    text_block = not calls and any(seq.pieces[c0:])
    if thinking:
        # vLLM 0.34 sets the thinking block's type and (empty) thinking alone; the anthropic SDK's
        # ThinkingBlock requires a signature (strict clients validate each event), so it stays
        yield _block_start(0, {"type": "thinking", "thinking": "", "signature": ""})
    elif text_block:
        yield _block_start(0, {"type": "text", "text": ""})
    opened = 0          # number of tool_use blocks started so far
    thinking_open = thinking
    text_head = b'event: content_block_delta\ndata: {"type":"content_block_delta","delta":{"type":"text_delta","text":'
    text_end = b'},"index":' + str(base).encode() + b'}\n\n'


    def close_thinking() -> bytes:
        text = reasoning_text(seq)
        out = (_delta(0, {"type": "signature_delta", "signature": signature(req.request_id, text)}) +
               _frame("content_block_stop", {"type": "content_block_stop", "index": 0}))
        if text_block:
            out += _block_start(base, {"type": "text", "text": ""})
        return out

    def open_call(c: int):
        out = b""
        if c > 0:
            out += _frame("content_block_stop", {"type": "content_block_stop", "index": base + c - 1})
        tc = calls[c]
        return out + _block_start(base + c, {"type": "tool_use", "id": tool_use_id(tc), "name": tc["name"],
                                             "input": {}})

    call_of = seq.tool_call_of_piece() if calls else None
    pieces = seq.pieces

    def events(k) -> bytes:
        # one token, or a stream interval's group (a slice): vLLM converts its chat chunk, whose
        # delta holds the group's reasoning, text and tool-call fragments, into one delta event
        # per block it touches (anthropic/serving.py message_stream_converter); b"" for a marker.
        # Called once per token, in order (the blocks it opens and closes are its state): by
        # rendered_tokens, or as a token schedule's renderer by the server's hub
        nonlocal thinking_open, opened
        a, b = token_span(k)
        out = b""
        if a < c0:
            ra, rb = within(k, span[0], span[1])
            text = "".join(pieces[ra:rb]) if ra < rb else ""
            if text:                            # vLLM's converter skips an empty reasoning delta
                out = _delta(0, {"type": "thinking_delta", "thinking": text})
            if b <= c0:
                return out                      # a marker: no event
            a = c0
        if thinking_open:
            thinking_open = False
            out += close_thinking()
        if calls:
            while a < b:
                c = call_of[a]
                run = a + 1
                while run < b and call_of[run] == c:
                    run += 1
                while opened <= c:
                    out += open_call(opened)
                    opened += 1
                part = "".join(pieces[a:run])
                if part:        # vLLM sends arguments only when there are some (a stop cut them)
                    out += _delta(base + c, {"type": "input_json_delta", "partial_json": part})
                a = run
            return out
        text = "".join(pieces[a:b])
        return out + text_head + dumps(text) + text_end if text else out

    pending = []
    streamed = Streamed(seq.index + 1)      # tokens sent, for an abort (end_aborted)
    yield from rendered_tokens(sim, seq, events, pending, streamed)
    if end_aborted(req, [seq], streamed):
        # The blocks as the client saw them, from the tokens sent: in step mode the hub renders
        # a stream's next token while the engine steps (server/sse_emitter.py _render_ahead), and
        # that render opened the next block (closed the thinking one, started a tool_use) in
        # this state though its events were never sent.
        n = seq.completion_tokens
        thinking_open = thinking and n <= c0
        if calls:
            opened = call_of[n - 1] + 1 if n > c0 else 0
        if thinking_open:           # cut in its reasoning: no text block follows
            text_block = False
        if calls:
            calls = calls[:opened]  # the blocks it opened: the last one is closed below
    out = b"".join(pending) + (close_thinking() if thinking_open else b"")
    if text_block and seq.flushed:              # an abort's final output: the text held back
        out += text_head + dumps(seq.flushed) + text_end
    if calls:
        while opened < len(calls):          # calls without argument tokens
            out += open_call(opened)
            opened += 1
        out += _frame("content_block_stop", {"type": "content_block_stop", "index": base + len(calls) - 1})
    elif text_block:
        out += _frame("content_block_stop", {"type": "content_block_stop", "index": base})
    # vLLM's stream converter: a call is complete when the last one's arguments sent are JSON
    sent = "".join(pieces[k] for k in range(c0, min(seq.completion_tokens, len(pieces)))
                   if call_of[k] == len(calls) - 1) if calls else ""
    reason, stop_sequence = _stop_reason(seq, stop_sequence, bool(calls), bool(calls) and _is_json(sent))
    out += _frame("message_delta", {"type": "message_delta",
                                    "delta": {"stop_reason": reason, "stop_sequence": stop_sequence},
                                    "usage": _usage(seq, seq.completion_tokens, cache_info)})
    yield out + _frame("message_stop", {"type": "message_stop"})
