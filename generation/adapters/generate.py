"""vLLM's token-in / token-out generation (``POST /inference/v1/generate``, api.md 5.5).

The prompt is ``token_ids`` (never tokenized: prompt tokens = ``len(token_ids)``); the
answer is token ids.  Non-streaming: ``request_id``, ``choices`` (``index``,
``finish_reason``, ``token_ids``), ``usage``, ``ec_transfer_params`` and, with
``do_remote_decode``, ``kv_transfer_params``.  Streaming: one chunk per token, the last
token chunk of a choice carrying its finish reason; an optional usage chunk with
``choices: []``; then ``data: [DONE]``.

Logprobs (``sampling_params.logprobs``) of the tokens level are vLLM's ``GenerateLogProbs``
(integer ``token_id``s, :func:`token_logprobs`).

vLLM's ``output_mode`` levels: ``tokens`` (the default, above), ``text`` (each choice also
carries its detokenized ``text``, a stream chunk its text delta) and ``derender`` (the parsed
assistant ``message``, a stream chunk a chat ``delta``: vLLM 0.34 streams it); both carry
``stop_reason`` and ``"output_mode"``, and their logprobs are chat logprobs with decoded tokens,
or ``token_id:N`` with ``--return-tokens-as-token-ids`` (in derender mode
``parse_context.return_tokens_as_token_ids`` decides when given).
"""
from __future__ import annotations

from generation.content import logprobs as lp
from ..errors import InvalidParam
from generation.engine.request import GenerationRequest, Prompt
from generation.engine.stream_interval import token_span
from generation.engine.weight_versions import spans as weight_spans
from .base import (EC_TRANSFER_DUMMY, REMOTE_DECODE_PARAMS, Adapter, check_kv_transfer, check_limits, check_logprobs_cap,
                   check_logprobs_sign, check_size, check_work, dumps, request_usage, stream_flags, usage_details)
from .fields import (check_bad_words, check_bad_words_tokens, check_cache_salt, check_min_tokens,
                     check_sampling_ranges, check_prompt_ids, check_seed, check_stop_token_ids, prompt_vocab_size, request_stream_interval,
                     scheduling_priority, vocab_size)
from .prompt_scores import check_prompt_scores, prompt_fields
from .request_metrics import TIMING, spec_decoding
from .token_stream import Streamed, end_aborted, rendered_choices
from .protocol import GenerateRequest, SamplingParams
from .response_bodies import (chat_choice, chat_message, generate_derender_choice, generate_response,
                             generate_text_choice)
from .sampling import EFFORTS, chat_reasoning, sampling_semantics, structured_constraint

# mm-encoder-only: what the encoder pod reports per multimodal hash (api.md 5.1.10).


def engine_request_id(req) -> str:
    """The answer's ``request_id``: vLLM's ``generate-tokens-<id>`` (``serve_tokens``), the id
    ``abort_requests`` knows the request by (:attr:`GenerateAdapter.external_id_format`)."""
    return req.external_ids[0] if req.external_ids else req.request_id


class GenerateAdapter(Adapter):
    cache_threshold_header = False
    external_id_format = "generate-tokens-{rid}"     # token_in_token_out/serving.py's request_id
    body: GenerateRequest

    def build(self, rid: str, force_cache_threshold: bool) -> GenerationRequest:
        sim, b = self.sim, self.body
        model, lora = sim.resolve_model(b.model)
        ids = b.token_ids
        if ids is None:
            raise InvalidParam("Missing input token_ids", "token_ids")
        sp = b.sampling_params
        if sp is None:                  # vLLM: SamplingParams() (its max_tokens defaulted below)
            sp = b.sampling_params = SamplingParams()
        max_tokens = sp.max_tokens
        if max_tokens is None:          # vLLM: the room left in the context window
            max_tokens = max(sim.config.max_model_len - len(ids), 1)
        ignore_eos = bool(b.ignore_eos or sp.ignore_eos)
        check_logprobs_sign(sp.logprobs, "logprobs")
        check_logprobs_cap(sim, sp.logprobs, "logprobs")
        check_logprobs_sign(sp.prompt_logprobs, "prompt_logprobs")
        check_logprobs_cap(sim, sp.prompt_logprobs, "prompt_logprobs", "prompt")
        check_prompt_scores(sp, len(ids), bool(b.stream), sim.config.max_model_len, sim.config.max_logprobs,
                            vocab_size(sim))
        check_limits(max_tokens, ignore_eos, sp.n)
        if sp.stop and sim.config.tokens_only:    # vLLM 0.34 serving.py: detokenize is forced off after validation
            raise InvalidParam("stop strings are not supported on a --tokens-only server because detokenization is "
                               "disabled. Check stop strings on the coordinator, or use stop_token_ids.", "stop")
        if sp.stop and sp.detokenize is False:
            raise InvalidParam("stop strings are only supported when detokenize is True. "
                               "Set detokenize=True to use stop.", "stop")
        check_seed(sp.seed)
        check_bad_words(sp.bad_words, "sampling_params.bad_words")      # SamplingParams._verify_args
        check_min_tokens(sp.min_tokens, max_tokens)
        interval = request_stream_interval(sim, sp.stream_interval, "sampling_params.stream_interval", "sampling")
        check_sampling_ranges(sp)
        check_cache_salt(b.cache_salt)
        vocab = vocab_size(sim)
        check_stop_token_ids(sp.stop_token_ids, vocab)
        stream = bool(b.stream)
        kv = b.kv_transfer_params
        if kv is None and sp.extra_args is not None:   # where real vLLM clients put it
            kv = sp.extra_args.kv_transfer_params
        check_kv_transfer(kv, stream)
        mode = b.output_mode or "tokens"
        if mode != "tokens" and sim.config.tokens_only:
            raise InvalidParam(f"output_mode={mode!r} requires a tokenizer, but this server does not load one "
                               "(--tokens-only or --skip-tokenizer-init). Send the request to a server that loads a "
                               "tokenizer, or use output_mode='tokens'.", "output_mode")
        if mode == "derender":
            check_parse_context(sim, b.parse_context)
        if mode != "tokens" and sp.detokenize is False:
            raise InvalidParam(f"output_mode={mode!r} requires sampling_params.detokenize to be true", "output_mode")
        if sp.bad_words and not sim.config.tokens_only:     # update_from_tokenizer: only with a tokenizer
            check_bad_words_tokens(sim.tokenizer, sp.bad_words)
        n = sp.n or 1
        check_size(sim, n, False)
        if sp.max_tokens is not None:
            check_work(sim, *self._work(n * min(sp.max_tokens, sim.config.max_model_len)))
        prompt = Prompt(list(ids))
        check_prompt_ids([prompt], prompt_vocab_size(sim))
        if sim.config.mode == "echo":
            prompt.echo_ids, prompt.echo_pieces = list(ids), sim.tokenizer.id_pieces(ids)
        self.req = GenerationRequest(
            request_id=rid, model=model, lora=lora, prompts=[prompt], n=n, max_tokens=max_tokens,
            min_tokens=sp.min_tokens or 0, ignore_eos=ignore_eos, stream=stream, stop=sp.stop, kv_transfer_params=kv,
            priority=scheduling_priority(sim, b.priority), response_format=structured_constraint(sim, sp.structured_outputs),
            reasoning=render_reasoning(sim, b), cache_salt=b.cache_salt,
            stream_interval=interval, **sampling_semantics(sp))
        return self.req

    def _work(self, tokens: int) -> tuple[int, str, str]:
        top = self.body.sampling_params.logprobs or 0
        param = "sampling_params.n" if (self.body.sampling_params.n or 1) > 1 else "sampling_params.max_tokens"
        return tokens * (1 + top), "n x max_tokens" + (" x (1 + logprobs)" if top else ""), param

    def work(self, seqs) -> tuple[int, str, str]:
        return self._work(sum(s.completion_tokens for s in seqs))

    def _as_ids(self) -> bool:
        """Logprob tokens as ``token_id:N`` in the text levels: the server flag, or in derender
        mode the render's ``parse_context.return_tokens_as_token_ids`` when it says."""
        b = self.body
        if b.output_mode == "derender" and isinstance(b.parse_context, dict):
            override = b.parse_context.get("return_tokens_as_token_ids")
            if isinstance(override, bool):
                return override
        return bool(self.sim.config.return_tokens_as_token_ids)

    def render(self, seqs) -> dict:
        out = render_generate(self.req, seqs, ec_transfer_params(self.sim.config, self.body.features),
                              self.body.sampling_params.logprobs, usage_details(self.sim))
        sp = self.body.sampling_params
        if sp.prompt_logprobs is not None or sp.prompt_logprob_token_ids is not None:
            out.update(prompt_fields(self.sim.tokenizer, sp, self.body.token_ids))
        mode = self.body.output_mode or "tokens"
        metrics = _spec_metrics(seqs)
        if metrics is not None:                 # --per-request-spec-decode-metrics
            out["metrics"] = metrics
        if mode != "tokens":        # vLLM 0.34's GenerateText/DerenderResponse, dumped whole (the tokens level
            # keeps the project's compact shape: id, object; see the README)
            del out["id"], out["object"]
            out["usage"].setdefault("completion_tokens_details", None)
            out["choices"] = [text_choice(s, mode, self.body.sampling_params.logprobs, self._as_ids(),
                                          self.sim.weight_version) for s in seqs]
            out = generate_response(output_mode=mode, **out)
        elif self.sim.config.return_sampling_mask:
            size, vocab = support_size(sp), vocab_size(self.sim)
            processed = self.sim.config.logprobs_mode.startswith("processed")
            for c, s in zip(out["choices"], seqs):
                c["sampling_mask"] = [sampling_mask(t, size, vocab) for t in s.ids]
                if processed and sp.logprobs is not None:
                    c["logprobs"] = token_logprobs(s, sp.logprobs, support=size)
        return out

    def stream(self, seqs):
        # vLLM 0.34's generate stream reads stream_options alone: should_include_usage(
        # request.stream_options, False) (token_in_token_out/serving.py), whatever
        # --enable-force-include-usage says
        include_usage, continuous = stream_flags(self.body.stream_options)
        mode = self.body.output_mode or "tokens"
        if mode != "tokens":
            return stream_text(self.sim, self.req, seqs, include_usage, mode, self.body.sampling_params.logprobs,
                               self._as_ids(), continuous)
        return stream_generate(self.sim, self.req, seqs, include_usage, self.body.sampling_params.logprobs,
                               continuous)


def has_parser(sim) -> bool:
    """Whether the server runs a tool parser (``--tool-call-parser``, accepted) or a reasoning parser."""
    return bool(sim.config.reasoning_parser) or "tool-call-parser" in getattr(sim.config, "ignored_flags", ())


def check_parse_context(sim, ctx) -> None:
    """vLLM 0.34's derender checks (``serve_tokens``, ``ParseContext.to_chat_request``): a server
    with a parser needs the render's ``parse_context``; a named ``tool_choice`` must name one
    of its ``tools``.  Raises InvalidParam."""
    if ctx is None:
        if has_parser(sim):
            raise InvalidParam("output_mode='derender' requires parse_context on a server with a tool or reasoning "
                               "parser. Use the one returned by /render.", "parse_context")
        return
    choice = ctx.get("tool_choice")
    if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        name = choice["function"].get("name")
        tools = ctx.get("tools") if isinstance(ctx.get("tools"), list) else []
        if not any(isinstance(t, dict) and isinstance(t.get("function"), dict) and t["function"].get("name") == name
                   for t in tools):
            raise InvalidParam("The tool specified in `tool_choice` does not match any of the specified `tools`",
                               "tool_choice")


def render_reasoning(sim, b):
    """The reasoning of a generate request that a chat render produced: none once the render
    says ``reasoning_ended`` (or gave no ``reasoning_parser_kwargs``), else what chat would do
    with those chat template kwargs, so that the same prompt gives chat's tokens (vLLM 0.34
    forwards both to the engine, whose parser gates structured output on them)."""
    kw = b.reasoning_parser_kwargs
    if b.reasoning_ended or not isinstance(kw, dict):
        return None
    from types import SimpleNamespace
    ctk = kw.get("chat_template_kwargs") if isinstance(kw.get("chat_template_kwargs"), dict) else {}
    # a chat render's kwargs carry the request's reasoning_effort (build_chat_params): the
    # parser is built with it, and chat scales its reasoning by it
    effort = ctk.get("reasoning_effort") if ctk.get("reasoning_effort") in EFFORTS else None
    return chat_reasoning(sim, SimpleNamespace(chat_template_kwargs=ctk, reasoning_effort=effort))


def ec_transfer_params(cfg, features) -> dict | None:
    """In ``--mm-encoder-only`` mode, one dummy transfer entry per ``features.mm_hashes`` hash
    (all modalities); None otherwise."""
    if not cfg.mm_encoder_only or features is None:
        return None
    hashes = [h for hs in (features.mm_hashes or {}).values() for h in (hs or ())]
    return {h: dict(EC_TRANSFER_DUMMY) for h in hashes} or None


def token_logprobs(seq, top: int, start: int = 0, stop: int | None = None, support: int | None = None) -> dict:
    """vLLM's ``GenerateLogProbs`` for tokens ``start:stop`` of ``seq`` (the tokens level: integer
    ids, no tokenizer): per token ``{"token_id", "logprob", "rank", "top_logprobs"}``, whose
    ``top_logprobs`` are the engine's candidates, the sampled token first (rank 1, as a greedy
    pick), ``max(top, 1)`` of them (``logprobs: 0`` still returns the sampled one).  ``support``
    (processed logprobs with a sampling mask): candidates ranked past it are outside the mask
    and show -9999.0, as vLLM clamps their -inf."""
    ids = seq.ids[start:stop]
    out = [_generate_entry(lp.token_id_entry(t, start + i, max(top, 1)), t) for i, t in enumerate(ids)]
    if support is not None:
        for e in out:
            e["top_logprobs"] = [alt if alt["rank"] <= support else {**alt, "logprob": -9999.0}
                                 for alt in e["top_logprobs"]]
    return {"content": out}


def support_size(sp) -> int:
    """How many ids a token's sampling could pick, as the simulator models it: ``top_k`` when
    set, one when greedy (``temperature`` 0), else the candidates its logprobs show."""
    if sp.top_k is not None and sp.top_k > 0:
        return sp.top_k
    if sp.temperature == 0:
        return 1
    return max(sp.logprobs or 0, 1)


def sampling_mask(tid: int, size: int, vocab: int) -> list:
    """vLLM 0.34's ``sampling_mask`` entry of one output token (``--return-sampling-mask``): the
    ids in its sampling support, the sampled one first, then the ids its top logprobs name
    (the following ids), within the vocabulary."""
    return [tid] + [(tid + j) % vocab for j in range(1, min(size, vocab))]


def _generate_entry(entry: dict, tid: int) -> dict:
    """A ``token_id:N`` chat logprob entry as vLLM's ``GenerateLogProbsContent``."""
    return {"token_id": tid, "logprob": entry["logprob"], "rank": 1,
            "top_logprobs": [{"token_id": int(alt["token"][9:]), "logprob": alt["logprob"], "rank": r}
                             for r, alt in enumerate(entry["top_logprobs"], 1)]}


def render_generate(req: GenerationRequest, seqs, ec: dict | None, top: int | None = None,
                    details: str | None = None) -> dict:
    """The non-streaming body: api.md 5.5.2 plus ``usage`` and the ``id``/``model``/``object``
    fields the user's spec lists; a choice carries ``logprobs`` (vLLM's GenerateResponseChoice)
    only when ``sampling_params.logprobs`` (``top``) asked for them."""
    out = {}
    if req.remote_decode:
        out["kv_transfer_params"] = dict(REMOTE_DECODE_PARAMS)
    out.update({
        "id": engine_request_id(req), "object": "generate", "model": req.model, "request_id": engine_request_id(req),
        "choices": [{"index": s.index, "finish_reason": s.finish_reason, "token_ids": list(s.ids)} if top is None
                    else {"index": s.index, "logprobs": token_logprobs(s, top), "finish_reason": s.finish_reason,
                          "token_ids": list(s.ids)} for s in seqs],
        "usage": request_usage(seqs, details, api="completion"), "ec_transfer_params": ec})
    return out


def _spec_metrics(seqs, stream: bool = False):
    """vLLM's generate ``metrics`` of one choice: ``PerRequestMetrics(speculative_decoding=...)``
    when the sequence has a record (``--per-request-spec-decode-metrics``), its timing fields null
    (the generate route takes no timing flag); a stream's usage chunk as the bytes
    ``,"metrics":{...}`` (``exclude_none``), ``b""`` without; a body as the dict, or None."""
    sd = spec_decoding(seqs[0], stream) if len(seqs) == 1 else None
    if stream:
        return b',"metrics":' + dumps({"speculative_decoding": sd}) if sd is not None else b""
    return dict.fromkeys(TIMING) | {"speculative_decoding": sd} if sd is not None else None


def _stream_usage(sim, seqs) -> dict:
    """A stream's usage chunk (a choice cut by an abort counts the tokens it streamed, as vLLM's
    stream sums its outputs' token ids, ``num_generated_tokens``)."""
    return request_usage(seqs, usage_details(sim), api="completion", final_chunk=True)


def running_usage(made: list, seq, ids) -> bytes:
    """A generate stream chunk's ``usage`` with ``continuous_usage_stats``: the choice's prompt
    and the tokens it has streamed so far, ``ids`` (None: none) now added to ``made``."""
    made[seq.index] += len(ids or ())
    p, c = seq.prompt_len, made[seq.index]
    return dumps({"prompt_tokens": p, "total_tokens": p + c, "completion_tokens": c, "completion_tokens_details": None})


def stream_generate(sim, req: GenerationRequest, seqs, include_usage: bool, top: int | None = None,
                    continuous: bool = False):
    """SSE body of the default ``tokens`` level (api.md 5.5.3, case C32): per token a chunk with
    the choice's ``token_ids`` delta, a choice's last one with its ``finish_reason`` and
    ``stop_reason``; a choice with no tokens (cache_threshold, empty echo) gets one finishing
    chunk with ``token_ids`` null (cache_threshold) or ``[]``, as does a choice cut by
    abort_requests (``finish_reason: "abort"``); then the optional usage chunk and ``[DONE]``.

    Laid out as vLLM 0.34 dumps its GenerateTokensStreamResponse, as :func:`stream_text` does
    the text levels: ``request_id``, ``usage`` (null, or the choice's running usage with
    ``continuous_usage_stats``), ``output_mode``, ``choices``, each with ``index``,
    ``finish_reason``, ``stop_reason``, ``token_ids``, ``routed_experts``, ``sampling_mask``,
    ``weight_versions`` and ``logprobs`` (vLLM's ``GenerateLogProbs`` with ``logprobs``)."""
    head = b'data: {"request_id":' + dumps(engine_request_id(req)) + b',"usage":'
    mid = b',"output_mode":"tokens","choices":['
    nulls = b',"routed_experts":null,"sampling_mask":null,"weight_versions":null,"logprobs":'
    open_weights = b',"routed_experts":null,"sampling_mask":null,"weight_versions":'
    tail = b'}]}\n\n'
    # a choice's chunk up to its token ids, for the usual token (no running usage, not the last)
    plain = [head + b'null' + mid + b'{"index":' + str(s.index).encode() +
             b',"finish_reason":null,"stop_reason":null,"token_ids":' for s in seqs]
    sent = [0] * len(seqs)          # tokens each choice has streamed (all of them: finished)
    made = [0] * len(seqs)          # the running usage's completion tokens, by choice

    def chunk(seq, ids, finish, stop_reason, logprobs) -> bytes:
        i = seq.index
        if continuous:
            usage = running_usage(made, seq, ids)
        elif finish is None:
            return plain[i] + dumps(ids) + nulls + logprobs + tail
        else:
            usage = b"null"
        # a finished output carries its weight-version spans (vLLM: weight_versions if finished)
        rest = (nulls if finish is None else
                open_weights + dumps(weight_spans(seq, sim.weight_version)) + b',"logprobs":')
        return (head + usage + mid + b'{"index":' + str(i).encode() + b',"finish_reason":' + dumps(finish) +
                b',"stop_reason":' + dumps(stop_reason) + b',"token_ids":' + dumps(ids) + rest + logprobs + tail)

    def token(seq, k) -> bytes:
        a, b = token_span(k)            # one token, or a stream interval's group: one chunk
        sent[seq.index] = b
        done = b == len(seq.ids)
        return chunk(seq, seq.ids[a:b], seq.finish_reason if done else None, seq.stop_reason if done else None,
                     b"null" if top is None else dumps(token_logprobs(seq, top, a, b)))

    out = []
    streamed = Streamed(len(seqs))
    yield from rendered_choices(sim, seqs, token, out, streamed)
    cut = end_aborted(req, seqs, streamed)
    for seq in seqs:
        if seq.index in cut or not sent[seq.index]:
            if seq.index in cut:          # a chunk rendered ahead and not sent: uncounted
                made[seq.index] = seq.completion_tokens
            out.append(chunk(seq, None if seq.finish_reason == "cache_threshold" else [], seq.finish_reason,
                             seq.stop_reason, b"null"))
    if include_usage:
        out.append(head + dumps(_stream_usage(sim, seqs)) + _spec_metrics(seqs, True) + mid + b']}\n\n')
    out.append(b"data: [DONE]\n\n")
    yield b"".join(out)


# ---- the text levels (output_mode text / derender) ----------------------------------------------

def _text_logprobs(seq, top: int, as_ids: bool, start: int = 0, stop: int | None = None) -> dict:
    """Chat logprobs of tokens ``start:stop``: decoded tokens, or ``token_id:N`` (``as_ids``)."""
    stop = len(seq.ids) if stop is None else stop
    if as_ids:
        return {"content": [placeholder_entry(seq.ids[k], k, top) for k in range(start, stop)]}
    return lp.chat_logprobs(seq.logprob_pieces()[start:stop], top, start)


def placeholder_entry(tid: int, pos: int, top: int) -> dict:
    """A ``token_id:N`` chat logprob entry as the generate text levels and the derenderer write
    it: ``bytes`` null, for the token and its alternatives (vLLM 0.34 ``_logprob_token``
    without a tokenizer; coupled chat carries the placeholder's bytes)."""
    e = lp.token_id_entry(tid, pos, top)
    return {**e, "bytes": None, "top_logprobs": [{**alt, "bytes": None} for alt in e["top_logprobs"]]}


def derender_chat(tokenizer, gen: dict, chat: dict, as_ids: bool) -> list:
    """The choices of ``/v1/chat/completions/derender``: each tokens-level choice of the generate
    response ``gen`` as a chat choice (its ids decoded one by one into the message content; with
    the chat request's ``logprobs``, chat logprobs of ``top_logprobs`` alternatives, the values
    coupled chat gives the same tokens, ``token_id:N`` placeholders with ``as_ids``)."""
    out = []
    want = chat.get("logprobs") is True
    top = chat.get("top_logprobs") if isinstance(chat.get("top_logprobs"), int) else 0
    for k, c in enumerate(gen["choices"]):
        ids = c.get("token_ids") or []
        pieces = [tokenizer.decode_ids([t]) for t in ids]
        logprobs = None
        if want:
            logprobs = ({"content": [placeholder_entry(t, j, top) for j, t in enumerate(ids)]} if as_ids
                        else lp.chat_logprobs(pieces, top))
        out.append(chat_choice(index=c.get("index", k), message=chat_message("assistant", "".join(pieces)),
                               logprobs=logprobs, finish_reason=c.get("finish_reason"),
                               stop_reason=c.get("stop_reason")))
    return out


def text_choice(seq, mode: str, top: int | None, as_ids: bool, version: str = "default") -> dict:
    """A non-streaming choice of the ``text`` level (``text``) or the ``derender`` level
    (``message``: the assistant message, ``tool_calls`` left out when empty, as vLLM 0.34's
    ChatMessage); ``logprobs`` only when asked, as in the tokens level; ``weight_versions`` its
    spans (``version``: the engine's label now)."""
    text = seq.output_text()
    common = {"index": seq.index, "finish_reason": seq.finish_reason, "stop_reason": seq.stop_reason,
              "token_ids": list(seq.ids), "weight_versions": weight_spans(seq, version),
              "logprobs": _text_logprobs(seq, top, as_ids) if top is not None else None}
    if mode == "text":
        return generate_text_choice(text=text, **common)
    return generate_derender_choice(message=chat_message("assistant", text), **common)


def stream_text(sim, req: GenerationRequest, seqs, include_usage: bool, mode: str, top: int | None,
                as_ids: bool, continuous: bool = False):
    """SSE body of the ``text`` and ``derender`` levels: per token a chunk whose choice has its
    ``token_ids`` delta and the ``text`` delta (``text``) or a chat ``delta`` (``derender``:
    ``role`` in a choice's first chunk, then ``content``), the last one of a choice with its
    ``finish_reason`` and ``stop_reason``.  A choice with no tokens gets one finishing chunk;
    then the optional usage chunk and ``data: [DONE]``.

    Laid out as vLLM 0.34 dumps its GenerateText/DerenderStreamResponse (every field but null
    ``prompt_token_ids``, ``mm_placeholders`` and ``metrics``: ``model_dump_json(exclude=...)``,
    token_in_token_out/serving.py ``serve_tokens_stream_generator``; protocol.py's field order):
    ``request_id``, ``usage`` (null, or the choice's running usage with
    ``continuous_usage_stats``, ``completion_tokens_details`` null), ``output_mode``, then
    ``choices``, each with ``index``, ``finish_reason``, ``stop_reason``, ``token_ids``,
    ``routed_experts``, ``sampling_mask``, ``weight_versions``, ``text`` or ``delta``,
    ``logprobs``.  The usage chunk is dumped ``exclude_none``."""
    head = b'data: {"request_id":' + dumps(engine_request_id(req))
    mid = b',"output_mode":"' + mode.encode() + b'","choices":['
    tail = b']}\n\n'
    sent = [0] * len(seqs)          # tokens each choice has streamed (all of them: finished)
    made = [0] * len(seqs)          # the running usage's completion tokens, by choice

    def chunk(seq, piece: str, ids: list, finish, stop_reason, logprobs) -> bytes:
        i = seq.index
        choice = {"index": i, "finish_reason": finish, "stop_reason": stop_reason, "token_ids": ids,
                  "routed_experts": None, "sampling_mask": None,
                  "weight_versions": None if finish is None else weight_spans(seq, sim.weight_version)}
        if mode == "text":
            choice["text"] = piece
        else:
            # ChatStreamProcessor.step: a finish without any output is DeltaMessage() (role alone)
            choice["delta"] = ({"content": piece} if sent[i] else {"role": "assistant", "content": piece} if ids
                               else {"role": "assistant"})
        choice["logprobs"] = logprobs
        usage = running_usage(made, seq, ids) if continuous else b"null"
        return head + b',"usage":' + usage + mid + dumps(choice) + tail

    def token(seq, k) -> bytes:
        a, b = token_span(k)            # one token, or a stream interval's group: one chunk
        done = b == len(seq.ids)
        data = chunk(seq, "".join(seq.pieces[a:b]), list(seq.ids[a:b]), seq.finish_reason if done else None,
                     seq.stop_reason if done else None,
                     None if top is None else _text_logprobs(seq, top, as_ids, a, b))
        sent[seq.index] = b             # after the chunk: its first one carries the role
        return data

    out = []
    streamed = Streamed(len(seqs))
    yield from rendered_choices(sim, seqs, token, out, streamed)
    cut = end_aborted(req, seqs, streamed)
    for seq in seqs:
        if seq.index in cut or not sent[seq.index]:
            if seq.index in cut:          # a chunk rendered ahead and not sent: uncounted
                made[seq.index] = seq.completion_tokens
            # (an abort's text: what a stop string's holdback kept, Sequence.flushed)
            out.append(chunk(seq, seq.flushed, None if seq.finish_reason == "cache_threshold" else [],
                             seq.finish_reason, seq.stop_reason, None))
    if include_usage:
        u = _stream_usage(sim, seqs)
        out.append(head + b',"usage":' + dumps(u) + _spec_metrics(seqs, True) + mid + tail)
    out.append(b"data: [DONE]\n\n")
    yield b"".join(out)
