"""Internal request objects shared by every API: the engine sees only these.

A :class:`GenerationRequest` is what an API adapter (:mod:`generation.adapters`) builds from a
typed request; the engine turns it into one :class:`Sequence` per choice (``n`` per prompt,
prompt-major), as vLLM does.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from itertools import accumulate
from typing import Any


class ClientDisconnected(Exception):
    """Raised in a request's greenlet when it wakes after ``Simulator.cancel`` aborted it (the
    client left); also importable from :mod:`generation.engine.simulator`."""


class SeqState(StrEnum):
    """Where a :class:`Sequence` is in its life (a ``str`` enum: members compare equal to their
    values).  NEW -> RUNNING or WAITING (or INSTANT for an answer that needs no slot) -> DONE;
    ABORTED when the client left or a sibling failed before the end."""
    NEW = "new"
    WAITING = "waiting"
    RUNNING = "running"
    INSTANT = "instant"
    DONE = "done"
    ABORTED = "aborted"


@dataclass
class Prompt:
    """One prompt: its token ids, and the token pieces that echo mode replays."""
    ids: list
    echo_pieces: list | None = None     # pieces echoed back (echo mode)
    echo_ids: list | None = None
    text: str | None = None              # raw prompt text when there is one
    salt: int | None = None              # what else the answer depends on (an upload's samples); an int:
                                         # hash() of bytes and str differs between processes

    @property
    def length(self) -> int:
        return len(self.ids)


@dataclass
class GenerationRequest:
    """An API request translated onto the engine.

    ``max_tokens`` is the effective cap (chat: max_completion_tokens else max_tokens), or None.
    ``tools``/``tool_choice`` are in the chat shape (``{"type":"function","function":{...}}``).
    """
    request_id: str
    model: str                      # model name shown in responses (first served name or LoRA)
    lora: str | None = None
    prompts: list = field(default_factory=list)     # list[Prompt]
    n: int = 1
    max_tokens: int | None = None
    min_tokens: int = 0             # vLLM: no end before this many tokens
    ignore_eos: bool = False
    stream: bool = False
    tools: list | None = None
    tool_choice: Any = None
    response_format: dict | None = None
    stop: list | None = None
    kv_transfer_params: dict | None = None
    cache_hit_threshold: float | None = None
    force_cache_threshold: bool = False
    max_tool_calls: int | None = None
    pooling: bool = False           # a pooling request (--runner pooling): no output tokens
    send_image: bool = False        # --omni: the response carries an image (and its latency)
    # vLLM sampling semantics the simulator honours (see Simulator.request_rng)
    seed: int | None = None               # the request's own seed: same request, same output
    temperature: float | None = None      # 0: greedy, the same prompt gives the same answer
    use_beam_search: bool = False         # n distinct, deterministic beams of the prompt
    stop_token_ids: list | None = None     # the output ends after the first of these ids
    include_stop_str_in_output: bool = False
    reasoning: Any = None                  # generation.content.reasoning.ReasoningSettings, None: off
    priority: int = 0                      # --scheduling-policy priority: lower runs first
    allowed_token_ids: list | None = None  # vLLM: the output draws only these ids
    logprob_token_ids: list | None = None  # vLLM: top logprobs are the sampled token and these ids
    aborted_by_server: bool = False        # ended by abort_requests or checkpoint prepare mode=abort: its answer
                                           # still finishes, with finish_reason "abort" (Sequence.end_with_abort)
    cache_salt: str | None = None          # vLLM: the first KV block's extra hash key (cache isolation)
    external_ids: tuple = ()               # vLLM's external id of each prompt's engine request, what /abort_requests
                                           # matches (Adapter.external_ids); empty: ``request_id``
    stream_interval: int | None = None     # the request's own (SamplingParams.stream_interval): Simulator.stream_interval
    tool_parser: str | None = None         # the request type vLLM's tool parser counts this one under, when it
                                           # parses its output (generation.adapters.base.tool_parser_type)
    tool_call_index: int | None = None     # a Kimi model's first tool-call number, "functions.<name>:<i>" ids
                                           # (generation.structured.tool_calls.numbers_tool_calls); None: random ids

    @property
    def remote_prefill(self) -> bool:
        return bool((self.kv_transfer_params or {}).get("do_remote_prefill"))

    @property
    def remote_decode(self) -> bool:
        return bool((self.kv_transfer_params or {}).get("do_remote_decode"))


class Sequence:
    """One generated choice: what it will say, and its life in the scheduler.

    Output is decided before the sequence runs: ``pieces``/``ids`` (one entry per streamed
    token), ``tool_calls`` (list of dicts with ``id``, ``name``, ``arguments``, ``start``,
    ``end`` indexes into ``pieces``), ``finish_reason`` and ``completion_tokens``.
    Times are ``time.monotonic()`` seconds.
    """
    __slots__ = ("request", "index", "prompt_index", "prompt", "prompt_len", "cached_tokens",
                 "pieces", "ids", "finish_reason", "tool_calls", "completion_tokens", "lora",
                 "state", "arrival", "enqueued_at", "started_at", "first_token_at", "finished_at",
                 "event", "text", "kv_blocks", "kv_hashes", "stop_reason", "engine_req", "reasoning_span",
                 "aborted_tokens", "token_texts", "flushed", "weight_starts", "schedule", "frozen", "shift", "lost",
                 "owner")

    def __init__(self, request: GenerationRequest, index: int, prompt_index: int, prompt: Prompt):
        self.owner = None                # the engine's Simulator behind a DP endpoint, when not the request's
        self.request = request
        self.index = index
        self.prompt_index = prompt_index
        self.prompt = prompt
        self.prompt_len = prompt.length
        self.cached_tokens = 0
        self.pieces: list = []
        self.ids: list = []
        self.finish_reason = "stop"
        self.tool_calls = None
        self.completion_tokens = 0
        self.lora = request.lora
        self.state = SeqState.NEW
        self.arrival = 0.0
        self.enqueued_at = 0.0
        self.started_at = 0.0
        self.first_token_at = 0.0
        self.finished_at = 0.0
        self.event = None
        self.text = None
        self.kv_blocks = None
        self.kv_hashes = None
        self.stop_reason = None          # the stop string (or token id) that ended the output (vLLM's stop_reason)
        self.engine_req = None           # its EngineRequest in step mode (generation.engine.scheduler)
        self.reasoning_span = None       # (r0, r1, c0) into pieces (generation.content.reasoning), or None
        self.aborted_tokens = None       # output tokens made when it was aborted (what the metrics counted)
        self.token_texts = None          # each token's own text where a stop cut its piece (logprob_pieces)
        self.flushed = ""                # an abort's final delta: the text hold_back had kept (end_with_abort)
        self.weight_starts = None        # [(weight version, first output token)] once the label changed (weight_versions)
        # a keep pause of the default model (generation.engine.freeze): the TokenSchedule being
        # emitted, when it froze (0.0: not frozen), the pause its next deadline has yet to add,
        # and the seconds paused since its first token
        self.schedule = None
        self.frozen = self.shift = self.lost = 0.0

    def logprob_pieces(self) -> list:
        """Each output token's own text, as its logprobs entry names it: ``pieces``, except that
        a stop string or stop token cuts only the text (vLLM 0.34's LogprobsProcessor decodes
        each sampled id by itself, apart from the detokenizer that cuts the output text)."""
        return self.pieces if self.token_texts is None else self.token_texts

    def made_tokens(self, itl: float, now: float) -> int:
        """Output tokens made by ``now`` (monotonic seconds; the output is drawn up front): the
        step engine's count, else those due from the first token at ``itl`` seconds apart (all
        of them at 0), the time a keep pause froze it left out; once aborted, what it had made then (:attr:`aborted_tokens`, what the
        metrics counted)."""
        if self.aborted_tokens is not None:
            return self.aborted_tokens
        n = len(self.ids)
        if self.engine_req is not None:
            return min(self.engine_req.num_output, n)
        first = self.first_token_at
        if not first or first > now:
            return 0
        if self.frozen and self.frozen < now:       # a keep pause: nothing made since it froze
            now = self.frozen
        return min(n, 1 + int((now - first - self.lost) / itl)) if itl > 0 else n

    def end_with_abort(self, made: int) -> None:
        """vLLM 0.34's abort output (``OutputProcessor.abort_requests``: no new tokens,
        ``finish_reason`` ``abort``, ``stop_reason`` null) for a request the server aborted
        (:attr:`GenerationRequest.aborted_by_server`): the answer is its first ``made`` tokens
        (those streamed, or made by the abort for a non-streamed one), which its usage counts;
        only the tool calls and reasoning those tokens hold whole are kept.  The text those tokens
        held back from a streamed answer (:meth:`hold_back`) joins the last one's piece and is
        kept in :attr:`flushed` for the stream's final delta."""
        made = max(0, min(made, len(self.ids)))
        # ended before its last token: no stop string was completed, the text is the tokens'
        # own, and vLLM's final output flushes what the stream held back (hold_back)
        self.flushed = held = self.held_back(made) if made < len(self.ids) else ""
        self.pieces, self.ids = self.pieces[:made], self.ids[:made]
        if held:
            self.pieces[-1] += held
        if self.token_texts is not None:
            self.token_texts = self.token_texts[:made]
        self.completion_tokens = made
        self.text = None
        self.finish_reason = "abort"
        self.stop_reason = None
        if self.tool_calls:
            self.tool_calls = [tc for tc in self.tool_calls if tc["end"] <= made] or None
        if self.reasoning_span is not None:
            self.reasoning_span = tuple(min(k, made) for k in self.reasoning_span)

    def tool_call_of_piece(self) -> list:
        """For each piece of ``pieces``, the index of the tool call it belongs to."""
        out = [0] * len(self.pieces)
        for c, tc in enumerate(self.tool_calls or ()):
            for k in range(tc["start"], tc["end"]):
                out[k] = c
        return out

    def cut_at_stop(self, stops, include: bool = False, min_tokens: int = 0) -> str | None:
        """End the output at the first of ``stops`` a token completes and return the matched
        string, also kept in ``stop_reason``; ``finish_reason`` becomes ``stop``.  As vLLM 0.34's
        detokenizer (``v1/engine/detokenizer.py`` l. 133-157, ``check_stop_strings``): after each
        token it looks for each stop string ending in the text that token added, so the string
        completed first wins (a longer one that begins earlier but ends in a later token does
        not), and of those one token completes, the one that ends first in the text ("Prefer the
        stop string that completes earliest in the text"), then the one listed first.  The
        tokens through the one that completes the string stay in the output (and its
        ``completion_tokens``), those after it are dropped, and the text is cut before the string
        (after it with ``include`` - ``include_stop_str_in_output``): the last kept tokens'
        pieces lose what lies past the cut.  No match: None, nothing changes.
        ``completion_tokens`` is left to the caller.  A string must end in the text of the
        tokens after the first ``min_tokens`` (it may begin before): vLLM's detokenizer checks
        stop strings once the output holds more than ``min_tokens`` tokens, in the text added
        since (``check_stop_strings``' ``new_char_count``)."""
        text = "".join(self.pieces)
        ends = list(accumulate(map(len, self.pieces)))
        start = ends[min_tokens - 1] if 0 < min_tokens <= len(ends) else (0 if not min_tokens else len(text))
        best, cut, end = None, -1, len(text) + 1
        for s in stops or ():
            if s and len(s) <= len(text):
                # the earliest occurrence ending past `start` is also the one ending first
                i = text.find(s, max(0, start - len(s) + 1))
                if 0 <= i and i + len(s) < end:
                    best, cut, end = s, i, i + len(s)
        if best is None:
            return None
        if include:
            cut = end
        pieces, ids, pos = [], [], 0
        for piece, tid in zip(self.pieces, self.ids):
            if pos >= end:
                break
            pieces.append(piece[:max(0, cut - pos)] if pos + len(piece) > cut else piece)
            ids.append(tid)
            pos += len(piece)
        self.token_texts = self.logprob_pieces()[:len(ids)]
        self.pieces, self.ids = pieces, ids
        self.text = None
        self.finish_reason = "stop"
        self.stop_reason = best
        return best

    def hold_back(self, n: int) -> None:
        """Lay ``pieces`` out as vLLM 0.34 streams a request with stop strings and no
        ``include_stop_str_in_output``: each token's delta leaves the last ``n`` characters of the
        text (its ``stop_buffer_length``, the longest stop string's length - 1) for later, and the
        last token's delta (the output is finished) carries all that is left of the cut text
        (``BaseIncrementalDetokenizer.get_next_output_text``, ``v1/engine/detokenizer.py``): a
        partial stop string is never streamed and then taken back.  The text joined is the same,
        so a non-streamed answer reads the same; the ids and each token's logprobs entry
        (:meth:`logprob_pieces`) stay with their token, as vLLM's deltas carry every new token's
        id and logprobs whatever text they hold back.  Done once, when the output is decided:
        streaming then costs nothing more per token."""
        pieces = self.pieces
        if n <= 0 or not pieces:
            return
        whole = self.logprob_pieces()        # the tokens' own text: before the cut, the detokenizer's
        if self.token_texts is None:
            self.token_texts = list(pieces)
        text = "".join(pieces)
        full = "".join(whole[:-1])           # the text before the last token, not yet cut
        out, sent, end = [], 0, 0
        for piece in whole[:-1]:
            end += len(piece)
            upto = end - n
            if upto > sent:
                out.append(full[sent:upto])
                sent = upto
            else:
                out.append("")
        out.append(text[sent:])              # finished: the rest
        self.pieces = out

    def held_back(self, made: int) -> str:
        """The text :meth:`hold_back` kept from the first ``made`` tokens' deltas: what vLLM's
        final output flushes when the request ends after them (an abort)."""
        if self.token_texts is None or made <= 0:
            return ""
        shown = sum(map(len, self.pieces[:made]))
        return "".join(self.token_texts[:made])[shown:]

    def cut_at_token(self, stop_ids, include: bool = False, min_tokens: int = 0) -> int | None:
        """End the output with the first generated id in ``stop_ids`` (vLLM's
        ``stop_token_ids``: the stop token is part of the output, ``stop_reason`` is its id,
        ``finish_reason`` ``stop``; its text is not, unless ``include`` -
        ``include_stop_str_in_output``: vLLM 0.34's detokenizer skips a stop-terminated
        sequence's last token, ``v1/engine/detokenizer.py`` l. 108-113).  Returns the id, or
        None (nothing changes).  Not one of the first ``min_tokens`` - 1 tokens: vLLM's
        ``check_stop`` ignores stop tokens until the output holds ``min_tokens`` (its logits
        processor masks them meanwhile)."""
        wanted = set(stop_ids or ())
        for k, tid in enumerate(self.ids):
            if tid in wanted and k + 1 >= min_tokens:
                self.pieces, self.ids = self.pieces[:k + 1], self.ids[:k + 1]
                self.token_texts = list(self.pieces)
                if not include:
                    self.pieces[k] = ""
                self.text = None
                self.finish_reason = "stop"
                self.stop_reason = tid
                return tid
        return None

    def output_text(self) -> str:
        if self.text is None:
            self.text = "".join(self.pieces)
        return self.text
