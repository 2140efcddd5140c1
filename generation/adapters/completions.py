"""OpenAI legacy completions as vLLM serves them (``POST /v1/completions``).

``prompt`` may be a string, a list of strings, a list of token ids or a list of token-id
lists; every prompt (times ``n``) is its own sequence, choices are indexed prompt-major.
Pre-tokenized prompts are never tokenized (prompt_tokens = number of ids).  Usage counts
each prompt once and sums completions.  Streams carry no role chunk; a choice's last token
chunk carries its ``finish_reason`` (vLLM's shape).
"""
from __future__ import annotations

from functools import partial

from generation.content import logprobs as lp
from ..errors import InvalidParam, Rejected
from generation.engine.token_schedule import TokenSchedule
from generation.engine.request import ClientDisconnected, GenerationRequest, Prompt
from generation.engine.weight_versions import spans as weight_spans
from generation.tokenization.tokenizer import each_text
from .base import (per_request_metrics, CLOSE_KV, KV_END, REMOTE_DECODE_PARAMS, Adapter, remote_decode_params, ChunkFrame, PieceChunks, check_kv_transfer, check_limits, tokenize_texts,
                   check_tools,
                   check_logprobs_cap, check_logprobs_sign, check_prompt_logprobs, check_size, check_stream_options, check_work,
                   dumps, request_usage, stream_flags, system_fingerprint, usage_details)
from .fields import (EMPTY_PROMPT, check_truncate_in_context, check_beam_logprob_ids, check_openai_fields, check_prompt_count, check_prompts_given,
                     check_response_format_schema,
                     check_structured_count, check_prompt_ids, scheduling_priority, tokens_as_ids,
                     truncate_prompts, prompt_vocab_size)
from .protocol import CompletionRequest
from .token_stream import Streamed, due_items, end_aborted
from .response_bodies import completion_choice, completion_response
from .sampling import chat_reasoning, sampling_semantics, structured_constraint


def check_logprobs_order(b) -> None:
    """vLLM 0.34's completions ``check_logprobs`` on the combinations beam search and
    ``logprob_token_ids`` cannot serve (its first three checks, in its order)."""
    check_beam_logprob_ids(b.logprob_token_ids, b.use_beam_search)
    if b.use_beam_search and b.echo and b.logprobs is not None:
        raise Rejected("`echo` with `logprobs` is not supported with beam search because beam search does not "
                       "compute prompt logprobs.", "echo")
    if b.logprob_token_ids and b.echo and b.max_tokens == 0:
        raise Rejected("`logprob_token_ids` is not supported when `echo=True` and `max_tokens=0` because no "
                       "output tokens are generated.", "logprob_token_ids")


def check_suffix(b) -> None:
    """vLLM 0.34's ``OnlineRenderer.render_completion`` (renderers/online_renderer.py) on a
    ``suffix``, even an empty one: only a fill-in-the-middle renderer (DeepSeek V4's) renders
    one, so each branch is a 400 naming ``suffix``, in its order (echo, truncation, then the
    prompt's form).  FIM clients read that 400 as "no FIM here" and continue plainly."""
    if b.echo:
        raise InvalidParam("Echo is unsupported with suffix.", "suffix")
    if b.truncate_prompt_tokens is not None:
        raise InvalidParam("suffix is not supported with truncate_prompt_tokens", "suffix")
    if b.prompt[0] == "text":
        raise InvalidParam("suffix is only supported for models with FIM completion rendering", "suffix")
    raise InvalidParam("suffix requires text prompt input for FIM completion rendering", "suffix")


class CompletionsAdapter(Adapter):
    body: CompletionRequest
    sse_keep_alive = True
    render_type = "completion"      # vllm:request_render_duration_seconds{request_type}
    external_id_format = "cmpl-{rid}-{i}"       # completion/serving.py: one engine request per prompt

    def build(self, rid: str, force_cache_threshold: bool) -> GenerationRequest:
        sim, b = self.sim, self.body
        stream = bool(b.stream)
        # vLLM's request validators (completion/protocol.py), before the model check
        # (texts or token-id lists alike: any list but a flat one of ids, which is one prompt)
        if b.prompt is not None:
            check_prompt_count(len(b.prompt[1]))
        check_stream_options(b.stream_options, stream)
        check_logprobs_order(b)
        check_prompt_logprobs(b.prompt_logprobs, stream)
        check_logprobs_sign(b.logprobs, "logprobs")
        check_structured_count(b.structured_outputs, api="completion")
        check_response_format_schema(b.response_format)
        model, lora = sim.resolve_model(b.model)
        if b.prompt is None:
            raise Rejected(EMPTY_PROMPT, "prompt")
        if b.suffix is not None:
            check_suffix(b)
        check_prompts_given(len(b.prompt[1]))
        check_logprobs_cap(sim, b.logprobs, "logprobs")
        check_logprobs_cap(sim, b.prompt_logprobs, "prompt_logprobs", "prompt")
        ignore_eos = bool(b.ignore_eos)
        check_limits(b.max_tokens, ignore_eos, b.n)
        check_truncate_in_context(sim, b.truncate_prompt_tokens)
        check_openai_fields(sim, b, b.logprobs is not None, b.max_tokens, "completion")
        check_kv_transfer(b.kv_transfer_params, stream)
        check_tools(sim, None, None, b.response_format)
        constraint = structured_constraint(sim, b.structured_outputs, b.response_format)
        kind, items = b.prompt
        n = b.n or 1
        check_size(sim, len(items) * n, force_cache_threshold, b.cache_hit_threshold)
        if b.max_tokens is not None:          # the output side, before anything is tokenized
            check_work(sim, *self._work(len(items) * n * min(b.max_tokens, sim.config.max_model_len)))
        prompts = build_prompts(sim, kind, items, b.add_special_tokens is not False)
        if kind == "ids":
            check_prompt_ids(prompts, prompt_vocab_size(sim))
        truncate_prompts(sim.tokenizer, prompts, b.truncate_prompt_tokens, b.truncation_side, sim.config.max_model_len)
        self.req = GenerationRequest(
            request_id=rid, model=model, lora=lora, prompts=prompts, n=n,
            max_tokens=b.max_tokens, min_tokens=b.min_tokens or 0, ignore_eos=ignore_eos, stream=stream, stop=b.stop,
            kv_transfer_params=b.kv_transfer_params, cache_hit_threshold=b.cache_hit_threshold,
            force_cache_threshold=force_cache_threshold, response_format=constraint or b.response_format,
            reasoning=chat_reasoning(sim, b), priority=scheduling_priority(sim, b.priority), cache_salt=b.cache_salt,
            stream_interval=b.stream_interval, **sampling_semantics(b))
        return self.req

    def _work(self, tokens: int, prompt_tokens: int = 0) -> tuple[int, str, str]:
        """Each choice renders its tokens, and with ``echo`` its prompt, with ``logprobs``
        alternatives each; ``prompt_logprobs`` (by default ``logprobs`` with ``echo``) repeats
        its prompt's entries in every choice.  ``prompt_tokens``: prompt lengths summed over
        the choices."""
        b = self.body
        per = 1 + (b.logprobs or 0)
        lp = " x (1 + logprobs)" if b.logprobs else ""
        units, formula = tokens * per, "prompts x n x max_tokens" + lp
        if b.echo:
            units += prompt_tokens * per
            formula += " + echoed prompt tokens" + lp
        plp = b.prompt_logprobs if b.prompt_logprobs is not None or not b.echo else b.logprobs
        if plp is not None:
            units += prompt_tokens * (1 + plp)
            formula += " + prompt tokens x (1 + prompt_logprobs)"
        param = "n" if (b.n or 1) > 1 else "prompt" if len(b.prompt[1]) > 1 else "max_tokens"
        return units, formula, param

    def work(self, seqs) -> tuple[int, str, str]:
        return self._work(sum(s.completion_tokens for s in seqs), sum(s.prompt_len for s in seqs))

    def render(self, seqs) -> dict:
        b = self.body
        echo = bool(b.echo)
        out = render_completion(self.sim.tokenizer, self.req, seqs, b.logprobs, echo, usage_details(self.sim),
                                tokens_as_ids(self.sim, b), not b.return_token_ids)
        out["system_fingerprint"] = system_fingerprint(self.sim.config)
        # vLLM: with echo, prompt_logprobs defaults to logprobs (CompletionRequest.to_sampling_params)
        plp = b.prompt_logprobs if b.prompt_logprobs is not None or not echo else b.logprobs
        if plp is not None or b.return_token_ids:
            cache: dict = {}
            for c, s in zip(out["choices"], seqs):
                if plp is not None:
                    key = s.prompt_index
                    if key not in cache:
                        cache[key] = lp.prompt_logprobs(self.sim.tokenizer, s.prompt.ids, plp)
                    c["prompt_logprobs"] = cache[key]
                if b.return_token_ids:
                    c["prompt_token_ids"] = list(s.prompt.ids)
                    c["token_ids"] = list(s.ids)
        if b.return_weight_versions:
            for c, s in zip(out["choices"], seqs):
                c["weight_versions"] = weight_spans(s, self.sim.weight_version)
        metrics = per_request_metrics(self.sim, seqs, spec=True)
        if metrics is not None:
            out["metrics"] = metrics
        return out

    def stream(self, seqs):
        b = self.body
        include_usage, continuous = stream_flags(b.stream_options, self.sim.config.enable_force_include_usage)
        return stream_completion(self.sim, self.req, seqs, include_usage, continuous, b.logprobs, bool(b.echo),
                                 bool(b.return_token_ids), tokens_as_ids(self.sim, b), bool(b.return_weight_versions))


def build_prompts(sim, kind: str, items: list, add_special_tokens: bool = True) -> list[Prompt]:
    """``("text", [str])`` or ``("ids", [[int]])`` -> prompts (echo pieces in echo mode)."""
    prompts = []
    tok = sim.tokenizer
    echo = sim.config.mode == "echo"
    if kind == "text":       # every text's length first, then all of them (off the hub past 8 KiB in all)
        encoded = tokenize_texts(sim, items, add_special_tokens, "prompt")
        if echo:        # prepare refuses the first prompt echo cannot fit: no pieces needed from it on
            limit = sim.config.max_model_len
            cut = next((k for k, (ids, _) in enumerate(encoded) if 2 * len(ids) > limit), len(items))
            lossless = each_text(tok.encode_lossless, items[:cut])
    for k, item in enumerate(items):
        if kind == "text":
            p = Prompt(encoded[k][0], text=item)
            if echo and k < cut:
                p.echo_ids, p.echo_pieces = lossless[k]
        else:
            p = Prompt(list(item))
            if echo:
                p.echo_ids, p.echo_pieces = list(item), tok.id_pieces(item)
        prompts.append(p)
    return prompts


def prompt_pieces(tokenizer, seq) -> list:
    """The prompt as token pieces for ``echo: true``: a text prompt verbatim; a token-id prompt
    detokenized (ids the simulated tokenizer cannot invert show as comma-separated decimals)."""
    p = seq.prompt
    if p.text is not None:
        return tokenizer.encode_lossless(p.text)[1]
    n = len(p.ids)
    out = []
    for k, t in enumerate(p.ids):
        piece = tokenizer.decode_ids([t])
        if piece == str(t) and k < n - 1:
            piece += ","
        out.append(piece)
    return out


def prompt_echo_ids(tokenizer, seq) -> list:
    """The ids of :func:`prompt_pieces` (one per piece)."""
    p = seq.prompt
    return tokenizer.encode_lossless(p.text)[0] if p.text is not None else list(p.ids)


def render_completion(tokenizer, req: GenerationRequest, seqs, top, echo_prompt: bool,
                      details: str | None = None, as_ids: bool = False, echo_text: bool = True) -> dict:
    """The ``text_completion`` body; ``as_ids``: logprob tokens named ``token_id:N``;
    ``echo_text`` false: ``echo`` with ``return_token_ids`` echoes the prompt's tokens (their
    logprobs) but not its text, as vLLM 0.34 sets ``prompt_text = ""`` then
    (completion/serving.py ``request_output_to_completion_response``)."""
    choices = []
    listed = lp.listed_names(tokenizer, req.logprob_token_ids, as_ids)
    for s in seqs:
        text = s.output_text()
        pieces = s.logprob_pieces()         # each token's own text (a stop cuts only the text)
        ids = list(s.ids) if as_ids else None
        if echo_prompt:
            head = prompt_pieces(tokenizer, s)
            pieces = head + list(pieces)
            if echo_text:
                text = "".join(head) + text
            if as_ids:
                ids = prompt_echo_ids(tokenizer, s) + ids
        logprobs = lp.completion_logprobs(pieces, top, ids=ids, listed=listed) if top is not None else None
        if logprobs is not None and echo_prompt and head:
            # vLLM: nothing precedes the first prompt token, so it has no logprob (prompt_logprobs[0])
            logprobs["token_logprobs"][0] = logprobs["top_logprobs"][0] = None
        # its optional fields null unless asked for (vLLM's test_return_token_ids reads
        # "prompt_token_ids" in every choice)
        choices.append(completion_choice(index=s.index, text=text, logprobs=logprobs, finish_reason=s.finish_reason,
                                         stop_reason=s.stop_reason))
    # every field of vLLM 0.34's response (response_bodies): the caller fills in the fingerprint
    return completion_response(id=f"cmpl-{req.request_id}", model=req.model, choices=choices,
                               usage=request_usage(seqs, details, None, api="completion"),
                               kv_transfer_params=remote_decode_params(seqs) if req.remote_decode else None)


# vLLM 0.34's completion chunks are dumped exclude_unset with every field of the choice set
# (completion/serving.py completion_stream_generator, and its plain-delta template
# _delta_frame_template): ``stop_reason``, ``prompt_token_ids``, ``token_ids`` and
# ``weight_versions`` (null unless asked), and the chunk's ``kv_transfer_params`` (null: a
# prefill cannot stream)
_NOT_FINISHED = b',"finish_reason":null,"stop_reason":null'
_NULL_IDS = b',"prompt_token_ids":null,"token_ids":null'
_NULL_WEIGHTS = b',"weight_versions":null'
_NO_IDS = _NULL_IDS + _NULL_WEIGHTS

# a plain token chunk after its head: ``,"text":<piece>,...}],"kv_transfer_params":null}\n\n``
_PLAIN_REST = PieceChunks(b',"text":', b',"logprobs":null' + _NOT_FINISHED + _NO_IDS + CLOSE_KV)


def stream_completion(sim, req: GenerationRequest, seqs, include_usage: bool, continuous: bool, top,
                      echo_prompt: bool, token_ids: bool = False, as_ids: bool = False, weights: bool = False):
    """SSE body, as vLLM's: no role chunk; one chunk per token, a choice's last one carrying
    its ``finish_reason`` and ``stop_reason`` (a choice without tokens gets one closing chunk
    with empty ``text``); with ``echo`` the prompt (and its logprobs) is prepended to the first
    token's chunk.  ``token_ids`` (vLLM's ``return_token_ids``): a choice's first chunk
    carries its ``prompt_token_ids``, each token chunk its ``token_ids`` delta.  Every choice
    carries ``stop_reason``, ``prompt_token_ids``, ``token_ids`` and ``weight_versions``, null
    where there is nothing to say, and every token chunk ``kv_transfer_params`` (null) after
    its running usage and the fingerprint, as vLLM 0.34 sets them; ``weights`` (vLLM's
    ``return_weight_versions``): a finishing chunk's ``weight_versions`` are the choice's spans
    (:func:`~generation.engine.weight_versions.spans`)."""
    frame = ChunkFrame(f"cmpl-{req.request_id}", "text_completion", req.model, seqs, continuous)
    heads, tail = frame.heads, frame.tail
    out = []              # chunks due now: one write when the stream is about to wait
    put = out.append
    offsets = [0] * len(seqs)
    lasts = [len(s.pieces) - 1 for s in seqs]
    pids = {s.index: b',"prompt_token_ids":' + dumps(s.prompt.ids) for s in seqs} if token_ids else {}
    echoes = {}           # choice -> (prompt text, its logprobs or None): vLLM prepends them to token 0
    if echo_prompt:
        for s in seqs:
            head = prompt_pieces(sim.tokenizer, s)
            # vLLM 0.34 echoes no prompt text with return_token_ids (prompt_text = "")
            text = "" if token_ids else "".join(head)
            d = None
            if top is not None and head:     # the prompt's logprobs, null for its first token (vLLM)
                d = lp.completion_logprobs(head, top, ids=prompt_echo_ids(sim.tokenizer, s) if as_ids else None)
                d["token_logprobs"][0] = d["top_logprobs"][0] = None
                offsets[s.index] = sum(map(len, d["tokens"]))   # vLLM: the offsets follow the tokens reported
            echoes[s.index] = (text, d)
    # No logprobs, token ids nor running usage: a token chunk is its head plus a suffix that
    # depends only on the piece (cached in _PLAIN_REST).
    plain = top is None and not token_ids and not continuous
    listed = lp.listed_names(sim.tokenizer, req.logprob_token_ids, as_ids)
    get_rest, render_rest = _PLAIN_REST.get, _PLAIN_REST.render
    not_finished = _NOT_FINISHED

    def ids_fields(i: int, ids: list, last: bool = False) -> bytes:
        """``prompt_token_ids`` (choice ``i``'s first chunk with ``return_token_ids``), ``token_ids``
        (``ids``; null without ``return_token_ids``), ``weight_versions`` (its spans on the
        ``last`` chunk with ``weights``)."""
        if not (weights and last):
            if not token_ids:
                return _NO_IDS                  # a token's chunk: one constant, nothing joined
            spans = _NULL_WEIGHTS
        else:
            spans = b',"weight_versions":' + dumps(weight_spans(by_index[i], sim.weight_version))
        if not token_ids:
            return _NULL_IDS + spans
        return pids.pop(i, b',"prompt_token_ids":null') + b',"token_ids":' + dumps(ids) + spans
    by_index = {s.index: s for s in seqs}
    # vLLM 0.21+: the system_fingerprint on a choice's finishing chunk, or with include_usage on
    # the usage chunk alone (the true last message)
    fingerprint = system_fingerprint(sim.config)
    last_close = (b'}],"system_fingerprint":' + dumps(fingerprint) + KV_END
                  if fingerprint is not None and not include_usage else CLOSE_KV)

    def token_chunk(seq, k: int) -> bytes:
        i = seq.index
        piece = seq.pieces[k]
        echo = echoes.pop(i, None) if k == 0 and echoes else None
        if k != lasts[i]:
            if plain and echo is None:     # the common chunk: its bytes after the head are cached per piece
                return heads[i] + (get_rest(piece) or render_rest(piece))
            fin = not_finished
            close = CLOSE_KV
        else:
            fin = b',"finish_reason":' + dumps(seq.finish_reason) + b',"stop_reason":' + dumps(seq.stop_reason)
            close = last_close
        text = piece if echo is None else echo[0] + piece
        if top is not None:
            own = seq.logprob_pieces()[k]
            d = lp.completion_logprobs([own], top, start=k, offset=offsets[i], ids=[seq.ids[k]] if as_ids else None,
                                       listed=listed)
            # vLLM: the offsets follow the tokens reported (``token_id:N`` with as_ids), not the
            # text (a stop string's held-back text lags them: Sequence.hold_back)
            offsets[i] += len(d["tokens"][0])
            if echo is not None and echo[1] is not None:
                d = {key: echo[1][key] + d[key] for key in d}
            logprobs = dumps(d)
        else:
            logprobs = b"null"
        end = b"}]" + tail(1, i) if continuous else close     # "}]" closes the choices
        end = ids_fields(i, seq.ids[k:k + 1], k == lasts[i]) + end
        return heads[i] + b',"text":' + dumps(text) + b',"logprobs":' + logprobs + fin + end

    def span_chunk(seq, a: int, b: int) -> bytes:
        """Tokens ``a..b-1`` (``a`` > 0: the first token goes alone) as one output, a stream
        interval's group, as vLLM's completions stream renders an output of several tokens:
        their text, their logprobs (one entry per token) and ``token_ids`` together, the running
        usage counting them, the finish when ``b - 1`` is the choice's last token."""
        i = seq.index
        pieces = seq.pieces[a:b]
        text = "".join(pieces)
        last = b - 1 == lasts[i]
        if plain and not last:          # text alone: the plain chunk's frame
            return heads[i] + _PLAIN_REST.prefix + dumps(text) + _PLAIN_REST.suffix
        logprobs = b"null"
        if top is not None:
            own = seq.logprob_pieces()[a:b]
            d = lp.completion_logprobs(own, top, start=a, offset=offsets[i], ids=seq.ids[a:b] if as_ids else None,
                                       listed=listed)
            logprobs = dumps(d)
            offsets[i] += sum(map(len, d["tokens"]))        # the tokens reported, as token_chunk's
        end = b"}]" + tail(b - a, i) if continuous else (last_close if last else CLOSE_KV)   # "}]" closes the choices
        end = ids_fields(i, seq.ids[a:b], last) + end
        fin = (b',"finish_reason":' + dumps(seq.finish_reason) + b',"stop_reason":' + dumps(seq.stop_reason)
               if last else not_finished)
        return heads[i] + b',"text":' + dumps(text) + b',"logprobs":' + logprobs + fin + end

    streamed = Streamed(len(seqs))           # tokens each choice sent, for an abort (end_aborted)
    sent = streamed.counts
    try:
        for seq, k in sim.stream(seqs, flush=True, blocks=plain, deadlines=True, first_in_schedule=True):
            cls = k.__class__
            if cls is int and k >= 0:
                put(token_chunk(seq, k))
                sent[seq.index] = k + 1
                continue
            if cls is range:                     # plain tokens due at once: their chunks in one bytes
                put(_PLAIN_REST.block(heads[seq.index], seq.pieces, k, partial(token_chunk, seq)))
                sent[seq.index] = k.stop
                continue
            if cls is slice:                     # a stream interval's group: one chunk
                put(span_chunk(seq, k.start, k.stop))
                sent[seq.index] = k.stop
                continue
            if cls is TokenSchedule:             # the server emits tokens 1.. itself (or 0.., first_in_schedule)
                streamed.hand(k, _PLAIN_REST.renderer(heads[seq.index], seq.pieces, partial(token_chunk, seq),
                                                     not weights) if plain
                              else partial(token_chunk, seq), partial(token_chunk, seq, 0), partial(span_chunk, seq))
            yield from due_items(out, k)         # the stream waits here: what is due, then the deadline
    except ClientDisconnected:               # the server aborted it: its choices still finish (end_aborted)
        if not req.aborted_by_server:
            raise
    cut = end_aborted(req, seqs, streamed)
    for seq in seqs:
        if lasts[seq.index] >= 0 and seq.index not in cut:      # its last token's chunk closed it
            continue
        extra = ids_fields(seq.index, [], True)
        text, d = echoes.pop(seq.index, ("", None))
        text += seq.flushed                  # an abort's: the text a stop string's holdback kept
        if d is None and top is not None and seq.index in cut:  # vLLM's logprobs of no new tokens
            d = lp.completion_logprobs([], top)
        if seq.index in cut:                 # a chunk rendered ahead and not sent: uncounted
            frame.rewind(seq.index, seq.completion_tokens)
        put(heads[seq.index] + b',"text":' + dumps(text) + b',"logprobs":' + (b"null" if d is None else dumps(d)) +
            b',"finish_reason":' + dumps(seq.finish_reason) + b',"stop_reason":' + dumps(seq.stop_reason) + extra +
            (b'}]' + tail(0, seq.index) if continuous else last_close))
    if include_usage:
        put(frame.usage_chunk(request_usage(seqs, usage_details(sim), None, api="completion", final_chunk=True),
                              per_request_metrics(sim, seqs, True, spec=True), fingerprint))
    put(b"data: [DONE]\n\n")
    yield b"".join(out)
