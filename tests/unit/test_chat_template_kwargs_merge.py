"""The merge of ``--default-chat-template-kwargs`` under a request's ``chat_template_kwargs``
(vLLM 0.34's ``merge_kwargs``, ``vllm/renderers/params.py``) and the thinking switch the
reasoning reads from it (``ChatCompletionRequest.build_chat_params`` then ``with_defaults``)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from generation.adapters.sampling import _thinking, template_kwargs
from generation.tokenization.chat_template import merge_kwargs
from generation.tokenization.tokenizer import chat_options


def test_request_values_override_but_not_null_or_auto():
    defaults = {"enable_thinking": False, "a": 1}
    assert merge_kwargs(defaults, {"enable_thinking": True, "b": 2}) == {"enable_thinking": True, "a": 1, "b": 2}
    assert merge_kwargs(defaults, {"enable_thinking": None, "a": "auto", "c": None}) == defaults
    assert merge_kwargs(defaults, {"a": 0, "b": False, "c": ""}) == {"enable_thinking": False, "a": 0, "b": False,
                                                                     "c": ""}
    assert merge_kwargs(None, None) == {} and merge_kwargs(None, {"x": None}) == {}
    assert defaults == {"enable_thinking": False, "a": 1}                 # not mutated


def test_template_kwargs_reads_the_flag():
    sim = SimpleNamespace(config=SimpleNamespace(default_chat_template_kwargs={"enable_thinking": False}))
    assert template_kwargs(sim, None) == {"enable_thinking": False}
    assert template_kwargs(sim, "not a dict") == {"enable_thinking": False}
    assert template_kwargs(sim, {"enable_thinking": True}) == {"enable_thinking": True}
    sim.config.default_chat_template_kwargs = None
    assert template_kwargs(sim, {"x": "auto", "y": 1}) == {"y": 1}


def test_chat_options_merges_its_defaults():
    body = SimpleNamespace(chat_template_kwargs={"enable_thinking": None, "k": 1})
    assert chat_options(body, {"enable_thinking": False})["chat_template_kwargs"] == {"enable_thinking": False, "k": 1}
    assert chat_options(body)["chat_template_kwargs"] == {"k": 1}


@pytest.mark.parametrize("own,effort,defaults,on", [
    (None, None, None, None),                                     # nothing says: the parser's default
    (None, None, {"enable_thinking": False}, False),              # the flag's
    ({"enable_thinking": True}, None, {"enable_thinking": False}, True),
    ({"enable_thinking": "auto"}, None, {"enable_thinking": False}, False),
    (None, "high", {"enable_thinking": False}, True),             # the effort's switch is the request's
    (None, "none", {"enable_thinking": True}, False),
    ({"enable_thinking": False}, "high", None, False),            # the request's switch beats its effort
    ({"thinking": False}, None, {"enable_thinking": True}, False),  # any switch of the request beats the flag
])
def test_thinking_switch_precedence(own, effort, defaults, on):
    assert _thinking(own, effort, merge_kwargs(defaults, own)) is on
