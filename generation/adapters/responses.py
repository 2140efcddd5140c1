"""The OpenAI Responses API (``POST /v1/responses``, seeds' subset), translated onto the engine's
request directly from its own typed request.

Input items become chat messages (``message`` -> its role and content; ``function_call`` ->
an assistant message with one tool call; ``function_call_output`` -> a ``tool`` message;
``reasoning`` -> the ``reasoning`` of an assistant message, which the next call or answer in
the history joins, as vLLM's ``construct_chat_messages_with_tool_call`` does; custom tool
calls and outputs like function ones; hosted tools' items add nothing).  Function tools become
chat tools, those of a ``namespace`` tool named ``<namespace>__<name>`` (vLLM's flat name; their
calls come back as ``name`` + ``namespace``); other tool types are accepted and given to
nobody.  ``text.format`` becomes ``response_format``; tokenization, queueing, timing, metrics
and P/D are the engine's, exactly as for chat.  ``instructions`` are echoed, and are the
prompt's system message as vLLM's ``construct_input_messages`` makes them (counted in
``input_tokens``; the older reference simulator left them out).

Tool policy (seeds): with function tools and a tool_choice other than ``none`` (or a hosted
tool's), and no ``function_call_output`` anywhere in ``input``, the answer is exactly one
``function_call``
(``auto``/omitted/``allowed_tools``/``custom`` act as ``required``; a named function is
honoured); once a ``function_call_output`` is present the answer is a normal message.

Rendering: a ``response`` object (``status`` ``completed``, or ``incomplete`` with
``incomplete_details.reason`` ``max_output_tokens`` when the length cap ended the text), or
named SSE events ``event: <type>`` / ``data: {"type": <type>, "sequence_number": n, ...}``
with ``n`` rising from 0: response.created, response.in_progress, response.output_item.added,
then response.content_part.added, response.output_text.delta..., response.output_text.done,
response.content_part.done (text) or response.function_call_arguments.delta...,
response.function_call_arguments.done (tool call), then response.output_item.done and
response.completed carrying the full response (``response.incomplete`` when the answer was
cut short, as OpenAI ends such a stream).  Errors use the OpenAI envelope.

``"background": true`` (vLLM's, with its response store on): a non-streaming request is
answered at once with the ``queued`` object (no output, no usage), runs on after the answer, and
its stored object becomes the final one (:mod:`generation.adapters.response_store`); a streaming
one streams as any other, its objects saying ``"background": true``, but runs apart from the
connection: stored ``queued`` from its start, it goes on if the client leaves, and a cancel
stops it.
"""
from __future__ import annotations

from ..errors import APIError, FieldNames, InvalidParam, Rejected
from generation.engine.request import GenerationRequest
from generation.lanes import paced
from .base import (Adapter, chat_prompt, check_kv_transfer, check_limits, check_logprobs_cap, check_tools,
                   prefix_block)
from .protocol import LOGPROBS_INCLUDE, TEXT_PARTS, ResponsesRequest
from .response_store import NO_STORE_FOR_BACKGROUND, previous_messages
from .extra_args import check_extra_args
from .fields import (check_cache_salt, check_logit_bias, check_mm_kwargs, check_sampling_ranges, check_seed, check_stop,
                     check_stop_token_ids, scheduling_priority, vocab_size)
from .chat import chat_ec_transfer_params
from .response_bodies import responses_tool
from .responses_render import RenderCtx, base_response, render_response, stream_response
from .sampling import responses_effort, responses_reasoning, template_kwargs, tool_parser_type
from generation.tokenization.chat_template import effort_kwargs
from generation.structured.tool_calls import numbers_tool_calls, responses_history_tool_calls


# the checkers' chat-completions field names, as a Responses request spells them
RESPONSES_FIELDS = FieldNames((r"response_format\.json_schema", "text.format"),
                              (r"tools\[(\d+)\]\.function", r"tools[\1]"))


class ResponsesAdapter(Adapter):
    body: ResponsesRequest
    request_id_header = False     # vLLM's ResponsesRequest.request_id: the body's, else resp_<uuid>

    def external_ids(self, req) -> tuple:
        """vLLM's first engine request of a response, ``<response id>_0``
        (``_generate_with_builtin_tools``'s ``sub_request_id``)."""
        return (f"{self.ctx.response_id}_0",)

    def build(self, rid: str, force_cache_threshold: bool) -> GenerationRequest:
        sim, b = self.sim, self.body
        # vLLM 0.34 ResponsesRequest's request validators, in pydantic's order
        check_tool_usage(b.tools, b.tool_choice)    # check_tool_usage
        check_custom_tool_format(b.tools)           # check_custom_tool_format
        if b.prompt is not None:                    # validate_prompt
            raise Rejected("prompt template is not supported", "prompt")
        if b.background and b.store is False:       # validate_background
            raise Rejected("background can only be used when `store` is true", "background")
        mot = b.max_output_tokens
        # to_sampling_params makes it SamplingParams' max_tokens (min(max_output_tokens, room)),
        # which must be >= 1
        if mot is not None and mot <= 0:
            raise Rejected(f"max_tokens must be at least 1, got {mot}.", "max_tokens", mot)
        inp = b.input
        tools = to_chat_tools(b.tools)
        has_output = not isinstance(inp, str) and any(i.get("type") in OUTPUT_ITEMS for i in inp)
        choice, tool_turn = chat_tool_choice(tools, b.tool_choice, has_output)
        rf = to_response_format(b.text)
        with RESPONSES_FIELDS:
            check_tools(sim, None, None, rf)
        model, lora = sim.resolve_model(b.model)
        if b.background and getattr(sim, "response_store", None) is None:
            # _validate_create_responses_input (responses/serving.py:264-276)
            raise APIError(NO_STORE_FOR_BACKGROUND, 400, "background", "invalid_request_error")
        if LOGPROBS_INCLUDE in (b.include or ()):
            # vLLM 0.34 has no range of its own for top_logprobs: it is SamplingParams' logprobs
            # only with this include (to_sampling_params), checked there (_verify_args, then
            # _validate_logprobs against --max-logprobs); otherwise it is not used
            top = b.top_logprobs
            if top is not None and top < 0 and top != -1:
                raise Rejected(f"logprobs must be non-negative or -1, got {top}.", "logprobs", top)
            check_logprobs_cap(sim, top, "top_logprobs")
        check_sampling_ranges(b)
        check_cache_salt(b.cache_salt)          # vLLM 0.34's ResponsesRequest checks these as chat's
        check_seed(b.seed)
        check_stop(b.stop)
        check_extra_args(b.vllm_xargs, b.kv_transfer_params, b.ec_transfer_params)
        if b.logit_bias or b.stop_token_ids:
            vocab = vocab_size(sim)
            check_logit_bias(b.logit_bias, vocab)
            check_stop_token_ids(b.stop_token_ids, vocab)
        with RESPONSES_FIELDS:
            check_tools(sim, tools, choice, None)
        ignore_eos = bool(b.ignore_eos)
        check_limits(mot, ignore_eos)
        if b.structured_outputs is not None and b.text is not None and b.text.format is not None:
            # ResponsesRequest.extract_structured_outputs
            raise Rejected("Cannot specify both structured_outputs and text.format", "structured_outputs")
        stream = bool(b.stream)
        check_kv_transfer(b.kv_transfer_params, stream)
        store = getattr(sim, "response_store", None)
        # vLLM's construct_input_messages: instructions as the system message, then the history
        messages = [{"role": "system", "content": b.instructions}] if b.instructions else []
        if b.previous_response_id is not None:
            messages += previous_messages(store, b.previous_response_id)
        messages += to_chat_messages(inp)
        if b.mm_processor_kwargs or b.media_io_kwargs:     # vLLM's renderer, before the prompt is built
            check_mm_kwargs(sim, b.mm_processor_kwargs, b.media_io_kwargs)
        kwargs = template_kwargs(sim, effort_kwargs(b.chat_template_kwargs, responses_effort(b.reasoning, sim.config.reasoning_effort_map)))
        gen = generation_prompt_kwargs(inp)
        prompt = chat_prompt(sim, continued(messages, gen), echo_text(inp), "input", tools=tools,
                             chat_template_kwargs=kwargs, **gen)
        self.req = GenerationRequest(
            request_id=rid, model=model, lora=lora, prompts=[prompt], n=1, max_tokens=mot, ignore_eos=ignore_eos,
            stream=stream, tools=tools, tool_choice=choice, response_format=rf,
            kv_transfer_params=b.kv_transfer_params, force_cache_threshold=force_cache_threshold,
            max_tool_calls=1 if tool_turn else None, temperature=b.temperature, priority=scheduling_priority(sim, b.priority),
            # vLLM's ResponsesRequest.to_sampling_params passes these on as chat's do
            seed=b.seed, stop=b.stop or None, stop_token_ids=b.stop_token_ids or None,
            include_stop_str_in_output=bool(b.include_stop_str_in_output),
            reasoning=responses_reasoning(sim, b.reasoning, b.thinking_token_budget, b.chat_template_kwargs, kwargs),
            tool_parser=tool_parser_type(sim, "responses", tools, b.tool_choice, stream),    # vLLM's default: auto
            tool_call_index=responses_history_tool_calls(inp) if tools and numbers_tool_calls(sim.config) else None)
        self.ctx = RenderCtx(b, self.req, LOGPROBS_INCLUDE in (b.include or ()), b.top_logprobs or 0,
                             prefix_block(self.sim))
        self.ctx.tools = [responses_tool(t) for t in paced(b.tools or ())]
        self.ctx.tool_choice = echoed_tool_choice(b.tools, b.tool_choice)
        self.ctx.names = call_names(b.tools)
        room = sim.config.max_model_len - prompt.length      # vLLM's get_max_tokens, to_sampling_params
        self.ctx.max_tokens = room if mot is None else min(mot, room)
        if sim.config.mm_encoder_only:          # the encoder-cache transfer entries, as chat's
            self.ctx.ec_transfer_params = chat_ec_transfer_params(messages, prompt.length)
        self.ctx.store = store is not None and b.store is not False
        self.ctx.background = bool(b.background)
        # vLLM's ResponsesRequest.request_id is the response's id as given (default resp_<uuid>)
        self.ctx.response_id = b.request_id if b.request_id and rid == b.request_id else f"resp_{rid}"
        if self.ctx.store:                # the conversation so far, for a later previous_response_id
            store.remember(self.ctx.response_id, messages, prompt.length)
        return self.req

    @property
    def background(self) -> bool:
        """A non-streaming ``"background": true`` request: answered ``queued`` at once, run on."""
        return self.ctx.background and not self.req.stream

    @property
    def background_stream(self) -> bool:
        """A streaming ``"background": true`` request: its stream runs on if the client leaves."""
        return self.ctx.background and self.req.stream

    def stream_in_background(self, seqs, error_frame):
        """The body of a background stream (:meth:`ResponseStore.stream_in_background`)."""
        queued = base_response(self.ctx, "queued")
        return self.sim.response_store.stream_in_background(self.sim, seqs, queued, self.stream(seqs), error_frame)

    def start_background(self, seqs) -> dict:
        """Answer a background request (its sequences admitted): the ``queued`` object, stored;
        the sequences run on in a greenlet of their own, and ``GET /v1/responses/{id}`` then
        finds the final object (vLLM's ``create_responses`` with ``request.background``)."""
        queued = base_response(self.ctx, "queued")
        self.sim.response_store.run_in_background(self.sim, seqs, queued, self.render)
        return queued

    def render(self, seqs) -> dict:
        out = render_response(self.ctx, seqs[0], self.sim)
        self._store(out)
        return out

    def stream(self, seqs):
        return stream_response(self.sim, self.ctx, seqs[0])

    def _store(self, response: dict) -> None:
        """Keep a finished response for ``GET /v1/responses/{id}`` when the server stores them
        (``VLLM_ENABLE_RESPONSES_API_STORE=1``) and the request did not say ``store: false``."""
        if self.ctx.store:
            self.sim.response_store.put_final(response)

    def stream_error(self, body: dict) -> bytes:
        err = body["error"]
        return self.ctx.event("error", {"code": str(err["code"]), "message": err["message"], "param": err["param"]})


# ---- request translation ----------------------------------------------------------------------

def _part_type(part: dict) -> str:
    t = part.get("type")
    return "input_text" if t is None and "text" in part else t


def _audio(part: dict) -> dict:
    return part["input_audio"] if isinstance(part.get("input_audio"), dict) else part


def _image_url(part: dict) -> str:
    url = part.get("image_url")
    return url.get("url") if isinstance(url, dict) else url


def _chat_content(content):
    """Responses content (string or parts) -> chat content; one text part -> a plain string."""
    if isinstance(content, str):
        return content
    out = []
    for part in content:
        t = _part_type(part)
        if t in TEXT_PARTS:
            out.append({"type": "text", "text": part["refusal"] if t == "refusal" else part["text"]})
        elif t == "input_image":
            out.append({"type": "image_url", "image_url": {"url": _image_url(part)}})
        elif t == "input_audio":
            a = _audio(part)
            out.append({"type": "input_audio", "input_audio": {"data": a["data"], "format": a.get("format")}})
    if len(out) == 1 and out[0]["type"] == "text":
        return out[0]["text"]
    return out


# Items that answer a tool call: once one is in ``input`` the seeds' tool turn is over.
OUTPUT_ITEMS = ("function_call_output", "custom_tool_call_output")
NAMESPACE_SEP = "__"       # vLLM's flat_namespace_tool_name: "<namespace>__<name>"


def reasoning_item_text(item: dict) -> str:
    """A reasoning item's text as vLLM reads it: its first ``content`` part, else its first
    ``summary`` part, else ""."""
    for key in ("content", "summary"):
        parts = item.get(key)
        if parts:
            return parts[0]["text"]
    return ""


def _tool_call(item: dict) -> dict:
    name = item["name"]
    if item.get("namespace"):
        name = item["namespace"] + NAMESPACE_SEP + name
    args = item["arguments"] if item.get("type") == "function_call" else item["input"]
    return {"id": item["call_id"], "type": "function", "function": {"name": name, "arguments": args}}


def continue_final(inp) -> bool:
    """Whether the prompt continues the input's last item: vLLM 0.34's
    ``should_continue_final_message`` (responses/utils.py), which ``ResponsesRequest.
    build_chat_params`` turns into ``add_generation_prompt = not it`` and
    ``continue_final_message = it``: a last ``message`` (an assistant output) or ``reasoning``
    item whose ``status`` is ``in_progress`` or ``incomplete`` (Anthropic-style partial
    completion); never for a string input."""
    if isinstance(inp, str) or not inp or not isinstance(inp[-1], dict):
        return False
    last = inp[-1]
    if last.get("type", "message") not in ("message", "reasoning"):
        return False
    return last.get("status") in ("in_progress", "incomplete")


def continued(messages: list, gen: dict) -> list:
    """``messages`` to render with ``gen`` (:func:`generation_prompt_kwargs`): a continued last
    assistant message without content (a partial reasoning item) has ``""``, as vLLM's chat
    message parsing gives it, so the template continues it instead of refusing a message with
    no content."""
    if gen["continue_final_message"] and messages and messages[-1].get("content") is None:
        return messages[:-1] + [{**messages[-1], "content": ""}]
    return messages


def generation_prompt_kwargs(inp) -> dict:
    """``add_generation_prompt`` / ``continue_final_message`` of a Responses prompt
    (:func:`continue_final`), as ``ResponsesRequest.build_chat_params`` lays them over the chat
    template kwargs and renders the conversation with them."""
    cont = continue_final(inp)
    return {"add_generation_prompt": not cont, "continue_final_message": cont}


def to_chat_messages(inp) -> list:
    """Validated ``input`` -> chat messages (api.md 5.3.1; see the module docstring)."""
    if isinstance(inp, str):
        return [{"role": "user", "content": inp}]
    out = []
    for item in inp:
        t = item.get("type") or "message"
        # vLLM joins a call or an answer to the assistant message a reasoning item opened
        pending = out[-1] if out and out[-1].get("role") == "assistant" and "reasoning" in out[-1] \
            and out[-1]["content"] is None and not out[-1].get("tool_calls") else None
        if t == "message":
            content = _chat_content(item["content"])
            if pending is not None and item["role"] == "assistant":
                pending["content"] = content
            else:
                out.append({"role": item["role"], "content": content})
        elif t in ("function_call", "custom_tool_call"):
            if pending is not None:
                pending["tool_calls"] = [_tool_call(item)]
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [_tool_call(item)]})
        elif t == "reasoning":
            out.append({"role": "assistant", "content": None, "reasoning": reasoning_item_text(item)})
        elif t in OUTPUT_ITEMS:
            out.append({"role": "tool", "tool_call_id": item.get("call_id") or "",
                        "content": _chat_content(item["output"])})
    return out


def echo_text(inp) -> str:
    """What echo mode replays (reference api.md 3.6): the last input item - a message's text
    parts, ``image: <url>`` and ``audio: <format>`` joined by newlines; a function_call_output's
    output; a function_call as ``name(arguments)``."""
    if isinstance(inp, str):
        return inp
    if not inp:
        return ""
    item = inp[-1]
    t = item.get("type") or "message"
    if t in ("function_call", "custom_tool_call"):
        return f"{item['name']}({item['arguments'] if t == 'function_call' else item['input']})"
    if t == "reasoning":
        return reasoning_item_text(item)
    if t not in ("message",) + OUTPUT_ITEMS:
        return ""
    content = item["content"] if t == "message" else item["output"]
    if isinstance(content, str):
        return content
    parts = []
    for part in content:
        pt = _part_type(part)
        if pt in TEXT_PARTS:
            parts.append(part["refusal"] if pt == "refusal" else part["text"])
        elif pt == "input_image":
            parts.append(f"image: {_image_url(part)}")
        elif pt == "input_audio":
            parts.append(f"audio: {_audio(part).get('format') or ''}")
    return "\n".join(parts)


def _flat_tool(tool: dict) -> dict:
    fn = tool["function"] if isinstance(tool.get("function"), dict) else tool
    return {"type": "function", "name": fn["name"], "description": fn.get("description"),
            "parameters": fn.get("parameters"), "strict": fn.get("strict")}


def function_tools(tools) -> list:
    """The function tools of ``tools`` as flat dicts (vLLM's ``iter_response_function_tool_dicts``):
    ``function`` tools, and each function tool of a ``namespace`` tool named
    ``<namespace>__<name>``; other types are not given to the model."""
    out = []
    for t in paced(tools or ()):
        if t.get("type") == "function":
            out.append(_flat_tool(t))
        elif t.get("type") == "namespace":
            out.extend({**_flat_tool(sub), "name": t["name"] + NAMESPACE_SEP + sub["name"]}
                       for sub in t["tools"] if sub.get("type") == "function")
    return out


def call_names(tools) -> dict:
    """flat name -> ``(name, namespace)`` for namespaced function tools (vLLM's
    ``build_responses_tool_call_name_map``)."""
    return {t["name"] + NAMESPACE_SEP + sub["name"]: (sub["name"], t["name"])
            for t in tools or () if t.get("type") == "namespace"
            for sub in t["tools"] if sub.get("type") == "function"}


def to_chat_tools(tools) -> list | None:
    """The function tools (:func:`function_tools`) -> chat tools; None when there are none."""
    out = []
    for flat in paced(function_tools(tools)):
        fn = {"name": flat["name"]}
        if flat["description"] is not None:
            fn["description"] = flat["description"]
        if flat["parameters"] is not None:
            fn["parameters"] = flat["parameters"]
        out.append({"type": "function", "function": fn})
    return out or None


def _named(choice) -> str | None:
    if isinstance(choice, dict) and choice.get("type") == "function":
        fn = choice.get("function")
        return fn.get("name") if isinstance(fn, dict) else choice.get("name")
    return None


TOOL_NOT_FOUND = "Tool choice 'function' not found in 'tools' parameter."


def check_tool_usage(tools, choice) -> None:
    """vLLM 0.34's ``ResponsesRequest.check_tool_usage`` (responses/protocol.py l. 865): without
    tools, ``required`` and a named ``function`` / ``custom`` choice are refused; with tools, a
    named choice must name one of them, exactly or (``_resolve_named_tool_choice``) as the local
    name of exactly one namespaced tool.  Raises Rejected naming ``tool_choice``."""
    named = isinstance(choice, dict) and choice.get("type") in ("function", "custom")
    if not tools:
        if choice == "required":
            raise Rejected("Tool choice 'required' must be specified with 'tools' parameter.", "tool_choice")
        if named:
            raise Rejected(TOOL_NOT_FOUND, "tool_choice")
        return
    if not named:
        return
    name = _named(choice) if choice.get("type") == "function" else choice.get("name")
    if not name:
        raise Rejected(TOOL_NOT_FOUND, "tool_choice")
    exact, local = set(), {}
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        if tool.get("type") == "namespace":
            space, inner = tool.get("name"), tool.get("tools")
            if not isinstance(inner, list) or not isinstance(space, str):
                return                      # vLLM gives up resolving: the name stands
            for t in inner:
                own = t.get("name") if isinstance(t, dict) else None
                if isinstance(own, str):
                    flat = f"{space}{NAMESPACE_SEP}{own}"
                    exact.add(flat)
                    local.setdefault(own, []).append(flat)
        else:
            fn = tool.get("function")       # the nested chat shape, accepted here too
            own = fn.get("name") if isinstance(fn, dict) else tool.get("name")
            if isinstance(own, str):
                exact.add(own)
    if name in exact or len(local.get(name, ())) == 1:
        return
    if local.get(name):
        raise Rejected(f"Tool choice '{name}' is ambiguous: it is defined in more than one namespace "
                       f"({', '.join(local[name])}). Select it by its full '<namespace>__<name>' name.",
                       "tool_choice")
    raise Rejected(TOOL_NOT_FOUND, "tool_choice")


def check_custom_tool_format(tools) -> None:
    """vLLM 0.34's ``ResponsesRequest.check_custom_tool_format``: a ``custom`` tool with a
    ``grammar`` format is refused (only free-form text custom tools)."""
    for tool in tools or ():
        fmt = tool.get("format") if isinstance(tool, dict) else None
        if fmt is not None and tool.get("type") == "custom" and isinstance(fmt, dict) and fmt.get("type") == "grammar":
            raise Rejected("Custom tools with a grammar format are not supported; only free-form text custom "
                           "tools are accepted.", "tools")


def echoed_tool_choice(tools, choice):
    """``tool_choice`` as the response echoes it: as vLLM's ``check_tool_usage`` leaves it
    (responses/protocol.py l. 865-902: ``none`` without tools for an absent, ``auto`` or ``none``
    choice; a named function's name resolved to its flat ``<namespace>__<name>``), dumped as the
    SDK's ToolChoice models (``ToolChoiceFunction``/``ToolChoiceCustom``: ``name``, ``type``;
    ``ToolChoiceAllowed``: ``mode``, ``tools``, ``type``)."""
    if not tools and choice in (None, "auto", "none"):
        return "none"
    if not isinstance(choice, dict):
        return "auto" if choice is None else choice
    t = choice.get("type")
    if t in ("function", "custom"):
        name = _named(choice) if t == "function" else choice.get("name")
        spaced = call_names(tools)
        if name not in spaced and all(t.get("name") != name for t in tools or ()):
            local = [flat for flat, (own, _) in spaced.items() if own == name]
            name = local[0] if len(local) == 1 else name
        return {"name": name, "type": t}
    if t == "allowed_tools":
        return {"mode": choice.get("mode"), "tools": choice.get("tools"), "type": t}
    return choice


def chat_tool_choice(tools, choice, has_output: bool):
    """The seeds' tool policy -> a chat tool_choice.  Returns ``(tool_choice, tool_turn)``.
    A named function may be a namespaced tool's own name (vLLM matches it too); a hosted
    tool's choice (``{"type": "web_search_preview"}``, ...) forces nothing a simulator can call."""
    name = _named(choice)
    if name is not None and tools:
        flat = [t["function"]["name"] for t in tools]
        if name not in flat:
            name = next((f for f in flat if f.rsplit(NAMESPACE_SEP, 1)[-1] == name), name)
    if isinstance(choice, dict) and choice.get("type") not in ("function", "allowed_tools", "custom"):
        choice = "none"
    if not tools:
        # No tools: only "none"/"auto" make sense; forcing ones reach the validator's 400.
        if name is not None:
            return {"type": "function", "function": {"name": name}}, False
        return (choice if choice in ("none", "required") else None), False
    if choice == "none" or has_output:
        return "none", False
    if name is not None:
        return {"type": "function", "function": {"name": name}}, True
    return "required", True


def to_response_format(text_cfg) -> dict | None:
    """``text.format`` -> chat ``response_format`` (None for plain text)."""
    fmt = text_cfg.format if text_cfg is not None else None
    t = fmt.type if fmt is not None else None
    if t == "json_object":
        return {"type": "json_object"}
    if t == "json_schema":
        js = {k: getattr(fmt, k) for k in ("name", "schema", "description", "strict") if getattr(fmt, k) is not None}
        return {"type": "json_schema", "json_schema": js}
    return None
