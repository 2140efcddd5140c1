"""vLLM's stream-interval rule (``RequestState.make_request_output`` in
``vllm/v1/engine/output_processor.py``) as :mod:`generation.engine.stream_interval` applies it,
step by step, and the helpers renderers read stream items with."""
from __future__ import annotations

import pytest

from generation.engine.stream_interval import effective, ready, token_span, within


def outputs(made_per_step: list, end: int, interval: int) -> list:
    """The tokens of each output a request sends when its steps make ``made_per_step`` tokens."""
    sent, made, out = 0, 0, []
    for n in made_per_step:
        made += n
        upto = ready(sent, made, end, interval)
        if upto > sent:
            out.append(upto - sent)
            sent = upto
    return out


@pytest.mark.parametrize("end, interval, want", [(10, 4, [1, 4, 4, 1]), (10, 1, [1] * 10), (9, 4, [1, 4, 4]),
                                                 (1, 4, [1]), (3, 8, [1, 2]), (12, 3, [1, 3, 3, 3, 2])])
def test_one_token_a_step(end, interval, want):
    assert outputs([1] * end, end, interval) == want


def test_several_tokens_a_step():
    """Several tokens at one look (a reader that came late: vLLM's output processor looked at every
    step): the first token still goes alone, as vLLM sent it at its own step; later outputs carry
    all that is unsent once enough are."""
    assert outputs([3, 2, 1, 4], 10, 4) == [1, 4, 5]
    assert outputs([10], 10, 4) == [1]                 # the rest waits for the next look


def test_the_finish_sends_the_rest():
    assert ready(5, 7, 7, 4) == 7 and ready(5, 7, 9, 4) == 5


@pytest.mark.parametrize("own, server, want", [(None, 1, 1), (None, 4, 4), (2, 4, 4), (6, 4, 6), (1, 1, 1)])
def test_the_request_value_clamped_up_to_the_servers(own, server, want):
    assert effective(own, server) == want


def test_stream_items():
    assert token_span(5) == (5, 6) and token_span(slice(3, 7)) == (3, 7)
    assert within(slice(3, 7), 5, 20) == (5, 7) and within(slice(3, 7), 0, 4) == (3, 4)
    a, b = within(2, 5, 9)
    assert a >= b
