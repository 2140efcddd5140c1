"""``POST /v1/systemone`` (vLLM 0.34's ``generate/structured_decisions``): the questions of its own
types (choice, noul, score) asked as the Decisions API's reads, the response's shape and exact
values, the validation errors in vLLM's words (pydantic's, against a replica of its request
model), the handler's checks in its order, the 501 where the model has no handler, the engine's
accounting and the route's registration."""
from __future__ import annotations

import json
import math
import random
import re
import time
from typing import Any

import pydantic
import pytest

from generation.adapters import structured_decisions as sd
from generation.content.label_logprobs import label_logprobs
from support import assert_error, check_inference_route, check_label_reads, post_ok, pydantic_400

PATH = "/v1/systemone"
QUESTIONS = {"bug": {"type": "noul", "instructions": "Is this a bug?"},
             "area": {"type": "choice", "instructions": "Which area?", "criteria": {"payments": "money", "search": None}},
             "urgency": {"type": "score", "instructions": "How urgent?", "criteria": ["low", "medium", "high"]}}
BODY = {"state": {"ticket": "The checkout page times out", "user": "ann"}, "instructions": "You triage tickets.",
        "questions": QUESTIONS}
ASKS = ["Question: Is this a bug?\nyes\nno\nAnswer with yes or no only.",
        "Question: Which area?\nA: payments - money\nB: search\nAnswer with the letter of one option only.",
        "Question: How urgent?\n0: low\n1: medium\n2: high\nAnswer with the number of one level only."]
LABELS = [["yes", "no"], ["A", "B"], ["0", "1", "2"]]
NOT_SERVED = "The model does not support the structured decision API"


def post(c, body, **kw):
    return c.post(PATH, json=body, **kw)


def ok(c, body, **kw) -> dict:
    return post_ok(c, PATH, body, **kw)


error = assert_error


def test_the_question_types_prompts():
    """``QuestionType.prompt`` per type: a noul's sides show their description or their label
    alone, a score's levels are their ``str`` (a number's Python spelling), an instruction
    that is not a string is its ``str``, none leaves the heading out."""
    qs = [sd.build_question(k, sd.QuestionSpec(**v)) for k, v in QUESTIONS.items()]
    assert [sd.question_text(q) for q in qs] == ASKS
    noul = sd.build_question("n", sd.QuestionSpec("noul", None, {"true": "it works", "false": 0}))
    assert sd.question_text(noul) == "yes: it works\nno: 0\nAnswer with yes or no only."
    score = sd.build_question("s", sd.QuestionSpec("score", {"a": 1}, [1, 2.5, True, None]))
    assert sd.question_text(score) == ("Question: {'a': 1}\n0: 1\n1: 2.5\n2: True\n3: None\n"
                                       "Answer with the number of one level only.")


def test_response_shape_and_exact_values(api):
    out = ok(api, BODY)
    tok = api.sim.tokenizer
    state = json.dumps(BODY["state"], ensure_ascii=False)
    reads = []
    for ask, labels in zip(ASKS, LABELS):
        ids = tok.tokenize_chat([{"role": "system", "content": BODY["instructions"]},
                                 {"role": "user", "content": f"{state}\n\n{ask}"}])[0]
        lps = label_logprobs(ids, [tok.encode(x)[0][-1] for x in labels])
        top = max(lps)
        probs = [math.exp(v - top) / sum(math.exp(w - top) for w in lps) for v in lps]
        reads.append((len(ids), probs, 1 - math.exp(label_logprobs(ids, [0])[0])))
    (n0, p0, m0), (n1, p1, m1), (n2, p2, m2) = reads
    assert re.fullmatch(r"decision-[0-9a-f]{32}", out.pop("id"))
    assert time.time() - 5 <= out.pop("created") <= time.time()
    assert out == {
        "object": "structured_decision", "model": "test-model",
        "answers": {
            "bug": {"type": "noul", "noul": p0[0], "probabilities": {"yes": p0[0], "no": p0[1]},
                    "confidence": max(p0) * m0},
            "area": {"type": "choice", "choice": "payments", "probabilities": {"payments": p1[0], "search": p1[1]},
                     "confidence": p1[0] * m1},
            "urgency": {"type": "score", "score": p2[1] + 2 * p2[2], "legend": {"0": "low", "1": "medium", "2": "high"},
                        "probabilities": {"0": p2[0], "1": p2[1], "2": p2[2]}, "confidence": p2[0] * m2}},
        "usage": {"input_tokens": n0 + n1 + n2, "output_tokens": 3},
        "diagnostics": {"bug": {"label_mass": m0, "argmax_is_label": True},
                        "area": {"label_mass": m1, "argmax_is_label": True},
                        "urgency": {"label_mass": m2, "argmax_is_label": True}},
        "joint": None}
    assert (n0 + n1 + n2, p1.index(max(p1)), p2.index(max(p2))) == (166, 0, 0)      # pinned
    assert list(ok(api, BODY)) == ["id", "object", "created", "model", "answers", "usage", "diagnostics", "joint"]


def test_ids_state_forms_and_instructions(api):
    assert ok(api, {**BODY, "request_id": "r1"})["id"] == "decision-r1"
    assert ok(api, {**BODY, "request_id": "r1"}, headers={"X-Request-Id": "h"})["id"] == "decision-h"
    as_text = ok(api, {**BODY, "state": json.dumps(BODY["state"], ensure_ascii=False)})
    assert as_text["answers"] == ok(api, BODY)["answers"]          # a JSON state reads as its json.dumps
    assert ok(api, {**BODY, "instructions": None})["usage"]["input_tokens"] < 166      # no system turn
    assert ok(api, {**BODY, "state": None, "priority": 0, "joint": False, "model": None})["model"] == "test-model"


def test_handler_checks_in_vllms_order(app_client):
    c = app_client()
    q = {"type": "noul"}
    error(post(c, {**BODY, "model": "x", "chat_template_kwargs": {"chat_template": "t"}}), 404,
          "The model `x` does not exist.", "model")
    error(post(c, {**BODY, "questions": {}, "chat_template_kwargs": {"chat_template": "t"}}), 400,
          "Chat template is passed with request, but --trust-request-chat-template is not set. Refused request with "
          "untrusted chat template.")
    error(post(c, {**BODY, "questions": {}}), 400, "questions: needs at least one question")
    error(post(c, {**BODY, "questions": {str(i): {"type": "poll"} for i in range(65)}}), 400,
          "questions: at most 64 for this model")
    cases = [({"a": q, "b": {**q, "y": 1, "x": 2}, "": q}, "question 'b': unknown field(s) ['x', 'y']"),
             ({"a": q, "": q}, "question ids must be non-empty"),
             ({"a": {"type": "poll"}}, "unknown question type 'poll'; supported: ['choice', 'noul', 'score']"),
             ({"a": {"type": "choice", "criteria": {}}},
              "question 'a': choice criteria must map option names to a description or null"),
             ({"a": {"type": "noul", "criteria": {"yes": "x"}}},
              "question 'a': noul criteria must be an object with true and false"),
             ({"a": {"type": "score", "criteria": ["one"]}}, "question 'a': score criteria must be an ordered list of levels"),
             ({"a": {"type": "score", "criteria": [1, "1"]}}, "question 'a': duplicate option names"),
             ({"a": {"type": "score", "criteria": list(range(11))}}, "question 'a': at most 10 options for this model"),
             ({"a": {"type": "choice", "criteria": {str(i): None for i in range(27)}}},
              "question 'a': at most 26 options for this model")]
    for questions, message in cases:
        error(post(c, {**BODY, "questions": questions, "images": ["u"], "joint": True}), 400, message)
    error(post(c, {**BODY, "images": ["u"], "audio": ["a"], "videos": [], "joint": True}), 400,
          "this model does not take audio, image inputs")
    error(post(c, {**BODY, "joint": True, "chat_template_kwargs": {"enable_thinking": True}}), 400,
          "joint: this model reads each question on its own; joint reads need DiffusionGemma")
    error(post(c, {**BODY, "chat_template_kwargs": {"enable_thinking": True}, "priority": 1}), 400,
          "a read is the reply's first token, so thinking must be off")
    assert ok(c, {**BODY, "priority": 2})["answers"] == ok(c, BODY)["answers"]     # vLLM 0.34's FCFS ignores it
    assert ok(app_client("--scheduling-policy", "priority"), {**BODY, "priority": -3})["answers"] == \
        ok(c, BODY)["answers"]
    assert ok(app_client("--trust-request-chat-template"), {**BODY, "chat_template_kwargs": {"chat_template": "t"}})
    assert c.sim.running == 0 and not c.sim.waiting


@pytest.mark.parametrize("flags", [("--runner", "pooling", "--convert", "classify"), ("--tokens-only",),
                                   ("--logprobs-mode", "raw_logits")])
def test_no_handler_is_a_501_after_the_bodys_validation(app_client, flags):
    c = app_client(*flags)
    error(post(c, BODY), 501, NOT_SERVED)
    assert post(c, {**BODY, "extra": 1}).status_code == 400
    assert PATH in c.get("/openapi.json").json()["paths"]


# ---- validation ------------------------------------------------------------------------------------

class QuestionSpec(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")
    type: str
    instructions: Any = ""
    criteria: Any = None


class VllmRequest(pydantic.BaseModel):
    """vLLM 0.34's StructuredDecisionRequest (structured_decisions/protocol.py), cache_salt's
    validator aside."""
    model_config = pydantic.ConfigDict(extra="forbid")
    model: str | None = None
    state: Any = pydantic.Field(...)
    questions: dict[str, QuestionSpec] = pydantic.Field(...)
    instructions: str | None = None
    images: list[str] | None = None
    audio: list[str] | None = None
    videos: list[str] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    joint: pydantic.StrictBool = False
    cache_salt: str | None = None
    priority: int = pydantic.Field(default=0, ge=-(2 ** 63), le=2 ** 63 - 1)
    request_id: str = "x"


def test_random_bodies_are_read_as_pydantic_reads_them():
    from generation.errors import InvalidParam
    from schemas.structured_decisions import load_structured_decision
    rng = random.Random(5)
    atoms = [None, True, False, 5, 1.5, "3", " 7 ", "x", [], {}, {"a": 1}, 2 ** 63, -(2 ** 63) - 1, 1e3]

    def spec():
        d = {"type": rng.choice(["choice", "noul", "score", rng.choice(atoms)])}
        for key in ("instructions", "criteria", "extra"):
            if rng.random() < 0.3:
                d[key] = rng.choice(atoms)
        if rng.random() < 0.1:
            del d["type"]
        return rng.choice(atoms) if rng.random() < 0.1 else d
    names = ["model", "instructions", "images", "audio", "videos", "chat_template_kwargs", "joint", "priority",
             "request_id", "extra"]
    valid = 0
    for _ in range(1500):
        body = {name: rng.choice(atoms + [["u", rng.choice(atoms)]]) for name in names if rng.random() < 0.15}
        if rng.random() < 0.9:
            body["state"] = rng.choice(atoms)
        if rng.random() < 0.9:
            body["questions"] = {rng.choice(["a", "b", "str", "default"]): spec() for _ in range(rng.randint(0, 3))} \
                if rng.random() < 0.9 else rng.choice(atoms)
        try:
            got = load_structured_decision(body)
            seen = None
        except InvalidParam as e:
            got, seen = None, (e.message, e.param)
        assert seen == pydantic_400(VllmRequest, body), body
        if got is not None:
            valid += 1
            ref = VllmRequest.model_validate(body)
            assert {k: (s.type, s.instructions, s.criteria, s.extra) for k, s in got.questions.items()} == {
                k: (s.type, s.instructions, s.criteria, tuple(s.model_extra)) for k, s in ref.questions.items()}
            assert (got.model, got.state, got.priority, got.joint) == (ref.model, ref.state, ref.priority, ref.joint)
    assert valid > 100


def test_some_validation_errors_word_for_word(api):
    error(post(api, {"questions": [], "cache_salt": ""}), 400,
          "Parameter 'cache_salt' must be a non-empty string if provided. (parameter=cache_salt)", "cache_salt")
    error(post(api, {"questions": {"a": {"criteria": 1}}, "images": ["u", 5], "joint": "no", "x": 1}), 400,
          "5 validation errors:\n"
          "  {'type': 'missing', 'loc': 'body.state', 'msg': 'Field required', 'input': '<dict of 4 items>'}\n"
          "  {'type': 'missing', 'loc': 'body.questions.a.type', 'msg': 'Field required', 'input': '<dict of 1 items>'}\n"
          "  {'type': 'string_type', 'loc': 'body.images.1', 'msg': 'Input should be a valid string', 'input': '5'}\n"
          "  {'type': 'bool_type', 'loc': 'body.joint', 'msg': 'Input should be a valid boolean', 'input': 'no'}\n"
          "  {'type': 'extra_forbidden', 'loc': 'body.x', 'msg': 'Extra inputs are not permitted', 'input': '1'}",
          "body.state")


# ---- the engine and the route ------------------------------------------------------------------------

def test_each_question_is_a_read_on_the_engine(app_client):
    check_label_reads(app_client, PATH, BODY, {**BODY, "questions": {"bug": QUESTIONS["bug"], "area": QUESTIONS["area"]}})


def test_the_route_is_an_inference_route(app_client):
    check_inference_route(app_client, PATH, BODY, "create_structured_decision")


def test_a_state_nested_past_pythons_recursion_limit_is_read(app_client):
    """``state`` is written into the prompt with ``json.dumps`` (vLLM's ``state_text``); orjson
    parses a body 1,024 levels deep, and at Python's 1,000-frame limit a state 990 levels deep
    raised RecursionError: a 500 with a traceback.  It is now written (under a raised limit) and
    read as any state: served where it fits the context, vLLM's context 400 where it does not."""
    depth = 990
    raw = '{"model": "test-model", "questions": {"bug": {"type": "noul", "instructions": "Is this a bug?"}}, ' \
          '"state": ' + '{"a": ' * depth + '1' + '}' * depth + '}'
    headers = {"content-type": "application/json"}
    r = app_client("--max-model-len", "32000").post(PATH, content=raw, headers=headers)
    assert r.status_code == 200 and r.json()["object"] == "structured_decision", r.text[:300]
    r = app_client().post(PATH, content=raw, headers=headers)
    assert r.status_code == 400 and "maximum context length is 1024 tokens" in r.json()["error"]["message"], r.text[:300]
