"""vLLM 0.34's weight versions: the label of the weights that sampled each output token.

The engine core holds one label (``EngineCore._weight_version``, ``"default"`` at start), set by
``/update_weight_version`` or ``/finish_weight_update`` with a ``weight_version`` (RL trainers
set it between weight updates, while generation is paused), and attaches it to every step's
outputs (``_attach_weight_version``).  The output processor starts a span for a request whenever
the label of a step that gave it new tokens differs from its last one
(``RequestState.track_weight_version``), and a finished output carries the spans,
``[{"version", "start", "end"}]`` over its output tokens (``_weight_version_spans``): in
``/inference/v1/generate`` answers always, in chat and completions answers with
``return_weight_versions``.

Here the label changes for every request in flight at once (:func:`set_weight_version`): one
that has made tokens under the old label (:meth:`Sequence.made_tokens`) records where the new
one starts; one that has made none takes the label current at its end (:func:`spans`)."""
from __future__ import annotations

from time import monotonic

DEFAULT_VERSION = "default"      # EngineCore.__init__: self._weight_version


def set_weight_version(sim, version: str, in_flight) -> None:
    """vLLM's ``EngineCore.set_weight_version``: ``sim.weight_version`` becomes ``version``;
    each of ``in_flight`` (Sequences) that made some of its tokens under the old label and has
    more to make starts a span of the new one there.  As ``track_weight_version`` sees only
    the label of the step that makes the next token, a span no token was made under is
    replaced, and one of the label running (a label set back) is none."""
    old = sim.weight_version
    if version != old:
        now, itl = monotonic(), sim.config.inter_token_latency
        for s in in_flight:
            made = s.made_tokens(itl, now)
            if made <= 0:
                continue
            starts = s.weight_starts
            if starts is None:
                starts = s.weight_starts = [(old, 0)]
            if made >= len(s.ids):
                continue
            if len(starts) > 1 and starts[-1][1] >= made:
                starts.pop()             # a label no token was made under: the next token's counts
            if starts[-1][0] != version:
                starts.append((version, made))
    sim.weight_version = version


def spans(seq, version: str) -> list[dict]:
    """A finished sequence's ``weight_versions`` (``_weight_version_spans``): its spans over the
    output tokens it answers with (``completion_tokens``), ``version`` (the engine's label now)
    for one that saw no change while it made tokens; ``[]`` for an output without tokens."""
    n = seq.completion_tokens
    if n <= 0:
        return []
    starts = seq.weight_starts or [(version, 0)]
    starts = [st for k, st in enumerate(starts) if k == 0 or st[1] < n]
    ends = [st[1] for st in starts[1:]] + [n]
    return [{"version": v, "start": s, "end": e} for (v, s), e in zip(starts, ends)]
