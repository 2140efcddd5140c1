"""OpenAI chat completions as vLLM serves them (``POST /v1/chat/completions``).

Non-streaming: one ``chat.completion`` object.  Streaming (``text/event-stream``): per choice a
role chunk, one chunk per token, the last one carrying ``finish_reason`` (vLLM's shape); then, only with
``stream_options.include_usage``, one usage chunk with ``choices: []``; then ``data: [DONE]``.
Tool calls stream as OpenAI clients expect: the first delta of each call carries ``id``,
``type`` and ``function.name``, later deltas only ``function.arguments`` fragments.
"""
from __future__ import annotations

from functools import partial

from generation.content import logprobs as lp
from ..errors import InvalidParam, Rejected
from generation.engine.token_schedule import TokenSchedule
from generation.engine.request import ClientDisconnected, GenerationRequest
from generation.engine.weight_versions import spans as weight_spans
from .base import (per_request_metrics, CHUNK_END, CLOSE_KV, KV_END, EC_TRANSFER_DUMMY, REMOTE_DECODE_PARAMS, Adapter, remote_decode_params, ChunkFrame, PieceChunks, chat_prompt, check_kv_transfer,
                   check_limits, check_logprobs_cap, check_logprobs_sign, check_prompt_logprobs, check_size,
                   check_stream_options, check_tools, check_work, dumps, request_usage, stream_flags, system_fingerprint, usage_details, PromptDetails, prompt_tokens_details)
from .token_stream import Streamed, due_items, end_aborted
from .chat_tool_deltas import call_entries, call_style, finish_reason, name_entry, named_choice, tool_delta
from .chat_logprobs import choice_logprobs, chunk_logprobs, hides_metadata, token_logprobs
from .response_bodies import chat_choice, chat_message, chat_response
from generation.content.image import IMAGE_PART
from generation.tokenization.multimodal import media_items, mm_features, mm_token_counts
from generation.content.reasoning import content_text, counted_span, reasoning_text, reasoning_tokens
from generation.tokenization.tokenizer import chat_options
from .fields import (check_beam_logprob_ids, check_truncate_in_context, check_chat_part_types, check_openai_fields, check_prompt_ids, check_response_format_schema, check_structured_count,
                     forwarded_prompt_ids, prompt_vocab_size, scheduling_priority, tokens_as_ids)
from .protocol import ChatCompletionRequest
from .sampling import chat_reasoning, sampling_semantics, structured_constraint, template_kwargs, tool_parser_type
from generation.structured.tool_calls import chat_history_tool_calls, numbers_tool_calls


class ChatAdapter(Adapter):
    body: ChatCompletionRequest
    image_output = True
    sse_keep_alive = True
    generation_error_stream_type = "InternalServerError"  # chat_completion_stream_generator's except GenerationError
    render_type = "chat"                            # vllm:request_render_duration_seconds{request_type}
    parser_request_type = "chat_completions"        # vllm:tool_call_parser_invocations{request_type}
    external_id_format = "chatcmpl-{rid}"           # chat_completion/serving.py's request_id

    def build(self, rid: str, force_cache_threshold: bool) -> GenerationRequest:
        self.check(force_cache_threshold)
        sim, b = self.sim, self.body
        check_chat_part_types(b.messages)
        prompt = chat_prompt(sim, b.messages or [], **chat_options(b, sim.config.default_chat_template_kwargs, effort=True,
                                                                 effort_map=sim.config.reasoning_effort_map))
        forwarded = forwarded_prompt_ids(b.kv_transfer_params, b.messages)
        if forwarded is not None:            # vLLM 0.34: a decode leg reuses the prefill's ids verbatim
            prompt.ids = forwarded
            check_prompt_ids([prompt], prompt_vocab_size(sim), "kv_transfer_params.prompt_token_ids")
        return self.request(rid, [prompt], force_cache_threshold)

    def check(self, force_cache_threshold: bool, prompts: int = 1) -> None:
        """Every check that needs no prompt, in vLLM's order (its request validators, then the
        model, then sampling), then the bounds of what ``prompts`` conversations of ``n``
        choices may cost (:func:`check_size`, :func:`check_work`), before anything is
        tokenized.  Keeps what :meth:`request` needs in ``self._checked``."""
        sim, b = self.sim, self.body
        stream = bool(b.stream)
        # vLLM's request validators (chat_completion/protocol.py), before the model check
        check_structured_count(b.structured_outputs, b.tool_choice)
        check_stream_options(b.stream_options, stream)
        check_beam_logprob_ids(b.logprob_token_ids, b.use_beam_search)
        top = b.top_logprobs
        check_prompt_logprobs(b.prompt_logprobs, stream)
        # vLLM: with ``echo`` the prompt logprobs default to ``top_logprobs`` (not streamed)
        self.prompt_lp = b.prompt_logprobs
        if self.prompt_lp is None and b.echo and not stream:
            self.prompt_lp = b.top_logprobs
        check_top_logprobs(top, b.logprobs)
        check_response_format_schema(b.response_format)
        model, lora = sim.resolve_model(b.model)
        if b.logprobs:
            check_logprobs_cap(sim, top or 0, "top_logprobs")
        check_logprobs_cap(sim, self.prompt_lp, "prompt_logprobs", "prompt")
        tools, tool_choice = chat_tools(b.tools, b.tool_choice)
        check_tools(sim, tools, tool_choice, b.response_format)
        constraint = structured_constraint(sim, b.structured_outputs, b.response_format)
        mct = b.max_completion_tokens
        max_tokens = mct if mct is not None else b.max_tokens
        ignore_eos = bool(b.ignore_eos)
        check_limits(max_tokens, ignore_eos, b.n)     # SamplingParams' max_tokens, whichever field gave it
        check_truncate_in_context(sim, b.truncate_prompt_tokens)
        check_openai_fields(sim, b, bool(b.logprobs), max_tokens)
        check_kv_transfer(b.kv_transfer_params, stream)
        n = b.n or 1
        check_size(sim, prompts * n, force_cache_threshold, b.cache_hit_threshold)
        if max_tokens is not None:            # the output side, before anything is tokenized
            check_work(sim, *self._work(prompts * n * min(max_tokens, sim.config.max_model_len)))
        self._checked = (model, lora, tools, tool_choice, constraint or b.response_format, max_tokens, ignore_eos,
                         n, stream)

    def request(self, rid: str, prompts: list, force_cache_threshold: bool) -> GenerationRequest:
        """The engine's request for ``prompts`` (each ``n`` choices), from what :meth:`check`
        kept."""
        b = self.body
        model, lora, tools, tool_choice, response_format, max_tokens, ignore_eos, n, stream = self._checked
        self.req = GenerationRequest(
            request_id=rid, model=model, lora=lora, prompts=prompts, n=n,
            max_tokens=max_tokens, min_tokens=b.min_tokens or 0, ignore_eos=ignore_eos, stream=stream,
            # vLLM 0.34's keeps_tool_calls (chat_completion/message_assembly.py l. 65-100): an
            # explicit ``tool_choice: null`` beside tools (the schema fills in an absent one as
            # "auto") is parsed as auto, but its calls are dropped, streamed or not: a text answer
            tools=tools, tool_choice="none" if tools and tool_choice is None else tool_choice,
            response_format=response_format, stop=b.stop, kv_transfer_params=b.kv_transfer_params,
            cache_hit_threshold=b.cache_hit_threshold, force_cache_threshold=force_cache_threshold,
            max_tool_calls=1 if b.parallel_tool_calls is False else None, **sampling_semantics(b),
            priority=scheduling_priority(self.sim, b.priority), cache_salt=b.cache_salt,
            stream_interval=b.stream_interval,
            reasoning=chat_reasoning(self.sim, b, template_kwargs(self.sim, b.chat_template_kwargs), self.sim.config.reasoning_effort_map),
            tool_parser=self.parser_request_type and tool_parser_type(self.sim, self.parser_request_type, tools,
                                                                        tool_choice, stream),
            tool_call_index=chat_history_tool_calls(b.messages) if tools and numbers_tool_calls(self.sim.config) else None)
        return self.req

    def _work(self, tokens: int, prompt_len: int = 0) -> tuple[int, str, str]:
        b = self.body
        top = (b.top_logprobs or 0) if b.logprobs else 0
        mct = "max_completion_tokens" if b.max_completion_tokens is not None else "max_tokens"
        formula = f"n x {mct}" + (" x (1 + top_logprobs)" if top else "")
        units = tokens * (1 + top)
        if self.prompt_lp is not None:         # rendered once, for the request's one prompt
            units += prompt_len * (1 + self.prompt_lp)
            formula += " + prompt tokens x (1 + prompt_logprobs)"
        return units, formula, "n" if (b.n or 1) > 1 else mct

    def work(self, seqs) -> tuple[int, str, str]:
        return self._work(sum(s.completion_tokens for s in seqs), seqs[0].prompt_len if seqs else 0)

    def render(self, seqs) -> dict:
        b = self.body
        # include_reasoning: false under a parser hides logprobs and token ids (suppress_metadata,
        # chat_completion/serving.py l. 1032-1035, 1078-1081); the batch route's keep them
        shown = not hides_metadata(self.sim, b)
        out = render_chat(self.req, seqs, bool(b.logprobs) and shown, b.top_logprobs or 0, usage_details(self.sim),
                          tokens_as_ids(self.sim, b), self.sim.reasoning is not None, self.mm_tokens(seqs),
                          response_role(b))
        out["system_fingerprint"] = system_fingerprint(self.sim.config)
        if self.sim.config.mm_encoder_only:
            ec = chat_ec_transfer_params(b.messages or [], seqs[0].prompt_len)
            if ec:
                out["ec_transfer_params"] = ec
        listed = lp.listed_names(self.sim.tokenizer, self.req.logprob_token_ids, tokens_as_ids(self.sim, b))
        if listed:
            for c in out["choices"]:
                if c["logprobs"] is not None:
                    c["logprobs"] = {"content": [lp.with_listed(e, k, listed)
                                                 for k, e in enumerate(c["logprobs"]["content"])]}
        if self.prompt_lp is not None:
            out["prompt_logprobs"] = lp.prompt_logprobs(self.sim.tokenizer, seqs[0].prompt.ids, self.prompt_lp)
        if b.echo:      # vLLM: the last message (the answer's role) or "", then the answer: never null
            echoed = echo_text(b)      # (chat_completion/serving.py l. 1091-1104)
            for c in out["choices"]:
                c["message"]["content"] = echoed + (c["message"]["content"] or "")
        if b.return_token_ids:     # vLLM: top-level prompt_token_ids, per choice token_ids
            out["prompt_token_ids"] = list(seqs[0].prompt.ids)
            if shown:
                for c, s in zip(out["choices"], seqs):
                    c["token_ids"] = list(s.ids)
        for c, s in zip(out["choices"], seqs) if b.return_weight_versions else ():
            c["weight_versions"] = weight_spans(s, self.sim.weight_version)
        metrics = per_request_metrics(self.sim, seqs, spec=True)
        if metrics is not None:
            out["metrics"] = metrics
        return out

    def mm_tokens(self, seqs) -> dict | None:
        """``prompt_tokens_details.multimodal_tokens`` (:func:`mm_token_counts`) when the
        details are vLLM's (``--enable-prompt-tokens-details``), else None."""
        pd = usage_details(self.sim)
        if pd is None or pd.shape != "vllm" or not seqs:
            return None
        return mm_token_counts(self.body.messages or [], seqs[0].prompt_len)

    def stream(self, seqs):
        b = self.body
        include_usage, continuous = stream_flags(b.stream_options, self.sim.config.enable_force_include_usage)
        hide = hides_metadata(self.sim, b)
        return stream_chat(self.sim, self.req, seqs, include_usage, continuous, bool(b.logprobs) and not hide,
                           b.top_logprobs or 0, bool(b.return_token_ids) and not hide, tokens_as_ids(self.sim, b),
                           self.sim.reasoning is not None, echo_text(b), self.mm_tokens(seqs), response_role(b),
                           list(seqs[0].prompt.ids) if b.return_token_ids else None, bool(b.return_weight_versions))


RESPONSE_ROLE = "assistant"      # vLLM's --response-role default


def check_top_logprobs(top, logprobs) -> None:
    """vLLM 0.34's chat ``check_logprobs`` on ``top_logprobs``: positive, 0 or -1, and other
    than 0 only with ``logprobs``.  Raises Rejected naming ``top_logprobs``."""
    check_logprobs_sign(top, "top_logprobs")
    if top is not None and top != 0 and not logprobs:
        raise Rejected("when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs")


def response_role(b, conversation: list | None = None) -> str:
    """The role of the answer (vLLM 0.34 ``get_chat_request_role``): the response role, or with
    ``add_generation_prompt: false`` the role of the conversation's last message
    (``conversation``: the request's ``messages`` unless given)."""
    if b.add_generation_prompt is not False:
        return RESPONSE_ROLE
    messages = b.messages if conversation is None else conversation
    last = messages[-1] if messages else None
    role = last.get("role") if isinstance(last, dict) else None
    return role if isinstance(role, str) else RESPONSE_ROLE


def echo_content(conversation: list, role: str) -> str:
    """vLLM's chat ``echo`` for one conversation: its last message's content when that message's
    role is the answer's ``role`` (a list of parts: their texts joined by newlines), else ``""``."""
    last = conversation[-1] if conversation else None
    if not isinstance(last, dict) or last.get("role") != role:
        return ""
    content = last.get("content") or ""
    if isinstance(content, list):
        content = "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def echo_text(b) -> str:
    """vLLM's chat ``echo`` of a request: :func:`echo_content` of its messages for the answer's
    role."""
    if not b.echo or not b.messages:
        return ""
    return echo_content(b.messages, response_role(b))


def chat_tools(tools, tool_choice) -> tuple[list | None, object]:
    """vLLM 0.34's ``check_tool_usage`` on ``(tools, tool_choice)``: ``tools: []`` counts as no
    tools (as OpenAI treats it), and ``"auto"`` / ``"required"`` with nothing to call fall back
    to ``"none"``; a named ``tool_choice`` keeps the empty list, so the lookup reports the
    mismatch.  Raises InvalidParam (``tool_choice``) for a ``tool_choice`` other than
    ``"none"`` without tools."""
    if tools is not None and not tools and not isinstance(tool_choice, dict):
        tools = None
        if tool_choice in ("auto", "required"):
            tool_choice = "none"
    if tools is None and tool_choice is not None and tool_choice != "none":
        raise Rejected("When using `tool_choice`, `tools` must be set.", "tool_choice")
    return tools, tool_choice


def chat_ec_transfer_params(messages: list, prompt_tokens: int) -> dict | None:
    """``--mm-encoder-only`` (api.md 5.1.10): one dummy encoder-cache transfer entry per
    synthetic multimodal hash of the conversation's media blocks (as chat render names them);
    None without media."""
    features = mm_features(media_items(messages), prompt_tokens)
    if features is None:
        return None
    return {h: dict(EC_TRANSFER_DUMMY) for hs in features["mm_hashes"].values() for h in hs}


def tool_calls_json(seq) -> list:
    """A message's ``tool_calls``: vLLM 0.34's ``ToolCall`` (``id``, ``type``, ``function``); only
    a stream's ``DeltaToolCall`` has an ``index`` (the reference puts one here too)."""
    return [{"id": tc["id"], "type": "function", "function": {"name": tc["name"], "arguments": tc["arguments"]}}
            for tc in seq.tool_calls]


def render_chat(req: GenerationRequest, seqs, want_logprobs: bool, top: int, details: PromptDetails | None = None,
                as_ids: bool = False, parser: bool = False, mm: dict | None = None, role: str = RESPONSE_ROLE) -> dict:
    """The ``chat.completion`` body; ``as_ids``: logprob tokens named ``token_id:N``.  Each message
    carries ``reasoning`` (its text; null without a reasoning span or when hidden by
    ``include_reasoning: false``); ``parser``: ``--reasoning-parser`` is set, so the usage has
    ``completion_tokens_details.reasoning_tokens`` (null otherwise), as vLLM 0.33 reports them."""
    choices = []
    include = req.reasoning is None or req.reasoning.include
    for s in seqs:
        span = s.reasoning_span
        if s.tool_calls:
            if req.send_image:
                content = [IMAGE_PART]                   # the reference: the image only
            else:
                # vLLM 0.34 (chat_completion/message_assembly.py l. 60-61): a forced call (a named
                # function or "required") has content "", an auto one null
                content = "" if named_choice(req) or req.tool_choice == "required" else None
            calls = tool_calls_json(s)
        else:
            text = content_text(s)
            content = text if text or span is None else None
            if content is None and (named_choice(req) or req.tool_choice == "required"):
                content = ""               # message_assembly: a forced choice's content is never null
            if req.send_image:             # --omni: structured content, text then the image
                content = [{"type": "text", "text": content or ""}, IMAGE_PART]
            calls = None
        # every output token's, reasoning, markers and tool call included (chat_completion/serving.py
        # l. 1009-1021; batch_serving.py l. 282-291)
        logprobs = choice_logprobs(s, top, as_ids) if want_logprobs else None
        message = chat_message(role, content, reasoning_text(s) if include else None, calls)  # reasoning: always there
        choices.append(chat_choice(index=s.index, message=message, logprobs=logprobs,
                                   finish_reason=finish_reason(req, s), stop_reason=s.stop_reason))
    completion_details = {"reasoning_tokens": reasoning_tokens(seqs)} if parser else None
    # every field of vLLM 0.34's response (response_bodies): the caller fills in the fingerprint
    return chat_response(id=f"chatcmpl-{req.request_id}", model=req.model, choices=choices,
                         usage=request_usage(seqs, details, completion_details, mm=mm),
                         kv_transfer_params=remote_decode_params(seqs) if req.remote_decode else None)


_IMAGE_PART = dumps(IMAGE_PART)

# vLLM 0.34's chat chunks are dumped exclude_unset (chat_completion/serving.py
# chat_completion_stream_generator): a token chunk's choice sets ``token_ids`` (null unless
# return_token_ids), a finishing one ``stop_reason``, ``token_ids`` and ``weight_versions``
# too, and every token chunk the chunk's ``kv_transfer_params`` (null: a prefill cannot stream)
NOT_FINISHED = b',"finish_reason":null,"token_ids":null'

# a plain content chunk after its head: ``,"delta":{"content":<piece>},...}],"kv_transfer_params":null}\n\n``
_PLAIN_REST = PieceChunks(b',"delta":{"content":', b'},"logprobs":null' + NOT_FINISHED + CLOSE_KV)


def finish_fields(req: GenerationRequest, seq) -> bytes:
    """A choice's closing fields: ``,"finish_reason":...,"stop_reason":...`` (:func:`finish_reason`)."""
    return b',"finish_reason":' + dumps(finish_reason(req, seq)) + b',"stop_reason":' + dumps(seq.stop_reason)


def token_ids_field(ids) -> bytes:
    """``,"token_ids":[...]`` of a chunk's tokens, or null (``ids`` None)."""
    return b',"token_ids":null' if ids is None else b',"token_ids":' + dumps(ids)


def stream_chat(sim, req: GenerationRequest, seqs, include_usage: bool, continuous: bool,
                want_logprobs: bool, top: int, token_ids: bool = False, as_ids: bool = False,
                parser: bool = False, echoed: str = "", mm: dict | None = None, role: str = RESPONSE_ROLE,
                prompt_ids: list | None = None, weights: bool = False):
    """SSE body, as vLLM's: per choice a role chunk, then one chunk per token, the last one carrying
    ``finish_reason`` and ``stop_reason`` (a choice without tokens gets one closing chunk with ``delta:
    {}``).  Chunk prefixes are rendered once (:class:`ChunkFrame`); per token only the piece is serialised.  ``token_ids``: each token chunk's choice carries its
    ``token_ids`` delta (vLLM's ``return_token_ids``); ``as_ids``: logprob tokens named
    ``token_id:N`` (``return_tokens_as_token_ids``).  Reasoning tokens stream as
    ``delta.reasoning``; the parser's markers (and reasoning hidden by ``include_reasoning:
    false``) send no chunk, as vLLM's parser returns no delta for them, but count in the usage;
    with logprobs or token ids a marker sends ``delta: {}`` carrying them, so that they cover
    every output token, as vLLM's chat stream does (``want_logprobs`` and ``token_ids`` come
    false where vLLM hides them: :func:`~.chat_logprobs.hides_metadata`).
    With continuous usage and prompt details on, the role chunk's usage carries
    ``prompt_tokens_details`` (vLLM 0.34); later chunks' running usage does not.  ``echoed``
    (chat ``echo``): a chunk with that content follows each role chunk, as vLLM sends it.
    ``prompt_ids``: with ``return_token_ids`` the prompt's ids, which every role chunk carries. Tool calls
    stream as vLLM's ``tool_choice`` path streams them (:mod:`.chat_tool_deltas`): named and required
    name a call with its first argument piece, auto (hermes) in a token-less chunk of its own before it.
    Fields as vLLM 0.34 sets them (``model_dump_json(exclude_unset=True)``): a role chunk ends
    with ``prompt_token_ids`` (null without ``return_token_ids``) and ``prompt_text`` (null); a
    token chunk's choice with ``token_ids`` (null without ``return_token_ids``), a finishing
    one's with ``stop_reason``, ``token_ids`` and ``weight_versions`` (null; with ``weights``, its
    spans); every token chunk with ``kv_transfer_params`` (null), after its usage and fingerprint."""
    frame = ChunkFrame(f"chatcmpl-{req.request_id}", "chat.completion.chunk", req.model, seqs, continuous, chat=True,
                       spans=[counted_span(s) for s in seqs] if parser else None)
    heads, tail = frame.heads, frame.tail
    listed = lp.listed_names(sim.tokenizer, req.logprob_token_ids, as_ids)
    include_reasoning = req.reasoning is None or req.reasoning.include
    out = []              # chunks due now: one write when the stream is about to wait
    put = out.append
    started = [False] * len(seqs)
    # vLLM: the last token's chunk carries finish_reason; with --omni the image chunk comes between
    # a choice's tokens and its finish (the reference's order), so the finish is a chunk of its own
    lasts = [-1 if req.send_image else len(s.pieces) - 1 for s in seqs]
    call_maps = {}
    style = call_style(req)             # which of vLLM's tool-call streaming paths (chat_tool_deltas)

    pd = usage_details(sim)
    first_details = continuous and pd is not None
    by_index = {s.index: s for s in seqs}
    role_delta = (b',"delta":{"role":' + dumps(role) + b',"content":""},"logprobs":null,"finish_reason":null}]')
    role_end = b',"prompt_token_ids":' + dumps(prompt_ids) + b',"prompt_text":null' + CHUNK_END
    # vLLM 0.21+: the system_fingerprint on a choice's finishing chunk, or with include_usage on
    # the usage chunk alone (the true last message)
    fingerprint = system_fingerprint(sim.config)
    last_close = (b'}],"system_fingerprint":' + dumps(fingerprint) + KV_END
                  if fingerprint is not None and not include_usage else CLOSE_KV)
    def fin_weights(seq) -> bytes:     # a finishing choice's, after its token_ids (spans with ``weights``)
        return b',"weight_versions":' + (dumps(weight_spans(seq, sim.weight_version)) if weights else b"null")
    def role_chunk(i: int) -> bytes:
        usage = frame.usage(i, 0, prompt_tokens_details(pd, [by_index[i]], mm=mm) if first_details else None)
        out = heads[i] + role_delta + usage + role_end
        if echoed:               # vLLM's echo chunk sets neither token_ids nor kv_transfer_params
            out += (heads[i] + b',"delta":{"content":' + dumps(echoed) + b'},"logprobs":null,"finish_reason":null}]' +
                    frame.usage(i) + CHUNK_END)
        return out

    # No logprobs, token ids nor running usage: a token chunk is its head plus a suffix that
    # depends only on the piece (cached in _PLAIN_REST; about 4x fewer bytes copied per chunk).
    image = req.send_image               # --omni: text as content parts, then an image chunk per choice
    plain = not (want_logprobs or token_ids or continuous or image or any(s.reasoning_span for s in seqs))
    blocks = plain and not any(s.tool_calls for s in seqs)
    get_rest, render_rest = _PLAIN_REST.get, _PLAIN_REST.render
    plain_prefix, plain_suffix = _PLAIN_REST.prefix, _PLAIN_REST.suffix

    def token_chunk(seq, k: int) -> bytes:
        i = seq.index
        piece = seq.pieces[k]
        last = k == lasts[i]
        if not last:
            if plain and not seq.tool_calls:     # the common chunk: head + cached per-piece bytes
                return heads[i] + (get_rest(piece) or render_rest(piece))
            fin = b',"finish_reason":null'
            close = CLOSE_KV
        else:
            fin = finish_fields(req, seq)
            close = last_close
        span = seq.reasoning_span
        shown = span is None or k >= span[2] or (include_reasoning and span[0] <= k < span[1])
        # a marker, or reasoning not returned: the parser's delta is None, so no chunk, unless it
        # finishes or carries logprobs or token ids: DeltaMessage() (chat_completion/serving.py l. 749-758)
        if not (shown or last or want_logprobs or token_ids):
            if continuous:
                frame.count(i)
            return b""
        tid = b',"token_ids":[' + str(seq.ids[k]).encode() + b"]" if token_ids else b',"token_ids":null'
        if last:
            tid += fin_weights(seq)
        # vLLM: the output's logprobs, made before its parser runs, ride on whatever chunk it sends
        # (l. 697-707, 788-813): the reasoning's, its markers', a tool call's too
        logprobs = token_logprobs(seq, k, top, as_ids, listed) if want_logprobs else b"null"
        if seq.tool_calls and (span is None or k >= span[2]):
            cmap = call_maps.get(i)
            if cmap is None:
                cmap = call_maps[i] = seq.tool_call_of_piece()
            c = cmap[k]
            tc = seq.tool_calls[c]
            first = k == tc["start"]
            entries = call_entries(style, tc, c, piece, first and style != "auto")
            # before this token's running usage counts it: the name chunk carries no token
            name = name_chunk(i, tc, c) if first and style == "auto" else b""
            if not entries and not (last or want_logprobs or token_ids):
                if continuous:               # no text, no entry: the parser's delta is None
                    frame.count(i)
                return name
            end = tid + (b"}]" + tail(1, i) if continuous else close)
            delta = dumps(tool_delta(style, entries)) if entries else b"{}"
            return name + heads[i] + b',"delta":' + delta + b',"logprobs":' + logprobs + fin + end
        end = tid + (b"}]" + tail(1, i) if continuous else close)     # "}]" closes the choices
        if span is not None and k < span[2]:
            delta = b'{"reasoning":' + dumps(piece) + b'}' if shown else b"{}"
            return heads[i] + b',"delta":' + delta + b',"logprobs":' + logprobs + fin + end
        content = b'[{"type":"text","text":' + dumps(piece) + b'}]' if image else dumps(piece)
        return heads[i] + b',"delta":{"content":' + content + b'},"logprobs":' + logprobs + fin + end

    def span_chunk(seq, a: int, b: int) -> bytes:
        """Tokens ``a..b-1`` (``a`` > 0: the first token goes alone) as one output, a stream
        interval's group, as vLLM's chat stream renders an output of several tokens (its
        ``ChatStreamProcessor`` fed one multi-token delta): one delta with their ``content``, their
        ``reasoning`` and their tool calls' argument fragments (per call its path's entries,
        :mod:`.chat_tool_deltas`: the auto path's name entry and arguments entry in one
        delta, as hermes sends an output that reveals both; DeltaMessage's key order), a
        logprobs entry and ``token_ids`` for each of its tokens, the running usage counting them
        all, the finish when ``b - 1`` is the choice's last token.  The parser's markers (and
        hidden reasoning) show nothing: a group of nothing else sends ``delta: {}`` when it
        finishes or carries logprobs or token ids, else no chunk, as vLLM's chat stream."""
        i = seq.index
        pieces = seq.pieces
        if plain and b - 1 != lasts[i] and not seq.tool_calls:     # text alone: the plain chunk's frame
            return heads[i] + plain_prefix + dumps("".join(pieces[a:b])) + plain_suffix
        span = seq.reasoning_span
        r0, r1, c0 = span if span is not None else (0, 0, 0)
        n = b - a
        last = b - 1 == lasts[i]
        ra, rb = (a if a > r0 else r0), (b if b < r1 else r1)      # the reasoning shown
        if not include_reasoning:
            rb = ra
        ca = a if a > c0 else c0                                   # the answer's tokens ca..b-1
        delta = {}
        calls = seq.tool_calls
        if ca < b and not calls:
            text = "".join(pieces[ca:b])
            delta["content"] = [{"type": "text", "text": text}] if image else text
        if ra < rb:
            delta["reasoning"] = "".join(pieces[ra:rb])
        if ca < b and calls:
            entries = call_deltas(seq, ca, b)
            if entries:
                delta = tool_delta(style, entries, delta.get("reasoning"))
        # no delta (markers, hidden reasoning): no chunk unless it finishes or carries logprobs or
        # token ids, then DeltaMessage() (l. 749-758); those cover all its tokens (l. 697-707, 788-813)
        if not (delta or last or want_logprobs or token_ids):
            if continuous:
                frame.count(i, n)
            return b""
        logprobs = chunk_logprobs(seq, a, b, top, as_ids, listed) if want_logprobs else b"null"
        fin = finish_fields(req, seq) if last else b',"finish_reason":null'
        end = b"}]" + tail(n, i) if continuous else (last_close if last else CLOSE_KV)     # "}]" closes the choices
        end = token_ids_field(seq.ids[a:b] if token_ids else None) + (fin_weights(seq) if last else b"") + end
        return heads[i] + b',"delta":' + dumps(delta) + b',"logprobs":' + logprobs + fin + end

    def call_deltas(seq, a: int, b: int) -> list:
        """The tool-call entries of pieces ``a..b-1``: per run of one call's pieces, its argument
        fragments joined, as :func:`~.chat_tool_deltas.call_entries` gives them (a run that
        starts its call names it)."""
        i = seq.index
        cmap = call_maps.get(i)
        if cmap is None:
            cmap = call_maps[i] = seq.tool_call_of_piece()
        out = []
        k = a
        while k < b:
            c = cmap[k]
            tc = seq.tool_calls[c]
            end = min(b, tc["end"])
            out += call_entries(style, tc, c, "".join(seq.pieces[k:end]), k == tc["start"])
            k = end
        return out

    def name_chunk(i: int, tc: dict, c: int) -> bytes:
        """The auto path's name-alone chunk of call ``c`` (:mod:`.chat_tool_deltas`): no token,
        so empty logprobs and token ids, the running usage unchanged."""
        return (heads[i] + b',"delta":' + dumps(tool_delta(style, [name_entry(tc, c)])) +
                b',"logprobs":' + (b'{"content":[]}' if want_logprobs else b"null") + b',"finish_reason":null' +
                token_ids_field([] if token_ids else None) + (b"}]" + tail(0, i) if continuous else CLOSE_KV))

    def start_all() -> None:
        # vLLM sends every choice's role chunk, in index order, at the request's first output
        # (the openai SDK's stream helper needs choice 0's first): not each at its own first token
        for s in seqs:                       # in index order, as prepare() made them
            if not started[s.index] and s.finish_reason != "cache_threshold":
                started[s.index] = True
                put(role_chunk(s.index))

    def first_chunk(seq) -> bytes:
        # token 0 of a schedule from token 0, as the int path below writes it: the role chunks,
        # then the token's (``out`` is empty: the generator waits at the schedule, after due_items)
        start_all()
        put(token_chunk(seq, 0))
        data = b"".join(out)
        out.clear()
        return data

    streamed = Streamed(len(seqs))           # tokens each choice sent, for an abort (end_aborted)
    sent = streamed.counts
    try:
        for seq, k in sim.stream(seqs, flush=True, blocks=blocks, deadlines=True, first_in_schedule=True):
            cls = k.__class__
            if cls is int and k >= 0:
                if not started[seq.index]:
                    start_all()
                put(token_chunk(seq, k))
                sent[seq.index] = k + 1
                continue
            if cls is range:                     # plain tokens due at once: their chunks in one bytes
                i = seq.index
                if not started[i]:
                    start_all()
                put(_PLAIN_REST.block(heads[i], seq.pieces, k, partial(token_chunk, seq)))
                sent[i] = k.stop
                continue
            if cls is slice:                     # a stream interval's group (never the first token): one chunk
                put(span_chunk(seq, k.start, k.stop))
                sent[seq.index] = k.stop
                continue
            if cls is TokenSchedule:             # the server emits tokens 1.. itself (or 0.., first_in_schedule)
                streamed.hand(k, _PLAIN_REST.renderer(heads[seq.index], seq.pieces, partial(token_chunk, seq), not weights)
                              if plain and not seq.tool_calls else partial(token_chunk, seq), partial(first_chunk, seq),
                              partial(span_chunk, seq))
            yield from due_items(out, k)         # the stream waits here: what is due, then the deadline
    except ClientDisconnected:               # the server aborted it: its choices still finish (end_aborted)
        if not req.aborted_by_server:
            raise
    cut = end_aborted(req, seqs, streamed)
    if image and not cut:                # after every choice's last token, before the finish chunks
        for seq in seqs:
            i = seq.index
            if not started[i] and seq.finish_reason != "cache_threshold":
                started[i] = True
                put(role_chunk(i))
            put(heads[i] + b',"delta":{"content":[' + _IMAGE_PART + b']},"logprobs":null,"finish_reason":null}],'
                b'"usage":null,"modality":"image"}\n\n')
    for seq in seqs:
        i = seq.index
        if i in cut:                         # vLLM's abort output: no new tokens, finish_reason "abort"
            if not started[i]:               # (the request's first output: the role chunks first)
                start_all()
            frame.rewind(i, seq.completion_tokens)      # a chunk rendered ahead and not sent: uncounted
            # its delta: ChatStreamProcessor.step of no text after tokens, without a parser
            # DeltaMessage(content=""); after none (or a parser's None) DeltaMessage()
            # (its text: what a stop string's holdback kept, flushed by the final output)
            delta = (b'{"content":' + dumps(seq.flushed) + b'}' if seq.completion_tokens and not parser
                     and not seq.tool_calls else b"{}")
            if seq.tool_calls and seq.flushed:      # a named call's arguments held back
                c = len(seq.tool_calls) - 1
                delta = dumps(tool_delta(style, call_entries(style, seq.tool_calls[c], c, seq.flushed, False)))
            put(heads[i] + b',"delta":' + delta + b',"logprobs":' + (b'{"content":[]}' if want_logprobs else b"null") +
                finish_fields(req, seq) + token_ids_field([] if token_ids else None) + fin_weights(seq) +
                (b'}]' + tail(0, i) if continuous else last_close))
            continue
        if lasts[i] >= 0:                    # its last token's chunk closed it
            continue
        if not started[i] and seq.finish_reason != "cache_threshold":
            put(role_chunk(i))
        put(heads[i] + b',"delta":{},"logprobs":null' + finish_fields(req, seq) +
            token_ids_field([] if token_ids else None) + fin_weights(seq) +
            (b'}]' + tail(0, i) if continuous else last_close))
    if include_usage:
        details = {"reasoning_tokens": reasoning_tokens(seqs)} if parser else None
        put(frame.usage_chunk(request_usage(seqs, pd, details, final_chunk=True, mm=mm),
                              per_request_metrics(sim, seqs, True, spec=True), fingerprint))
    put(b"data: [DONE]\n\n")
    yield b"".join(out)

