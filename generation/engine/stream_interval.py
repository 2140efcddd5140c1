"""vLLM's stream interval (``--stream-interval``, a request's ``stream_interval``): how many of a
streamed request's tokens go out together.

vLLM (``vllm/v1/engine/output_processor.py``, 0.17 to 0.34): ``RequestState.from_new_request``
takes ``max(sampling_params.stream_interval, SchedulerConfig.stream_interval)``, and with more
than 1 ``RequestState.make_request_output`` makes a streamed (``DELTA``) output only when the
request finished, or for its first token, or once the tokens not yet sent number at least the
interval; that output carries every unsent token (their text, token ids and logprobs), so one SSE
chunk holds several tokens.  Every API's stream goes through it.  The engine's metrics do not:
``_update_stats_from_output`` counts each engine-core output (per step), before the interval is
applied, so TTFT, the inter-token latencies and the token counters stay per token.

Here :meth:`~generation.engine.simulator.Simulator.stream` yields a group as a ``slice`` of token
indexes (one token as an ``int``): :func:`grouped` in the default mode, :func:`ready` in step mode
(``StepEngine.stream`` and ``TokenSchedule.emitted``); renderers read a stream item with
:func:`token_span` and :func:`within`.
"""
from __future__ import annotations

import time

monotonic = time.monotonic
FLUSH = -1          # Simulator.FLUSH


def effective(own: int | None, server: int) -> int:
    """A request's stream interval: its own (``stream_interval``, None when not given) clamped
    up to the server's ``--stream-interval`` (``RequestState.from_new_request``)."""
    return server if own is None or own < server else own


def ready(sent: int, avail: int, end: int, interval: int) -> int:
    """How far a stream may send once ``avail`` of its ``end`` tokens are made and ``sent`` of
    them went out (``make_request_output``'s rule, ``interval`` > 1): all of them when the request
    finished (``avail >= end``) or ``interval`` are unsent, only the first token (sent alone) when
    none went out yet, else none (``sent``)."""
    if avail <= sent:
        return sent
    if not sent:
        return 1
    if avail - sent < interval and avail < end:
        return sent
    return avail


def grouped(sim, seq, n: int, interval: int, target: float, prev: float, deadlines: bool, wait):
    """``Simulator.run`` after the first token in the default mode (``interval`` > 1): tokens
    ``1..n-1`` in groups of ``interval`` (the last one shorter, with the finish), each yielded as
    ``slice(k, stop)`` (an ``int`` for a lone token) once its last token is due, after that
    deadline (``deadlines``: a ``float`` for the driver to wait for) or FLUSH.

    Each token still gets its own deadline (drawn as ``Simulator.run`` draws them) and its own
    inter-token latency, as vLLM's engine records them: a token inside a group counts as made at
    its deadline, the group's last when the group goes out.  The group's emission lag (sent minus
    its last token's deadline) is observed once per token, as step mode's sends observe theirs.
    ``target``: the first token's deadline; ``prev``: when it went out (monotonic s); ``wait``:
    ``Simulator._wait_until``."""
    lat = sim.latency
    itl_obs, itl_n = sim.metrics.itl.observe, sim.metrics.itl.observe_n
    lag_n = sim.metrics.lag.observe_n
    k = 1
    while k < n:
        stop = k + interval if k + interval < n else n
        inner = stop - k - 1        # the group's tokens before its last
        itl = lat.constant_itl()    # per group: a latency change (/admin/config) applies from the next
        if itl == 0.0:              # every token due now: the groups at once, observed together (as run())
            for j in range(k, n, interval):
                end = j + interval if j + interval < n else n
                yield slice(j, end) if end - j > 1 else j
            lag_n(0.0, n - k)
            itl_n(0.0, n - k)
            return
        if itl is None:
            made = []               # their deadlines
            for _ in range(inner):
                target += lat.itl(sim.running)
                made.append(target)
            target += lat.itl(sim.running)
        else:
            first = target + itl
            target += itl * (inner + 1)
            made = None if first > prev else [first + j * itl for j in range(inner)]
        now = monotonic()
        if target > now:
            yield target if deadlines else FLUSH
            target = wait(seq, target, deadlines)       # (moved by a keep pause meanwhile)
            now = monotonic()
        if made is None:            # a constant latency, on time: the inner gaps observed together
            if inner:
                itl_obs(first - prev)
                itl_n(itl, inner - 1)
                prev = target - itl
        else:
            for t in made:
                if t > prev:        # (the group before went out late: no negative gap)
                    itl_obs(t - prev)
                    prev = t
                else:
                    itl_obs(0.0)
        itl_obs(now - prev)
        prev = now
        lag_n(now - target, stop - k)
        yield slice(k, stop) if stop - k > 1 else k
        k = stop


def token_span(k) -> tuple[int, int]:
    """``(start, stop)`` of a token item of ``Simulator.stream``: one token index, or a
    ``slice`` of them that goes out as one output."""
    return (k, k + 1) if k.__class__ is int else (k.start, k.stop)


def within(k, lo: int, hi: int) -> tuple[int, int]:
    """:func:`token_span` of ``k`` cut to tokens ``lo..hi-1`` (empty: ``start >= stop``): the part
    of a group in one block of the answer (its reasoning, a tool call)."""
    a, b = token_span(k)
    return (a if a > lo else lo), (b if b < hi else hi)


def parts(items, lo: int, hi: int):
    """:func:`within` of each ``(sequence, item)`` of ``items``, those with no token there left
    out."""
    for _, k in items:
        a, b = within(k, lo, hi)
        if a < b:
            yield a, b
