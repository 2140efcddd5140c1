"""The adapter interface and what every API adapter shares (limits, prompts, usage, chunk frames).

An :class:`Adapter` is one API on the shared pipeline (:func:`blueprints.serving.handle`):

1. ``build(rid, force_cache_threshold)`` translates the typed request (``self.body``, loaded by
   the API's schema) into the engine's :class:`~generation.engine.request.GenerationRequest`, raising
   domain errors (:mod:`generation.errors`) for anything the engine must not see.  Checks that
   cost nothing run before anything is built (model, limits, request size).
2. ``render(seqs)`` turns the finished sequences into the JSON body; ``stream(seqs)`` is the
   SSE body, a generator driven by ``sim.stream`` of ``bytes`` (one write each) and, where the
   stream waits, of ``float`` deadlines (``time.monotonic`` seconds) for the server to wait for
   (:func:`blueprints.common.sse_body`).  Rendering has no side effects:
   the output was decided by ``Simulator.prepare`` before admission.

Everything here is free of Flask.
"""
from __future__ import annotations

import hashlib
import os
import time
from typing import NamedTuple


from generation import vllm_version
from ..errors import InvalidParam, Rejected, QueueFullError
from generation.engine.request import GenerationRequest, Prompt
from generation.tokenization.tokenizer import each_text, plain_message

from .json_dumps import dumps
from .request_metrics import per_request_metrics  # noqa: F401 - the adapters import it from here
from .kv_transfer import (KV_TRANSFER_TYPES, REMOTE_DECODE_PARAMS, check_kv_transfer,  # noqa: F401  (re-exported)
                          remote_decode_params, reported_cached)
# vLLM's VLLM_MAX_N_SEQUENCES: the largest ``n`` SamplingParams accepts (vLLM default 16384).
MAX_N = int(os.environ.get("VLLM_MAX_N_SEQUENCES", "16384"))

# --mm-encoder-only's encoder-cache transfer entry per multimodal hash (the last value: base64 of
# "NIXL_METADATA_PLACEHOLDER"), api.md 5.1.10
EC_TRANSFER_DUMMY = {"peer_host": "DUMMY", "peer_port": 1234, "size_bytes": 2359296,
                     "nixl_agent_metadata_b64": "TklYTF9NRVRBREFUQV9QTEFDRUhPTERFUg=="}


class Adapter:
    """One API on the serving pipeline.  Subclasses set the class attributes and implement
    :meth:`build`, :meth:`render` and :meth:`stream`.  ``envelope``: the error envelope of the API (``"openai"`` or ``"anthropic"``).
    ``cache_threshold_header``: whether ``X-Cache-Threshold-Finish-Reason`` applies.
    ``image_output``: whether ``--omni`` may add an image (``X-Send-Image``, the emission rate)."""
    envelope = "openai"
    cache_threshold_header = True
    image_output = False      # --omni's image decision applies (chat; Anthropic messages: its latency only)
    background = False        # answered once admitted, run on (:meth:`start_background`; Responses API)
    background_stream = False  # streamed apart from the connection (Responses API)
    sse_keep_alive = False    # --sse-keep-alive-interval's comments (vLLM 0.34: chat, completions api_router.py)
    render_type: str | None = None    # vllm:request_render_duration_seconds{request_type} (OnlineRenderer's APIs)

    def __init__(self, sim, body):
        self.sim = sim
        self.body = body
        self.req: GenerationRequest | None = None

    def body_request_id(self) -> str | None:
        """A request id the body carries (vLLM's ``request_id`` field, on the APIs that have
        one: chat, completions, generate), or None."""
        return getattr(self.body, "request_id", None) or None

    def build(self, rid: str, force_cache_threshold: bool) -> GenerationRequest:
        raise NotImplementedError

    # whether the request's id is the X-Request-Id header's when there is one (vLLM's
    # ``_base_request_id``); the Responses API's is its body's ``request_id`` or a fresh one
    request_id_header = True

    # vLLM's id for prompt ``i``'s engine request (``rid`` the request's id): the id its serving
    # layer passes to ``generate``, which ``OutputProcessor.abort_requests`` matches as external
    external_id_format: str | None = None

    def external_ids(self, req: GenerationRequest) -> tuple:
        """The external id of each of ``req``'s prompts' engine requests
        (:attr:`GenerationRequest.external_ids`): ``chatcmpl-<id>`` (chat, Messages),
        ``cmpl-<id>-<i>`` (completions), ...; empty where the API has no such id."""
        fmt = self.external_id_format
        if fmt is None:
            return ()
        rid = req.request_id
        return tuple(fmt.format(rid=rid, i=i) for i in range(len(req.prompts)))

    def work(self, seqs) -> tuple[int, str, str]:
        """``(units, formula, param)``: what rendering the prepared ``seqs`` costs, in output
        entries (a token counts 1 plus 1 per logprob alternative; echoed prompts and
        ``prompt_logprobs`` included), how the request's fields make it, and the field the 400
        of :func:`check_work` names.  The default counts completion tokens only."""
        return sum(s.completion_tokens for s in seqs), "max_tokens", "max_tokens"

    def render(self, seqs) -> dict:
        raise NotImplementedError

    def stream(self, seqs):
        raise NotImplementedError

    def start_background(self, seqs) -> dict:
        """The body answering a :attr:`background` request whose ``seqs`` were admitted."""
        raise NotImplementedError

    # the error ``type`` of a GenerationError (an engine-refused request) inside the stream: the
    # API's ``create_error_response`` of the exception (vLLM's completions and generate streams)
    generation_error_stream_type = "ServiceUnavailableError"

    def stream_error(self, body: dict) -> bytes:
        """The in-band frame for an error after the stream started; ``body`` is the error in
        the API's envelope.  OpenAI streams: a data event, then ``[DONE]``."""
        return b"data: " + dumps(body) + b"\n\ndata: [DONE]\n\n"


# ---- checks shared by the generation APIs --------------------------------------------------------

def check_limits(max_tokens, ignore_eos: bool, n=None, field: str = "max_tokens") -> None:
    """vLLM's checks on ``n`` and the token limit (api.md 2.8 step 8); ``field`` is the name the
    client used for the limit.  Raises InvalidParam naming the field."""
    if n is not None:
        if n < 1:
            raise Rejected(f"n must be at least 1, got {n}.")
        if n > MAX_N:
            raise Rejected(f"n must be at most {MAX_N}, got {n}. To increase this limit, set the "
                           "VLLM_MAX_N_SEQUENCES environment variable.")
    if max_tokens is not None and max_tokens <= 0:
        raise InvalidParam(f"{field} must be at least 1, got {max_tokens}. "
                           f"(Max completion tokens and max tokens should be positive)", field)
    if ignore_eos and max_tokens is None:
        raise InvalidParam("Ignore_eos is true but max_completion_tokens (or max_tokens) is not set",
                           "max_tokens")


# What ``-1`` ("every token of the vocabulary") counts as: simulated token ids are 32-bit.
VOCAB_SIZE = 2 ** 32


def check_logprobs_sign(value, field: str) -> None:
    """vLLM's protocol check: a logprobs count is positive, 0, or -1 (the whole vocabulary).
    Raises InvalidParam naming ``field``."""
    if value is not None and value < 0 and value != -1:
        raise Rejected(f"`{field}` must be a positive value or -1.", field, value)


def check_logprobs_cap(sim, value, field: str, kind: str = "sample") -> None:
    """``--max-logprobs`` (vLLM's check, message included): ``value`` alternatives per token
    (``kind`` ``sample`` or ``prompt``), -1 counting as the whole vocabulary.  With no cap
    (``--max-logprobs -1``) a whole-vocabulary request is still refused: it would render 2**32
    alternatives per token.  Raises InvalidParam naming ``field``; past the cap, vLLM's
    ``SamplingParams._validate_logprobs`` error, whose parameter is the sampling field
    (``logprobs`` or ``prompt_logprobs``: chat's and the Responses API's ``top_logprobs`` is
    ``logprobs`` there)."""
    if value is None:
        return
    n = VOCAB_SIZE if value == -1 else value
    cap = sim.config.max_logprobs
    if cap != -1 and n > cap:
        asked = value
        if value == -1:        # vLLM prints the model's vocabulary size; the simulated one has none
            size = getattr(sim.tokenizer, "vocab_size", None)
            real = size and size != VOCAB_SIZE         # the simulated tokenizer's 2**32 ids are no vocabulary
            asked = f"-1 (the whole vocabulary{f': {size} tokens' if real else ''})"
        raise Rejected(f"Requested {kind} logprobs of {asked}, which is greater than max allowed: {cap}",
                       "logprobs" if kind == "sample" else "prompt_logprobs", None if value == -1 else value)
    if value == -1:
        raise InvalidParam(f"`{field}` of -1 (the whole vocabulary) is not supported by the simulator.", field)


def check_work(sim, units: int, formula: str, param: str) -> None:
    """``--max-request-work``: refuse (400) a request whose response would hold more than the
    cap's output entries (choices x output tokens x (1 + top logprobs), plus echoed prompts and
    ``prompt_logprobs``), before anything is admitted.  vLLM has no such cap; it bounds what
    one request may make a worker render and hold in memory (about 64 bytes and 5-10 us of
    CPU per entry).  ``formula`` says how the request's fields make ``units``
    (``"n x max_tokens x (1 + top_logprobs)"``); ``param`` is the field the error names.
    Raises InvalidParam."""
    cap = sim.config.max_request_work
    if cap and units > cap:
        raise InvalidParam(f"This request asks for {units} output tokens and logprob alternatives "
                           f"({formula}), more than the {cap} one request may ask (--max-request-work).", param)


def tokenize_texts(sim, texts: list, add_special_tokens: bool = True, param: str | None = None) -> list:
    """``[(ids, pieces), ...]`` of a request's text prompts (completions' ``prompt`` array,
    pooling ``input``), as ``sim.tokenize_text`` each.  With ``param``, every text is first held
    to ``sim.check_prompt_chars`` (all of them before any is tokenized); texts that add up past
    the tokenizer's thread threshold are tokenized together in its worker thread
    (:func:`generation.tokenization.tokenizer.each_text`: 500 texts of 8,000 characters, each
    under the threshold, held the hub 4.6 s)."""
    if param is not None:
        for t in texts:
            sim.check_prompt_chars(len(t), param)
    encode = sim.tokenizer.encode_prompt
    return each_text(lambda t: encode(t, add_special_tokens), texts)


def check_size(sim, count: int, force_cache_threshold: bool, cache_hit_threshold=None) -> None:
    """Reject at once a request whose ``count`` sequences (prompts x n) could never be admitted,
    not even by an idle server (more than ``--max-num-seqs`` plus the waiting-queue length), with
    the 429 that admission would give after tokenizing everything.  Answers that need no slot
    (cache-threshold finishes) are not counted, so the check is skipped when they are possible.
    Behind a DP endpoint every engine could take a share (the sequences are placed one by one)."""
    cfg = sim.config
    if count <= (cfg.max_num_seqs + cfg.max_waiting_queue_length) * (len(sim.dp_peers) or 1) or force_cache_threshold:
        return
    if sim.kv_cache is not None and (cache_hit_threshold is not None or cfg.global_cache_hit_threshold > 0):
        return
    raise sim.metrics.refused(QueueFullError())


def check_tools(sim, tools, tool_choice, response_format) -> None:
    """Tool and ``response_format`` validation (chat shapes).  Raises the synthesizer's 400s."""
    synth = sim.tool_synthesizer
    if synth is None:
        return
    if tools is not None or tool_choice is not None:
        synth.validate_request(tools, tool_choice)
    if response_format is not None:
        synth.validate_response_format(response_format)


def chat_prompt(sim, messages: list, echo_text: str | None = None, field: str = "messages",
                **chat_options) -> Prompt:
    """The prompt of a chat conversation; in echo mode it replays ``echo_text`` (default: the
    last message's plain content).  ``chat_options``: :func:`generation.tokenization.tokenizer.chat_options`
    (tools and the chat-template fields), passed to the chat template."""
    ids, _ = sim.tokenize_messages(messages, bounded=field, **chat_options)
    prompt = Prompt(ids)
    if sim.config.mode == "echo" and 2 * len(ids) <= sim.config.max_model_len:     # else prepare refuses it
        if echo_text is None:
            echo_text = plain_message(messages[-1], False) if messages else ""
        prompt.echo_ids, prompt.echo_pieces = sim.tokenizer.encode_lossless(echo_text)
    return prompt


_FINGERPRINTS: dict = {}
_MISSING = object()


SYSTEM_FINGERPRINT_FROM = (0, 21, 0)   # vLLM computes it from 0.21.0 (openai/fingerprint.py); before, null


def system_fingerprint(cfg) -> str | None:
    """vLLM's ``system_fingerprint`` (``vllm/entrypoints/serve/utils/fingerprint.py``
    ``build_system_fingerprint``) by ``--fingerprint-mode``: ``full`` (default)
    ``vllm-<version>[-tp<N>][-pp<N>][-dp<N>][-ep]-<hash8>`` (DP: the whole group's size), ``hash`` without the parallelism, ``custom``
    ``--fingerprint-value``, ``none`` None (JSON null), and None before vLLM 0.21.0, which
    computed none (:data:`SYSTEM_FINGERPRINT_FROM`).  The hash is over what identifies the
    served model here (model, served names, context window, response mode, ``--vllm-version``);
    the same for every response of one configuration."""
    mode = cfg.fingerprint_mode
    if mode == "none":
        return None
    if mode == "custom":
        return cfg.fingerprint_value or None
    dp = getattr(cfg, "data_parallel_size_total", None) or cfg.data_parallel_size    # the whole group's
    pp, ep = getattr(cfg, "pipeline_parallel_size", 1) or 1, bool(getattr(cfg, "enable_expert_parallel", False))
    key = (cfg.model, tuple(cfg.served_names), cfg.max_model_len, cfg.mode, dp, vllm_version(cfg))
    fp = _FINGERPRINTS.get((key, mode, cfg.tensor_parallel_size, pp, ep), _MISSING)
    if fp is _MISSING:
        if cfg.vllm_release < SYSTEM_FINGERPRINT_FROM:
            fp = None                   # before 0.21.0 vLLM set none (the field's null)
        else:
            hash8 = hashlib.sha256(repr(key).encode()).hexdigest()[:8]
            parts = [f"vllm-{vllm_version(cfg)}"]
            if mode == "full":          # vLLM's order: tp, pp, dp, ep
                parts += [f"tp{cfg.tensor_parallel_size}"] if cfg.tensor_parallel_size > 1 else []
                parts += [f"pp{pp}"] if pp > 1 else []
                parts += [f"dp{dp}"] if dp > 1 else []
                parts += ["ep"] if ep else []
            fp = "-".join(parts + [hash8])
        _FINGERPRINTS[(key, mode, cfg.tensor_parallel_size, pp, ep)] = fp
    return fp


# ---- usage ------------------------------------------------------------------------------------------

_NO_DETAILS = object()


def usage(prompt: int, completion: int, cached: int | None = None, details=_NO_DETAILS) -> dict:
    """OpenAI usage; ``prompt_tokens_details`` is ``{"cached_tokens": cached}``, or left out when
    ``cached`` is None (vLLM 0.34's UsageInfo excludes a null one; 0.33 sent ``null``);
    ``details`` (when given) is ``completion_tokens_details``: ``{"reasoning_tokens": n}`` with
    ``--reasoning-parser``, None (JSON null) without, as vLLM's UsageInfo on chat and
    completions."""
    out = {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion}
    if cached is not None:
        out["prompt_tokens_details"] = {"cached_tokens": cached}
    if details is not _NO_DETAILS:
        out["completion_tokens_details"] = details
    return out


class PromptDetails(NamedTuple):
    """How usage carries ``prompt_tokens_details`` (:func:`usage_details`): ``shape``
    ``"vllm"`` (``--enable-prompt-tokens-details``: vLLM 0.34's ``PromptTokenUsageInfo``) or
    ``"cached"`` (``--enable-kvcache`` alone: the reference's ``{"cached_tokens": N}``);
    ``block`` (tokens) the block size of the prefix cache that stores prompts, 0 without one
    (:func:`prefix_block`)."""
    shape: str
    block: int


def usage_details(sim) -> PromptDetails | None:
    """When usage carries ``prompt_tokens_details``: with ``--enable-prompt-tokens-details``
    vLLM 0.34's fields (:func:`prompt_tokens_details`), 0 hits included, as vLLM's own
    ``test_completion`` expects (``cached_tokens == 0`` with prefix caching off); with
    ``--enable-kvcache`` alone the reference's ``{"cached_tokens": N}`` (the user spec's shape,
    which cache-aware clients read); else None: vLLM's default, left out.  The step engine's own
    prefix cache (``--latency-calculator step`` without ``--enable-kvcache``) is vLLM's default
    prefix caching: no details without the flag."""
    if sim.config.enable_prompt_tokens_details:
        return PromptDetails("vllm", prefix_block(sim))
    if sim.kv_cache is not None and sim.config.enable_kvcache:
        return PromptDetails("cached", prefix_block(sim))
    return None


def prefix_block(sim) -> int:
    """Tokens per block of the prefix cache that stores prompts (``--enable-kvcache``'s, or step
    mode's with prefix caching on), 0 when there is none (nothing is written to a cache)."""
    if sim.kv_cache is None or (sim.engine is not None and not sim.config.enable_prefix_caching):
        return 0
    return getattr(sim.config, "kv_block_span", sim.config.block_size)      # step mode's DCP: the spanned block


def created_cache_tokens(seq, block: int) -> int:
    """Prompt tokens this request wrote to the prefix cache, vLLM's ``PrefillStats.finalize``
    (``vllm/v1/metrics/stats.py``): the prompt's whole blocks, hashed in the cache once it is
    prefilled (``KVCacheManager.estimate_cached_tokens``), less its hits; 0 without a prefix
    cache (``block`` 0)."""
    return max(0, seq.prompt_len // block * block - seq.cached_tokens) if block else 0


def prompt_tokens_details(pd: PromptDetails, seqs, api: str = "chat", final_chunk: bool = False,
                          mm: dict | None = None) -> dict:
    """``usage.prompt_tokens_details`` over ``seqs``' distinct prompts, as vLLM 0.34 serialises
    its ``PromptTokenUsageInfo`` (``vllm/entrypoints/serve/engine/protocol.py``; tokens).  The
    reference shape (``pd.shape == "cached"``) is ``{"cached_tokens": N}`` everywhere.  vLLM's:

    * ``api="chat"`` (``chat_completion/serving.py`` ``_make_prompt_tokens_details``):
      ``cached_tokens``, ``created_cache_tokens`` (:func:`created_cache_tokens`) and
      ``multimodal_tokens`` (``mm``: prompt tokens per modality, null without media); the
      stream's closing usage chunk (``final_chunk``, dumped with ``exclude_none``) leaves a
      null ``multimodal_tokens`` out;
    * ``api="completion"`` (completions and ``/inference/v1/generate``: ``PromptTokenUsageInfo(
      cached_tokens=N)``): the body's ``model_dump()`` adds ``created_cache_tokens`` and
      ``multimodal_tokens`` as null; the stream's closing chunk (``exclude_none``) has
      ``cached_tokens`` alone."""
    prompts = {}
    for s in seqs:
        prompts.setdefault(s.prompt_index, s)
    cached = sum(reported_cached(s) for s in prompts.values())
    if pd.shape != "vllm" or (api == "completion" and final_chunk):
        return {"cached_tokens": cached}
    if api == "completion":
        return {"cached_tokens": cached, "created_cache_tokens": None, "multimodal_tokens": None}
    out = {"cached_tokens": cached,
           "created_cache_tokens": sum(created_cache_tokens(s, pd.block) for s in prompts.values()),
           "multimodal_tokens": mm or None}
    if final_chunk and out["multimodal_tokens"] is None:
        del out["multimodal_tokens"]
    return out


def request_usage(seqs, prompt_details: PromptDetails | None = None, details=_NO_DETAILS, api: str = "chat",
                  final_chunk: bool = False, mm: dict | None = None) -> dict:
    """Usage over all choices: each distinct prompt counted once, completions summed;
    ``prompt_details`` from :func:`usage_details` (``api``, ``final_chunk`` and ``mm`` see
    :func:`prompt_tokens_details`), ``details`` see :func:`usage`.  A cache-threshold answer
    has no prompt details."""
    prompts = {}
    for s in seqs:
        prompts.setdefault(s.prompt_index, s.prompt_len)
    p = sum(prompts.values())
    c = sum(s.completion_tokens for s in seqs)
    out = usage(p, c)                   # vLLM's UsageInfo order: prompt details, then completion details
    if prompt_details is not None and not all(s.finish_reason == "cache_threshold" for s in seqs):
        out["prompt_tokens_details"] = prompt_tokens_details(prompt_details, seqs, api, final_chunk, mm)
    if details is not _NO_DETAILS:
        out["completion_tokens_details"] = details
    return out


# ---- pre-rendered OpenAI chunk frames ---------------------------------------------------------------

CHUNK_END = b"}\n\n"
CLOSE = b"}]" + CHUNK_END       # closes a chunk's last choice, its choices array and the chunk
# vLLM 0.34's chat and completions token chunks end with the chunk's kv_transfer_params, set (null
# until a finish) on each and dumped exclude_unset (chat_completion/serving.py, completion/serving.py)
KV_END = b',"kv_transfer_params":null' + CHUNK_END
CLOSE_KV = b"}]" + KV_END       # closes a token chunk's choice, its choices and the chunk


class PieceChunks(dict):
    """piece -> ``prefix + JSON(piece) + suffix``: the bytes of a plain token chunk after its
    per-choice head, which depend only on the piece.  Look up with ``.get`` (a C call per token)
    and :meth:`render` on a miss; short pieces are memoised, bounded in entries, since echoed
    prompts bring arbitrary pieces (the sentence source has a small vocabulary)."""
    MAX_ENTRIES = 8192
    MAX_PIECE = 64          # characters

    def __init__(self, prefix: bytes, suffix: bytes):
        super().__init__()
        self.prefix, self.suffix = prefix, suffix

    def render(self, piece: str) -> bytes:
        rest = self.prefix + dumps(piece) + self.suffix
        if len(self) < self.MAX_ENTRIES and len(piece) <= self.MAX_PIECE:
            self[piece] = rest
        return rest

    def renderer(self, head: bytes, pieces, last_chunk, pure: bool = True):
        """``k -> head + rest of pieces[k]``: one plain token's chunk (a schedule's ``render``);
        the last token's is ``last_chunk(k)`` (it carries the finish reason, as vLLM's).
        ``pure``: whether ``last_chunk``'s bytes depend on ``k`` alone (False: they may change
        while the stream runs, as its weight-version spans do, and are rendered when due)."""
        get, render = self.get, self.render
        last = len(pieces) - 1

        def chunk(k: int) -> bytes:
            if k == last:
                return last_chunk(k)
            p = pieces[k]
            return head + (get(p) or render(p))
        # its bytes depend on k alone, whenever asked: the hub emitter may render the last one
        # ahead, in an idle turn (server.sse_emitter.HubEmitter._render_last)
        chunk.pure = pure
        return chunk

    def block(self, head: bytes, pieces, due: range, last_chunk) -> bytes:
        """The chunks of tokens ``due`` (due at once) of ``pieces`` after the same ``head``, as
        one bytes (the same bytes as joining ``head + rest`` per piece, built in one
        allocation); the last token of ``pieces``, if due, is ``last_chunk(k)``."""
        get = self.get
        start, stop = due.start, due.stop
        last = len(pieces) - 1
        tail = b""
        if stop > last:
            stop, tail = last, last_chunk(last)
        if start >= stop:
            return tail
        rests = [b""]                     # head.join puts a head before every rest, the first included
        rests += map(get, pieces[start:stop])     # a C loop; a miss (None) is rendered below
        if not all(rests[1:]):
            render = self.render
            rests[1:] = [r or render(p) for r, p in zip(rests[1:], pieces[start:stop])]
        if tail:
            rests.append(tail[len(head):] if tail.startswith(head) else None)
            if rests[-1] is None:         # a last chunk with another head: joined after
                rests.pop()
                return head.join(rests) + tail
        return head.join(rests)


class ChunkFrame:
    """Pre-rendered pieces of an OpenAI chunk stream (chat and completions), so that per token
    only the piece is serialised: ``heads[i]`` opens a chunk for choice ``i`` up to its index,
    ``tail(n, i)`` closes a chunk of choice ``i`` after ``n`` more of its generated tokens: the
    running usage when ``stream_options.continuous_usage_stats`` is on, then :data:`KV_END`.
    The running usage is the choice's own, as vLLM reports it per choice: its prompt's tokens
    and the tokens that choice generated so far; ``chat``: vLLM's chat stream also sets
    ``completion_tokens_details``, null, or with a reasoning parser (``spans``: each choice's
    ``reasoning_span``) the choice's reasoning tokens so far (``count_reasoning_tokens``)."""

    def __init__(self, chunk_id: str, obj: str, model: str, seqs, continuous: bool, chat: bool = False,
                 spans: list | None = None):
        self.envelope = (b'data: {"id":' + dumps(chunk_id) + b',"object":"' + obj.encode() + b'","created":' +
                         str(int(time.time())).encode() + b',"model":' + dumps(model) + b',"choices":[')
        self.heads = [self.envelope + b'{"index":' + str(s.index).encode() for s in seqs]
        self.continuous = continuous
        self.chat = chat
        self.spans = spans
        self.prompt_tokens = [s.prompt_len for s in seqs]
        self.completion_tokens = [0] * len(seqs)

    def count(self, i: int, generated: int = 1) -> None:
        """Count tokens of choice ``i`` that produce no chunk (reasoning markers, hidden
        reasoning) in its running usage."""
        self.completion_tokens[i] += generated

    def rewind(self, i: int, generated: int) -> None:
        """Choice ``i`` ends having sent ``generated`` tokens (a request the server aborted,
        :func:`~generation.adapters.token_stream.end_aborted`): its running usage counts those,
        not a token whose chunk the hub rendered ahead of its send and never sent (step mode's
        next token, :mod:`server.sse_emitter`), as vLLM's abort output adds no token."""
        self.completion_tokens[i] = generated

    def usage(self, i: int, generated: int = 0, prompt_details: dict | None = None) -> bytes:
        """``,"usage":{...}``: choice ``i``'s running usage after ``generated`` more tokens
        (``prompt_details``: the chat role chunk's ``prompt_tokens_details``, vLLM 0.34 sets
        them there alone), or ``b""`` without continuous usage."""
        if not self.continuous:
            return b""
        self.completion_tokens[i] += generated
        p, c = self.prompt_tokens[i], self.completion_tokens[i]
        u = {"prompt_tokens": p, "total_tokens": p + c, "completion_tokens": c}
        if prompt_details is not None:
            u["prompt_tokens_details"] = prompt_details
        if self.chat:
            details = None
            if self.spans is not None:
                span = self.spans[i]
                details = {"reasoning_tokens": max(0, min(c, span[1]) - span[0]) if span is not None else 0}
            u["completion_tokens_details"] = details
        return b',"usage":' + dumps(u)

    def tail(self, generated: int = 0, i: int = 0) -> bytes:
        """What closes a token chunk of choice ``i`` after its choices: :meth:`usage`, then
        :data:`KV_END`."""
        if not self.continuous:
            return KV_END
        return self.usage(i, generated) + KV_END

    def usage_chunk(self, usage_obj: dict, metrics: dict | None = None, fingerprint: str | None = None) -> bytes:
        """The trailing ``include_usage`` chunk: empty ``choices``, the request's usage, the
        ``system_fingerprint`` and ``--enable-per-request-metrics``' ``metrics``
        (:func:`per_request_metrics`), as vLLM serialises it: ``exclude_none`` (the chat
        stream's ``exclude_none=not chunk.choices``, the completions stream's
        ``exclude_none=True``), so a null ``completion_tokens_details`` is left out."""
        usage_obj = {k: v for k, v in usage_obj.items() if v is not None}
        fp = b',"system_fingerprint":' + dumps(fingerprint) if fingerprint is not None else b""
        extra = b',"metrics":' + dumps(metrics) if metrics else b""
        return self.envelope + b'],"usage":' + dumps(usage_obj) + fp + extra + CHUNK_END


def stream_flags(opts, force: bool = False) -> tuple[bool, bool]:
    """``(include_usage, continuous_usage_stats)`` of a ``stream_options`` object or None, as
    vLLM's ``should_include_usage``: ``--enable-force-include-usage`` (``force``) turns both on;
    ``continuous_usage_stats`` counts only together with ``include_usage``."""
    if force:
        return True, True
    if opts is None or not opts.include_usage:
        return False, False
    return True, bool(opts.continuous_usage_stats)


def check_stream_options(opts, stream: bool) -> None:
    """vLLM's ``validate_stream_options``: ``stream_options`` (a non-empty object, whatever its
    keys and values: ``{"include_usage": null}`` too) only with ``stream: true``.  Raises
    InvalidParam naming ``stream_options``."""
    if opts is not None and not stream and opts.given:
        raise Rejected("Stream options can only be defined when `stream=True`.", "stream_options")


def check_prompt_logprobs(value, stream: bool) -> None:
    """vLLM's ``check_logprobs`` for ``prompt_logprobs``: not with a stream (unless 0), else a
    positive value, 0 or -1.  Raises InvalidParam naming ``prompt_logprobs``."""
    if value is None:
        return
    if stream and (value > 0 or value == -1):
        raise Rejected("`prompt_logprobs` are not available when `stream=True`.", "prompt_logprobs")
    check_logprobs_sign(value, "prompt_logprobs")
