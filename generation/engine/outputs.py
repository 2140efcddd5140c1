"""How the engine decides every answer before it runs (:meth:`OutputDecisions.prepare`): the
context-window checks, the response source, tool calls and structured output, reasoning spans,
stop strings and tokens, ``min_tokens``, and the per-request generator (a request's ``seed``,
greedy ``temperature: 0``).  Mixed into :class:`generation.engine.simulator.Simulator`, whose
state it reads (``config``, ``rng``, ``responses``, ``kv_cache``, ``tool_synthesizer``,
``reasoning``).
"""
from __future__ import annotations

import random

from generation.errors import ContextLengthError, InvalidParam

from .request import GenerationRequest, Sequence


def context_error(max_len: int, prompt: int, completion: int) -> ContextLengthError:
    """The context-length error of echo mode (the seeds' ``2 x prompt <= max-model-len``), in the
    reference's words: the prompt and the echoed completion together."""
    return ContextLengthError(
        f"This model's maximum context length is {max_len} tokens. However, you requested "
        f"{prompt + completion} tokens ({prompt} in the messages, {completion} in the completion). "
        f"Please reduce the length of the messages or completion.")


def prompt_too_long(max_len: int, prompt: int) -> ContextLengthError:
    """vLLM 0.34's error for a prompt longer than the context (``TokenizeParams._token_len_check``
    in ``vllm/renderers/params.py``), ending in ``(parameter=input_tokens, value=N)``; ``param``
    stays null, as case C07 asks (vLLM 0.34 names ``input_tokens``)."""
    return ContextLengthError(
        f"This model's maximum context length is {max_len} tokens. However, your prompt contains {prompt} "
        f"input tokens, which exceeds this limit even without any output tokens. Please reduce the length "
        f"of the input prompt.", "input_tokens", prompt)


def check_prompt_fits(max_len: int, prompt: int) -> None:
    """A ``prompt``-token prompt leaves room for a token in ``max_len`` (tokens), else the
    error :meth:`OutputDecisions.prepare` raises for it (outside echo mode): vLLM's
    :func:`prompt_too_long`, or at exactly ``max_len`` its context error (vLLM clamps max_tokens
    to the room: 0)."""
    if prompt > max_len:
        raise prompt_too_long(max_len, prompt)
    if prompt == max_len:
        raise context_error(max_len, prompt, 1)


def stop_buffer_length(stops) -> int:
    """The characters vLLM 0.34 holds back from a streamed delta for a request with stop
    strings ``stops`` and no ``include_stop_str_in_output``: the longest one's length - 1
    (``BaseIncrementalDetokenizer.__init__``, ``v1/engine/detokenizer.py``)."""
    return max(map(len, stops)) - 1


def stop_in_tool_calls(req: GenerationRequest, seq: Sequence, reasoning) -> None:
    """Stop strings and stop tokens in a tool-call answer, as in any other text: vLLM 0.34's
    detokenizer checks them on all the text the model generates, tool-call markup and arguments
    included, and its tool parser reads the output only after (``v1/engine/detokenizer.py``
    ``check_stop_strings``; ``parser/abstract_parser.py`` ``_extract_tool_calls``).  The
    simulator's tool-call text is the calls' arguments (:meth:`ToolSynthesizer.synthesize`), so a
    stop there cuts the answer as :meth:`Sequence.cut_at_stop` / ``cut_at_token`` cut a text one
    (``finish_reason`` ``stop``, ``stop_reason`` the string or id); what the parser then makes of
    the cut text:

    * a named ``tool_choice``: the output is the call's arguments, so the call keeps the cut
      text as its ``arguments`` (``_extract_tool_calls``' named branch; streamed,
      ``extract_named_tool_call_streaming`` sends each delta's text as arguments); none when the
      cut text is blank;
    * not streamed, ``required``: the output is a JSON array of the calls, which no longer parses
      (``TypeAdapter(list[FunctionDefinition]).validate_json`` fails, suppressed): no calls,
      content ``""`` (``message_assembly``: a forced choice's content is never null);
    * not streamed, ``auto``: the parser finds no whole call and returns the raw text as content
      (hermes: ``extract_tool_calls``' except branch): no calls, the cut text as content;
    * streamed, ``required`` / ``auto``: the streaming parsers send each call as its text comes,
      so the calls the cut text begins stay, the last with its arguments so far.

    A call kept makes ``finish_reason`` ``tool_calls`` (chat shows ``stop`` for a named one,
    ``resolve_finish_reason``); the stop's ``stop_reason`` stays."""
    if req.stop_token_ids:
        seq.cut_at_token(req.stop_token_ids, req.include_stop_str_in_output, req.min_tokens or 0)
    if req.stop:
        seq.cut_at_stop(req.stop, req.include_stop_str_in_output, req.min_tokens or 0)
    style = tool_choice_style(req.tool_choice)
    if seq.stop_reason is not None:
        cut_tool_calls(req, seq, reasoning, style)
        # the tokens the cut kept (cut_at_stop leaves the count to its caller): usage, the
        # stream's length and its timing count them, as the text path does
        seq.completion_tokens = len(seq.pieces)
    if (style == "named" and seq.tool_calls and seq.reasoning_span is None and req.stream and req.stop
            and not req.include_stop_str_in_output):
        # the call's arguments are the streamed text: held back as any text (hold_back).  Not
        # for required / auto: their streamed text is the calls' markup, parsed into one
        # entry per call, whose held-back text the simulator does not split
        seq.hold_back(stop_buffer_length(req.stop))


def cut_tool_calls(req: GenerationRequest, seq: Sequence, reasoning, style: str) -> None:
    """The calls of a tool-call answer a stop cut (:func:`stop_in_tool_calls`)."""
    if seq.reasoning_span is not None:
        reasoning.clamp(seq)
    pieces = seq.pieces
    n = len(pieces)
    calls = []
    for tc in seq.tool_calls or ():          # the calls the kept tokens begin, with their text now
        if tc["start"] >= n:
            break
        end = min(tc["end"], n)
        args = "".join(pieces[tc["start"]:end])
        calls.append(tc if end == tc["end"] and args == tc["arguments"] else {**tc, "end": end, "arguments": args})
    c0 = seq.reasoning_span[2] if seq.reasoning_span is not None else 0
    if style == "named":
        calls = [tc for tc in calls if tc["arguments"].strip()]
    elif not req.stream:
        if calls and style == "required":       # content "": the text is the unparsed array's
            seq.token_texts = seq.logprob_pieces()
            seq.pieces = pieces[:c0] + [""] * (n - c0)
        calls = []
    seq.tool_calls = calls or None
    if calls:
        seq.finish_reason = "tool_calls"
    seq.text = None


def tool_choice_style(choice) -> str:
    """``named``, ``required`` or ``auto``: the path vLLM's parser takes for ``tool_choice`` (a
    forced function, ``"required"``, anything else; the adapters' ``call_style`` reads it too)."""
    if isinstance(choice, dict) and choice.get("type", "function") == "function":
        return "named"
    return "required" if choice == "required" else "auto"


class OutputDecisions:
    """The output-decision half of the engine (see the module docstring)."""

    # ---- output decision ------------------------------------------------------------------
    def prepare(self, req: GenerationRequest) -> list[Sequence]:
        """Validate ``req`` against the context window and decide each choice's output.

        Returns the sequences prompt-major (prompt 0 choices 0..n-1, prompt 1 ...).
        Raises ContextLengthError / InvalidParam for context-window violations (seeds: echo needs
        ``2 * prompt <= max-model-len`` and ``echo length <= max_tokens``; random needs
        ``prompt + 1 <= max-model-len`` and caps max_tokens to the room left)."""
        cfg = self.config
        max_len = cfg.max_model_len
        seqs: list[Sequence] = []
        echo = cfg.mode == "echo" and not cfg.mm_encoder_only     # encoder-only answers "!" in any mode
        for pi, prompt in enumerate(req.prompts):
            p = prompt.length
            if echo:
                if p > max_len:          # too long for vLLM's renderer, whatever the mode
                    raise prompt_too_long(max_len, p)
                if 2 * p > max_len:
                    raise context_error(max_len, p, p)
                echo_len = len(prompt.echo_pieces or ())
                if req.max_tokens is not None and echo_len > req.max_tokens:
                    raise InvalidParam(
                        f"The echoed prompt is {echo_len} tokens long but max_tokens is {req.max_tokens}: "
                        f"echo mode cannot truncate its response. Please increase max_tokens.", "max_tokens")
            else:
                check_prompt_fits(max_len, p)
                room = max_len - p
                if req.min_tokens and req.min_tokens > room and (req.max_tokens is None or req.max_tokens > room):
                    # vLLM: max_tokens becomes the room left (get_max_tokens), and SamplingParams
                    # then refuses a min_tokens past it
                    raise InvalidParam(f"min_tokens must be less than or equal to max_tokens={room}, got "
                                       f"{req.min_tokens}.")
            for c in range(req.n):
                seqs.append(Sequence(req, len(seqs), pi, prompt))
        cap = cfg.max_request_work or None
        decided = 0
        for seq in seqs:
            # only tool calls outrun max_tokens: past the cap the later choices' calls stop at a
            # token (every choice is still decided: gRPC admits without check_work), and the
            # request is refused by check_work with a lower bound of its sum
            self._decide_output(req, seq, None if cap is None else max(cap - decided, 0))
            decided += seq.completion_tokens
        return seqs

    def request_rng(self, req: GenerationRequest, seq: Sequence) -> random.Random:
        """The generator of ``seq``'s draws (length, text, tool arguments, reasoning).

        vLLM's sampling semantics: a request ``seed`` makes its output reproducible (choice ``i``
        of ``n`` samples with ``seed + i``, as vLLM's parallel sampling seeds each child), and
        ``temperature: 0`` is greedy: every choice of the same prompt is the same answer.  Both
        depend on the prompt's tokens (and its ``salt``: an upload's samples), as a model's output does.  ``use_beam_search`` is
        deterministic too, but its ``n`` beams differ: beam ``i`` of a prompt is always the same
        answer, whatever the seed or temperature (vLLM's beam search samples nothing).  Otherwise
        the engine's ``--seed`` generator, drawn in arrival order."""
        key = tuple(seq.prompt.ids) if seq.prompt.salt is None else (tuple(seq.prompt.ids), seq.prompt.salt)
        if req.use_beam_search and req.n > 1:
            return random.Random(hash((-2, seq.index - seq.prompt_index * req.n, key)))
        if req.use_beam_search:         # one beam is greedy decoding (vLLM's test_whisper_beam_search_single_beam)
            return random.Random(hash((-1, key)))
        if req.temperature is not None and req.temperature == 0:
            return random.Random(hash((-1, key)))
        if req.seed is not None:
            choice = seq.index - seq.prompt_index * req.n
            return random.Random(hash((req.seed + choice, key)))
        return self.rng

    def _decide_output(self, req: GenerationRequest, seq: Sequence, work_left: int | None = None) -> None:
        """Decide ``seq``'s output.  ``work_left``: the tokens ``--max-request-work`` leaves it
        (None: no cap); tool calls, which ``max_tokens`` does not cut, stop being tokenized past
        it (:meth:`~generation.structured.tool_calls.ToolSynthesizer.synthesize`)."""
        cfg = self.config
        prompt = seq.prompt
        if self.kv_cache is not None:
            seq.cached_tokens = self.kv_cache.lookup(seq)
        if req.force_cache_threshold or self._below_cache_threshold(req, seq):
            seq.finish_reason = "cache_threshold"
            seq.completion_tokens = 0
            return
        rng = self.request_rng(req, seq)
        room = cfg.max_model_len - prompt.length
        cap = room if req.max_tokens is None else min(req.max_tokens, room)
        reasoning = self.reasoning if req.reasoning is not None and cfg.mode != "echo" else None
        if (req.tools is not None and req.tool_choice != "none" and self.tool_synthesizer is not None
                and self.tool_synthesizer.wants_tools(req)):
            if self.tool_synthesizer.synthesize(req, seq, rng, work_left):
                if reasoning is not None:
                    reasoning.apply(seq, rng, req.reasoning, cap, True, keep_all=True)
                if req.stop or req.stop_token_ids:
                    stop_in_tool_calls(req, seq, reasoning)
                if req.remote_decode:
                    seq.finish_reason = "remote_decode"
                return
        room = cfg.max_model_len - prompt.length
        # --response-length max: a capped answer runs to its cap, as with ignore_eos; natural: to
        # the shorter of its cap and its own length (see natural_length)
        cap, run_to_cap = req.max_tokens, req.ignore_eos
        if req.max_tokens is not None and not req.ignore_eos and cfg.response_length != "histogram":
            run_to_cap = True
            natural = getattr(self.responses, "natural_length", None)     # random mode's sources
            if cfg.response_length == "natural" and natural is not None:
                cap = min(req.max_tokens, natural(rng, room))
        seq.pieces, seq.ids, seq.finish_reason = self.responses.respond(rng, prompt, cap, room, run_to_cap)
        if cap != req.max_tokens and cap < min(req.max_tokens, room):
            seq.finish_reason = "stop"             # it ended on its own, before the cap
        if len(seq.pieces) < req.min_tokens and cfg.mode != "echo":
            # vLLM's min_tokens: no end of sequence before it; the answer then ends at once
            seq.pieces, seq.ids, _ = self.responses.respond(rng, prompt, min(req.min_tokens, room), room, True)
            seq.finish_reason = "length" if len(seq.pieces) >= min(req.max_tokens or room, room) else "stop"
        if req.allowed_token_ids and not seq.tool_calls:
            # vLLM's allowed_token_ids: the logits of every other id are masked, so each token is one of them
            allowed = req.allowed_token_ids
            seq.ids = [allowed[int(rng.random() * len(allowed))] for _ in seq.ids]
            decode = self.tokenizer.decode_ids
            seq.pieces = [decode([t]) for t in seq.ids]
            seq.text = None
        structured = False
        if req.response_format and cfg.mode != "echo" and self.tool_synthesizer is not None:
            structured = self.tool_synthesizer.apply_response_format(req, seq, rng)
        if reasoning is not None:
            # within max_tokens and the context's room (no max_tokens: the room alone; a None cap
            # failed the request with a 500 on a structured answer)
            limit = room if cap is None else min(cap, room)
            reasoning.apply(seq, rng, req.reasoning, limit, seq.finish_reason == "stop", keep_all=structured)
        if req.stop_token_ids:
            seq.cut_at_token(req.stop_token_ids, req.include_stop_str_in_output, req.min_tokens or 0)
        if req.stop:
            seq.cut_at_stop(req.stop, req.include_stop_str_in_output, req.min_tokens or 0)
        if seq.reasoning_span is not None:
            reasoning.clamp(seq)
        elif req.stream and req.stop and not req.include_stop_str_in_output:
            seq.hold_back(stop_buffer_length(req.stop))
        seq.completion_tokens = len(seq.pieces)
        if req.remote_decode:
            seq.finish_reason = "remote_decode"

    def _below_cache_threshold(self, req: GenerationRequest, seq: Sequence) -> bool:
        if self.kv_cache is None:
            return False
        t = req.cache_hit_threshold
        if t is None or not 0 <= t <= 1:
            t = self.config.global_cache_hit_threshold
            if t <= 0:
                return False
        rate = seq.cached_tokens / seq.prompt_len if seq.prompt_len else 0.0
        return rate < t
