"""Tokenization-only endpoints: ``POST /v1/completions/render``, ``POST /v1/chat/completions/render``
(api.md 5.8), and vLLM's ``POST /tokenize`` / ``POST /detokenize``.

Render: no queue, no latency, no failure injection, request headers ignored; ``model``, the
prompt / messages, vLLM 0.34's multimodal options, (chat) the ChatCompletionRequest validators
and (every render) what its SamplingParams refuses are checked.  Completions render always answers a JSON array (one
``{"token_ids"}`` per prompt; token-id prompts copied verbatim); chat render answers one
``{"token_ids", "features"?}`` object whose ``features`` (synthetic multimodal hashes,
placeholders and kwargs) appear only when a message has media blocks.  A LoRA model is a 400.
Tokenize answers vLLM's ``{"count", "max_model_len", "tokens", "token_strs"}``; detokenize
``{"prompt"}`` (simulated ids are hashes: unknown ids come back as decimals).
"""
from __future__ import annotations

from time import perf_counter

from flask import Blueprint
from werkzeug.exceptions import NotFound

from generation.adapters.base import check_work, tokenize_texts
from generation.adapters.derender import (check_chat_derender_work, check_derender_bounds, check_prompt_token_ids,
                                          derender_completion)
from generation.adapters.fields import (_RANGED, EMPTY_PROMPT, check_chat_part_types, check_mm_kwargs, check_prompt_count, check_prompts_given,
                                        check_render_beam_search, check_render_sampling, render_stop)
from generation.adapters.generate import derender_chat, has_parser
from generation.adapters.protocol import LOGPROBS_INCLUDE
from generation.adapters.request_validators import chat_request_validators
from generation.adapters.response_bodies import chat_response, completion_response, generate_request
from generation.adapters.responses import (check_custom_tool_format, check_tool_usage, continued,
                                          generation_prompt_kwargs, to_chat_messages, to_chat_tools)
from generation.adapters.sampling import responses_effort, template_kwargs
from generation.engine.outputs import prompt_too_long
from generation.errors import APIError, InvalidParam, Rejected
from generation.structured.numeric import is_int
from generation.tokenization.chat_template import effort_kwargs
from generation.tokenization.multimodal import media_items, mm_features
from generation.tokenization.tokenizer import OFFLOAD_CHARS, chat_options, off_hub
from schemas.common import load, required_refusal
from schemas.derender import bad_field, check_completion_request, check_generate_response, check_token_list
from schemas.lax import mm_payload
from schemas.render import chat_render_schema, completion_render_schema, detokenize_schema, tokenize_schema
from schemas.responses import responses_request_schema

from .common import dumps_json, json_response, parse_json_body, request_id, response_headers, simulator
from .render_fields import _plain, _scalar, body_sampling, chat_parse_fields, generate_fields

bp = Blueprint("render", __name__)
# vLLM 0.34's scale-out render / derender routes (scale_out/factories.py): registered for a
# generation model only ("generate" in its tasks), so a pooling model answers them 404, where
# /tokenize, /detokenize and /tokenizer_info (serve/tokenize) are every model's
scale_out = Blueprint("render_scale_out", __name__)

def _check_mm_kwargs(sim, body) -> None:
    """vLLM 0.34's renderer refuses per-request multimodal kwargs without
    ``--trust-request-mm-kwargs`` (``preprocess_chat`` / ``preprocess_cmpl``)."""
    if body.mm_processor_kwargs or body.media_io_kwargs:
        check_mm_kwargs(sim, body.mm_processor_kwargs, body.media_io_kwargs)


def _render_model(sim, model) -> str:
    """The served name; raises ModelNotFound for a model not served, InvalidParam for a LoRA
    adapter (api.md 5.8)."""
    name, lora = sim.resolve_model(model)
    if lora is not None:
        raise InvalidParam(f"The model `{name}` is a LoRA adapter and is not supported by the render endpoints.",
                           "model")
    return name


@scale_out.post("/v1/completions/render")
def render_completion():
    sim = simulator()
    raw = parse_json_body()
    body = load(completion_render_schema, raw)
    prompt = body.prompt
    if prompt is None:              # vLLM's validate_prompt_and_prompt_embeds (completion/protocol.py:612)
        raise Rejected(EMPTY_PROMPT, "prompt")
    kind, items = prompt
    check_prompt_count(len(items))        # vLLM's CompletionRequest validator (a flat id list is one)
    model = _render_model(sim, body.model)
    check_render_beam_search(raw)           # render_completion_request, before rendering
    check_prompts_given(len(items))         # vLLM's renderer, after the model check
    started = perf_counter()
    _check_mm_kwargs(sim, body)
    body_rid = getattr(body, "request_id", None) or raw.get("request_id")
    rid = request_id(sim, body_rid if isinstance(body_rid, str) else None)
    lists = items if kind == "ids" else [ids for ids, _ in tokenize_texts(sim, items)]
    _check_render_work(sim, raw, model, lists)
    sim.metrics.rendered("completion", perf_counter() - started)     # vLLM's OnlineRenderer.render_completion
    # vLLM's render_completion_request: cmpl-<id>, and -<i> only when there are several prompts
    fields = [generate_fields(sim, raw, f"cmpl-{rid}" if len(lists) == 1 else f"cmpl-{rid}-{i}", model, len(ids), False)
              for i, ids in enumerate(lists)]
    # then each prompt's SamplingParams (to_sampling_params with its max_tokens), in prompt order:
    # the first judges everything, the others only what their max_tokens changes (once per value)
    check_render_sampling(raw, fields[0]["sampling_params"]["max_tokens"], render_stop(raw.get("stop")), raw.get("n"))
    for mt in dict.fromkeys(f["sampling_params"]["max_tokens"] for f in fields[1:]):
        check_render_sampling(raw, mt)
    out = [generate_request(token_ids=ids, **f) for ids, f in zip(lists, fields)]
    return json_response(out, headers=response_headers(rid))


def _check_render_work(sim, raw: dict, model: str, lists: list) -> None:
    """``--max-request-work`` on a completions render: every prompt's answer repeats the
    request's sampling fields (``stop``, ``logit_bias``, ...), so its size is the token ids plus
    the prompts times one prompt's other fields, counted in the budget's 64-byte entries.  vLLM
    has no such cap (its render copies the sampling params per prompt too).  1,000,000 one-letter
    prompts (4 MB) answered 473 MB after 6.7 s on the hub and 1.4 GB, which vLLM's 1,024-prompt
    limit now refuses first; 1,024 prompts still repeat a 3 MB ``stop`` list into a 3 GB answer
    without this.  Raises InvalidParam naming ``prompt``."""
    one = len(dumps_json(generate_fields(sim, raw, "cmpl-" + "0" * 34, model, 0, False)))   # client values: past 255 levels too
    entries = -(-one // 64)
    check_work(sim, sum(map(len, lists)) + len(lists) * entries,
               f"token ids + prompts x {entries} (the sampling fields each repeats, in 64-byte entries)", "prompt")


@scale_out.post("/v1/chat/completions/render")
def render_chat():
    raw = parse_json_body()
    chat_request_validators(raw)    # vLLM reads a ChatCompletionRequest: its validators first, as /v1/chat/completions
    out, rid = chat_render(simulator(), raw)
    return json_response(out, headers=response_headers(rid))


def chat_render(sim, raw: dict) -> tuple[dict, str]:
    """``POST /v1/chat/completions/render`` of a JSON body: ``(answer, request id)``; also the
    render of Cohere's ``/cohere/v2/chat/render``, whose request becomes such a body."""
    body = load(chat_render_schema, raw)
    messages = body.messages
    if not messages:
        raise InvalidParam("messages must not be empty", "messages")
    model = _render_model(sim, body.model)
    check_render_beam_search(raw)           # render_chat_request, before rendering
    started = perf_counter()
    _check_mm_kwargs(sim, body)
    rid = request_id()
    opts = chat_options(body, sim.config.default_chat_template_kwargs, effort=True,
                        effort_map=sim.config.reasoning_effort_map)
    check_chat_part_types(messages)
    render = getattr(sim.tokenizer, "render_chat", None)      # --render-url: upstream features
    if render is not None:
        sim.check_request_chat_template(opts)
        if opts["continue_final_message"] and opts["add_generation_prompt"]:
            sim.tokenize_messages(messages, **opts)                  # raises vLLM's 400
        ids, _, features = render(messages, **opts)
    else:
        ids, _ = sim.tokenize_messages(messages, **opts)
        features = mm_features(media_items(messages), len(ids)) if sim.tokenizer.name == "simulated" else None
    sim.metrics.rendered("chat", perf_counter() - started)      # vLLM's OnlineRenderer.render_chat
    out = {"token_ids": ids}
    if features is not None:
        if mm_payload(raw) == "none":       # vLLM 0.34's extract_mm_features: no processed tensors
            features = {**features, "kwargs_data": None}
        out["features"] = features
    out.update(generate_fields(sim, raw, f"chatcmpl-{rid}", model, len(ids), True))
    check_render_sampling(raw, out["sampling_params"]["max_tokens"], render_stop(raw.get("stop")), raw.get("n"))
    fields = chat_parse_fields(sim, raw, messages)
    so = fields.pop("structured_outputs", None)
    if so is not None:
        out["sampling_params"]["structured_outputs"] = so
    out.update(fields)
    return generate_request(**out), rid


@scale_out.post("/v1/chat/completions/derender")
def derender_chat_completion():
    """vLLM 0.34's ``POST /v1/chat/completions/derender`` (``scale_out/derender/serving.py``
    ``derender_chat_response``, non-streaming): a tokens-level ``/inference/v1/generate`` answer
    (``generate_response``) turned into the chat completion the coupled route gives, read with
    the ``chat_request`` (its ``logprobs`` / ``top_logprobs`` / ``return_tokens_as_token_ids``);
    usage from ``prompt_tokens`` (else the response's) and the choices' token counts.  The
    response's shape, vLLM's derender bounds and ``--max-request-work``
    (:func:`~generation.adapters.derender.check_chat_derender_work`) are checked before anything is decoded."""
    sim = simulator()
    raw = parse_json_body()
    model = raw.get("model")
    if model is not None:
        if not isinstance(model, str):      # DerenderChatRequest: str | None, as on /v1/completions/derender
            raise bad_field("model", "Input should be a valid string.")
        sim.resolve_model(model)
    gen = raw.get("generate_response")
    check_generate_response(gen, "generate_response")
    seeds = raw.get("prompt_token_ids")
    check_token_list(seeds, "prompt_token_ids")
    check_derender_bounds(sim, [gen], "generate_response")        # vLLM's, before anything is decoded
    check_prompt_token_ids(sim, [seeds], "prompt_token_ids")
    chat = raw.get("chat_request")
    if chat is None and has_parser(sim):
        raise InvalidParam("chat_request is required when a tool or reasoning parser is configured because plain "
                           "detokenization would leak raw parser markup into content.", "chat_request")
    chat = chat if isinstance(chat, dict) else {}
    override = chat.get("return_tokens_as_token_ids")
    as_ids = override if isinstance(override, bool) else bool(sim.config.return_tokens_as_token_ids)
    tokens = sum(len(c.get("token_ids") or ()) for c in gen["choices"])
    check_chat_derender_work(sim, tokens, chat)
    if tokens > OFFLOAD_CHARS:        # decoded token by token: a long answer in the tokenizer's thread
        choices = off_hub(derender_chat, sim.tokenizer, gen, chat, as_ids)
    else:
        choices = derender_chat(sim.tokenizer, gen, chat, as_ids)
    usage = gen.get("usage") if isinstance(gen.get("usage"), dict) else {}
    prompt = raw.get("prompt_tokens")
    if not isinstance(prompt, int) or isinstance(prompt, bool):
        prompt = usage.get("prompt_tokens") if isinstance(usage.get("prompt_tokens"), int) else 0
    completion = sum(len(c.get("token_ids") or ()) for c in gen["choices"])
    rid = gen.get("request_id") if isinstance(gen.get("request_id"), str) else f"chatcmpl-{request_id()}"
    return json_response(chat_response(id=rid, model=model or sim.config.served_names[0], choices=choices,
                                       usage={"prompt_tokens": prompt, "total_tokens": prompt + completion,
                                              "completion_tokens": completion},
                                       prompt_token_ids=(gen.get("prompt_token_ids") if chat.get("return_token_ids") is True
                                                         else None),
                                       kv_transfer_params=gen.get("kv_transfer_params"), metrics=gen.get("metrics")))


# ---- /v1/completions/derender ------------------------------------------------------------------

STREAM_DERENDER = ("Streaming derender (stream=true: one generate_chunk and its stream_state per call) is not "
                   "simulated; send the complete generate_responses with stream false.")


@scale_out.post("/v1/completions/derender")
def derender_completion_route():
    """vLLM 0.34's ``POST /v1/completions/derender`` (``scale_out/derender/serving.py``
    ``derender_completion_response``, non-streaming; :mod:`generation.adapters.derender`): the
    tokens-level ``/inference/v1/generate`` answers of a completions render's prompts
    (``generate_responses``, with the optional ``completion_request``, ``prompt_tokens`` and
    ``prompt_token_ids``, one entry per response) as one ``text_completion``: ``id`` the first
    response's ``request_id``, choices in order, usage summed, ``kv_transfer_params`` the
    responses' when they all agree (else null), ``metrics`` the response's when there is one."""
    sim = simulator()
    raw = parse_json_body()
    stream = raw.get("stream")
    if stream is True:
        raise InvalidParam(STREAM_DERENDER, "stream")
    if stream not in (None, False):
        raise bad_field("stream", "Input should be a valid boolean.")
    model = raw.get("model")
    if model is not None and not isinstance(model, str):
        raise bad_field("model", "Input should be a valid string.")
    gens = raw.get("generate_responses")
    if not isinstance(gens, list):
        raise bad_field("generate_responses", "Field required (a list of GenerateResponse objects).")
    for k, gen in enumerate(gens):
        check_generate_response(gen, f"generate_responses[{k}]")
    counts = raw.get("prompt_tokens")
    if counts is not None and (not isinstance(counts, list) or not all(is_int(t) for t in counts)):
        raise bad_field("prompt_tokens", "Input should be a list of integers.")
    seeds = raw.get("prompt_token_ids")
    if seeds is not None:
        if not isinstance(seeds, list):
            raise bad_field("prompt_token_ids", "Input should be a list of token id lists (or nulls).")
        for k, ids in enumerate(seeds):
            check_token_list(ids, f"prompt_token_ids[{k}]")
    cr = check_completion_request(raw.get("completion_request"))
    # DerenderCompletionRequest._validate_prompt_tokens_length
    for key, given in (("prompt_tokens", counts), ("prompt_token_ids", seeds)):
        if given is not None and len(given) != len(gens):
            raise InvalidParam(f"{key} length ({len(given)}) must equal generate_responses length ({len(gens)})", key)
    if model is not None:
        sim.resolve_model(model)
    if not gens:
        raise InvalidParam("generate_responses must not be empty", "generate_responses")
    check_derender_bounds(sim, gens)
    if seeds is not None:
        check_prompt_token_ids(sim, seeds, "prompt_token_ids")
    override = cr.get("return_tokens_as_token_ids")
    as_ids = override if isinstance(override, bool) else bool(sim.config.return_tokens_as_token_ids)
    tokens = sum(len(c.get("token_ids") or ()) for g in gens for c in g["choices"])
    with_lp = any(c.get("logprobs") is not None for g in gens for c in g["choices"])
    top = cr.get("logprobs") if is_int(cr.get("logprobs")) and cr["logprobs"] >= 0 else sim.config.max_logprobs
    per = 1 + max(top, 0) if with_lp else 1
    check_work(sim, tokens * per, "generate_responses' token ids" + (" x (1 + logprobs)" if with_lp else ""),
               "generate_responses")
    if tokens > OFFLOAD_CHARS:        # decoded token by token: a long answer in the tokenizer's thread
        choices, prompt, completion = off_hub(derender_completion, sim, gens, counts, cr, as_ids)
    else:
        choices, prompt, completion = derender_completion(sim, gens, counts, cr, as_ids)
    first = gens[0]
    kv = first.get("kv_transfer_params")
    if any(g.get("kv_transfer_params") != kv for g in gens[1:]):
        kv = None                      # vLLM: differing params across the responses -> none
    rid = first.get("request_id") if isinstance(first.get("request_id"), str) else request_id()
    return json_response(completion_response(
        id=rid, model=model or sim.config.served_names[0], choices=choices,
        usage={"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion,
               "completion_tokens_details": None},
        kv_transfer_params=kv, metrics=first.get("metrics") if len(gens) == 1 else None))   # one prompt's only


# ---- /v1/responses/render -----------------------------------------------------------------------

# vLLM's ResponsesRequest.to_sampling_params: the request's values of these SamplingParams fields
_RESPONSES_SAMPLING = ("temperature", "top_p", "top_k", "min_p", "seed", "stop", "stop_token_ids", "ignore_eos",
                       "presence_penalty", "frequency_penalty", "repetition_penalty", "skip_special_tokens",
                       "spaces_between_special_tokens", "logit_bias")


def responses_sampling_params(raw: dict, max_tokens: int) -> dict:
    """``ResponsesRequest.to_sampling_params`` as a render reports it: the body's sampling
    fields over vLLM's defaults (unchecked, as the other renders), ``n`` 1, ``max_tokens`` the
    computed one, ``logprobs`` ``top_logprobs`` when ``include`` asks for output logprobs, and
    ``structured_outputs`` from ``text.format`` (a JSON schema, or a JSON object) or the
    body's own.  Raises Rejected for both at once (vLLM's ``extract_structured_outputs``)."""
    sp = body_sampling(raw, _RESPONSES_SAMPLING)
    sp["max_tokens"] = max_tokens
    if raw.get("stop") == "":           # ``self.stop if self.stop else []``
        sp["stop"] = []
    include = raw.get("include")
    top = raw.get("top_logprobs")
    if isinstance(include, list) and LOGPROBS_INCLUDE in include:
        sp["logprobs"] = top if _scalar(top) else 0
    fmt = (raw.get("text") or {}).get("format") if isinstance(raw.get("text"), dict) else None
    so = raw.get("structured_outputs")
    if isinstance(fmt, dict) and so is not None:
        raise Rejected("Cannot specify both structured_outputs and text.format", "structured_outputs")
    if isinstance(so, dict) and _plain(so):
        sp["structured_outputs"] = so
    elif isinstance(fmt, dict) and fmt.get("type") == "json_object":
        sp["structured_outputs"] = {"json_object": True}
    elif isinstance(fmt, dict) and fmt.get("type") == "json_schema" and isinstance(fmt.get("schema"), dict):
        sp["structured_outputs"] = {"json": fmt["schema"]}
    return sp


@scale_out.post("/v1/responses/render")
def render_responses():
    """vLLM 0.34's ``POST /v1/responses/render`` (``scale_out/render/serving.py``
    ``render_responses_request``): a Responses request's prompt as vLLM's ``GenerateRequest``,
    built as ``POST /v1/responses`` builds it (``instructions`` as the system message, the input
    items as chat messages, function tools given to the template): ``token_ids``, ``features``
    (media only, as chat render), ``request_id`` (the body's, else ``resp_<id>``), ``model``,
    ``sampling_params`` (:func:`responses_sampling_params`; ``max_tokens`` the room left in the
    context, at most ``max_output_tokens``), ``stream``, ``reasoning_parser_kwargs`` (with a
    reasoning parser), ``cache_salt``, ``priority``, ``kv_transfer_params`` and
    ``ec_transfer_params``.  ``truncation: "auto"`` keeps the prompt's last ``--max-model-len``
    - 1 tokens; otherwise a longer prompt is vLLM's 400.  ``previous_response_id`` is vLLM's 400
    (a render is stateless), a LoRA model the renders' 400."""
    sim = simulator()
    raw = parse_json_body()
    body = load(responses_request_schema, raw)
    # ResponsesRequest's request validators, as on /v1/responses
    check_tool_usage(body.tools, body.tool_choice)
    check_custom_tool_format(body.tools)
    if body.prompt is not None:                             # validate_prompt
        raise Rejected("prompt template is not supported", "prompt")
    if body.background and body.store is False:            # ResponsesRequest.validate_background
        raise Rejected("background can only be used when `store` is true", "background")
    model = _render_model(sim, body.model)
    if body.previous_response_id is not None:
        raise APIError("previous_response_id is not supported by the stateless render endpoint.", 400,
                       "previous_response_id", "invalid_request_error")
    _check_mm_kwargs(sim, body)
    messages = [{"role": "system", "content": body.instructions}] if body.instructions else []
    messages += to_chat_messages(body.input)
    tools = to_chat_tools(body.tools)
    render = getattr(sim.tokenizer, "render_chat", None)      # --render-url: upstream features
    features = None
    # vLLM's render_responses: ResponsesRequest.build_chat_params lays reasoning.effort over them
    effort = responses_effort(raw.get("reasoning"), sim.config.reasoning_effort_map)     # build_chat_params' map
    kwargs = template_kwargs(sim, effort_kwargs(raw.get("chat_template_kwargs"), effort))
    gen = generation_prompt_kwargs(body.input)       # and the generation prompt's switches
    messages = continued(messages, gen)
    if render is not None:
        ids, _, features = render(messages, tools=tools, chat_template_kwargs=kwargs, **gen)
    else:
        ids, _ = sim.tokenize_messages(messages, bounded="input", tools=tools, chat_template_kwargs=kwargs, **gen)
    own = raw.get("chat_template_kwargs")
    reported = template_kwargs(sim, effort_kwargs({**(own if isinstance(own, dict) else {}), **gen}, effort))
    max_len = sim.config.max_model_len
    if body.truncation == "auto" and len(ids) > max_len - 1:
        ids = ids[len(ids) - max(max_len - 1, 0):]             # left truncation, a token kept for output
    elif len(ids) > max_len:
        raise prompt_too_long(max_len, len(ids))
    if render is None and sim.tokenizer.name == "simulated":  # placeholders within the ids sent
        features = mm_features(media_items(messages), len(ids))
    if not ids:
        raise InvalidParam("No token_ids rendered", "input")
    max_tokens = max_len - len(ids)
    if body.max_output_tokens is not None:
        max_tokens = min(body.max_output_tokens, max_tokens)
    # to_sampling_params' SamplingParams (no n, no min_tokens there; stop "" is none)
    check_render_sampling({k: raw.get(k) for k in _RANGED}, max_tokens, body.stop)
    rid = body.request_id if body.request_id else f"resp_{request_id()}"
    out = {"token_ids": ids}
    if features is not None:
        if mm_payload(raw) == "none":
            features = {**features, "kwargs_data": None}
        out["features"] = features
    ec = raw.get("ec_transfer_params") if isinstance(raw.get("ec_transfer_params"), dict) else None
    out.update({"request_id": rid, "model": model, "sampling_params": responses_sampling_params(raw, max_tokens),
                "stream": raw.get("stream") is True,
                "reasoning_parser_kwargs": {"chat_template_kwargs": reported} if sim.config.reasoning_parser else None,
                "cache_salt": raw.get("cache_salt") if isinstance(raw.get("cache_salt"), str) else None,
                "priority": body.priority or 0,
                "kv_transfer_params": body.kv_transfer_params or None,      # hoisted from extra_args: {} is none
                "ec_transfer_params": ec or None})
    return json_response(out, headers=response_headers(rid))


def _check_optional_model(sim, model) -> None:
    """vLLM checks ``model`` on tokenize/detokenize only when one is given."""
    if model is not None:
        sim.resolve_model(model)


@bp.get("/tokenizer_info")
def tokenizer_info():
    """vLLM's ``GET /tokenizer_info`` (with ``--enable-tokenizer-info-endpoint``, else 404): the
    tokenizer's configuration (a Hugging Face tokenizer's ``init_kwargs``, JSON-safe), its
    ``tokenizer_class`` and the chat template in use."""
    sim = simulator()
    if not sim.config.enable_tokenizer_info_endpoint:
        raise NotFound()
    return json_response(sim.tokenizer.info(sim.config.max_model_len))


@bp.post("/tokenize")
def tokenize():
    sim = simulator()
    raw = parse_json_body(members=2)        # TokenizeRequest: a union of 2 (serve/tokenize/protocol.py:183)
    body = load(tokenize_schema, raw)
    prompt = body.prompt
    messages = body.messages
    if prompt and messages is not None:
        raise InvalidParam("both prompt and messages fields in tokenize request", "messages")
    if prompt is None and messages is None:
        # pydantic's missing prompt (TokenizeCompletionRequest) or messages null (TokenizeChatRequest)
        raise required_refusal(tokenize_schema, raw) or InvalidParam("Either prompt or messages is required", "prompt")
    _check_optional_model(sim, body.model)
    _check_mm_kwargs(sim, body)
    if prompt is not None and (prompt or messages is None):
        ids, pieces = sim.tokenize_text(prompt, body.add_special_tokens is not False)
    else:
        check_chat_part_types(messages)
        ids, pieces = sim.tokenize_messages(messages, **chat_options(body, sim.config.default_chat_template_kwargs))
    strs = None
    if body.return_token_strs:       # vLLM: the vocabulary strings (convert_ids_to_tokens)
        strs = sim.tokenizer.token_strs(ids) if sim.tokenizer.name == "hf" else list(pieces)
    return json_response({"count": len(ids), "max_model_len": sim.config.max_model_len, "tokens": ids,
                          "token_strs": strs})


@bp.post("/detokenize")
def detokenize():
    sim = simulator()
    body = load(detokenize_schema, parse_json_body())
    tokens = body.tokens
    if tokens is None:
        raise InvalidParam("tokens: Field required.", "tokens")
    _check_optional_model(sim, body.model)
    # vLLM bounds no detokenize; a long list (a 4 MiB body holds 2 M ids: 1.5 s of the
    # simulated tokenizer's Python) is decoded in the tokenizer's worker thread, as long texts
    # are tokenized, so that the hub keeps its turns
    if len(tokens) > OFFLOAD_CHARS:
        return json_response({"prompt": off_hub(sim.tokenizer.decode_ids, tokens)})
    return json_response({"prompt": sim.tokenizer.decode_ids(tokens)})
