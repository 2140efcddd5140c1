"""``POST /v1/decisions`` (vLLM 0.34's ``openai/decisions``, OpenAI's ``client.decisions.create``):
the prompts vLLM asks each question with, the response's shape and exact values per question
type, every validation error in vLLM's words (pydantic's, against a replica of its request
models), the handler's checks in its order, vLLM's 501 where the model has no handler, the
engine's accounting (one read per question: metrics, queue, latency, admission, step mode), the
OpenAI SDK, the route's registration and ``--api-key``."""
from __future__ import annotations

import math
import os
import random
from typing import Annotated, Literal

import pydantic
import pytest

from generation.adapters import decisions as dec
from generation.content.label_logprobs import label_logprobs
from support import assert_error, check_inference_route, check_label_reads, metric, post_ok, pydantic_400, scrape
from support.tokenizer_hub import MODEL, template_ids

PATH = "/v1/decisions"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
STEP = ("--latency-calculator", "step", "--force-dummy-tokenizer")
REPLY = "Answer with the letter of one option only."
PREDICATE = {"type": "predicate", "instructions": "Is it about weather?", "name": "weather"}
CHOICE = {"type": "choice", "instructions": "Which color?",
          "choices": [{"value": "blue"}, {"value": "red", "description": "warm"}, {"value": True}]}
SCORE = {"type": "score", "instructions": "How sunny?",
         "levels": [{"label": "not"}, {"label": "a bit", "description": "some sun"}, {"label": "very"}]}
BODY = {"model": "test-model", "input": "The sky is blue today.", "questions": [PREDICATE, CHOICE, SCORE]}


def post(c, body, **kw):
    return c.post(PATH, json=body, **kw)


def ok(c, body, **kw) -> dict:
    return post_ok(c, PATH, body, **kw)


error = assert_error


# ---- the prompts ----------------------------------------------------------------------------------

ASKS = [
    "Question: Is it about weather?\nA: false\nB: true\n" + REPLY,
    'Question: Which color?\nA: "blue"\nB: "red" - warm\nC: true\n' + REPLY,
    "Question: How sunny?\nA: not\nB: a bit - some sun\nC: very\n" + REPLY,
]


def test_each_question_is_asked_as_a_letter_choice():
    """``make_read_question`` + ``ChoiceQuestion.prompt``: a predicate's options are false and
    true, a choice's values are JSON (a string quoted, a boolean bare), a score's its levels'
    labels; a description follows " - "; no instructions, no "Question:" line."""
    from schemas.decisions import load_decisions
    b = load_decisions(BODY)
    assert [dec.question_text(q) for q in b.questions] == ASKS
    bare = load_decisions({**BODY, "questions": [{"type": "choice", "instructions": "",
                                                  "choices": [{"value": 'say "hi"'}, {"value": "日本"}]}]})
    assert dec.question_text(bare.questions[0]) == 'A: "say \\"hi\\""\nB: "日本"\n' + REPLY


def test_the_input_is_the_text_or_the_messages_joined():
    """``adapters.input_text``: parts joined by a newline, messages by a blank line."""
    from schemas.decisions import load_decisions
    b = load_decisions({**BODY, "input": [{"role": "user", "content": "one"},
                                          {"role": "user", "type": "message", "content": [
                                              {"type": "input_text", "text": "two"}, {"type": "input_text", "text": "three"}]},
                                          {"role": "user", "content": []}]})
    assert dec.input_text(b.input) == "one\n\ntwo\nthree\n\n"


# ---- shapes and values ----------------------------------------------------------------------------

def softmax(values):
    top = max(values)
    e = [math.exp(v - top) for v in values]
    return [x / sum(e) for x in e]


def expected_reads(tokenizer, text: str, asks: list, **chat) -> list:
    """Each question's ``(prompt ids, probs, label_mass)``: its whole prompt rendered and tokenized
    as vLLM does, the letters' tokens read with the synthetic logprobs (their softmax), the labels
    sharing what one other token (id 0) leaves."""
    out = []
    for ask in asks:
        ids = tokenizer.tokenize_chat([{"role": "user", "content": f"{text}\n\n{ask}"}], **chat)[0]
        labels = [tokenizer.encode(letter)[0][-1] for letter in "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[:ask.count("\n") - 1]]
        lps = label_logprobs(ids, labels)
        out.append((ids, softmax(lps), 1 - math.exp(label_logprobs(ids, [0])[0])))
    return out


def test_response_shape_and_exact_values(api):
    r = post(api, BODY)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    out = r.json()
    (p_ids, p, _), (c_ids, c, c_mass), (s_ids, s, s_mass) = expected_reads(api.sim.tokenizer, BODY["input"], ASKS)
    assert (len(p_ids), len(c_ids), len(s_ids)) == (33, 40, 38)                 # pinned: the prompts must not drift
    assert out == {
        "model": "test-model",
        "answers": [
            {"type": "predicate", "name": "weather", "probability": p[1]},
            {"type": "choice", "name": None, "choice": True,
             "probabilities": [{"value": "blue", "probability": c[0]}, {"value": "red", "probability": c[1]},
                               {"value": True, "probability": c[2]}],
             "confidence": c[2] * c_mass},
            {"type": "score", "name": None, "score": s[1] + 2 * s[2],
             "probabilities": [{"value": 0, "label": "not", "probability": s[0]},
                               {"value": 1, "label": "a bit", "probability": s[1]},
                               {"value": 2, "label": "very", "probability": s[2]}],
             "confidence": s[2] * s_mass}],
        "usage": {"input_tokens": 111, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                  "output_tokens": 3, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 114}}
    assert (c.index(max(c)), s.index(max(s))) == (2, 2)       # the chosen ones: true, "very"
    # pinned: the values must not drift between versions (1 / (1 + e^2): ranks two apart)
    assert [a.get("probability", a.get("confidence")) for a in out["answers"]] == [
        0.11920292202211755, 0.6330592168231638, 0.9310747260753148]
    assert list(out) == ["model", "answers", "usage"]         # no id, no created: DecisionResponse's fields
    assert [list(a) for a in out["answers"]] == [["type", "name", "probability"],
                                                 ["type", "name", "choice", "probabilities", "confidence"],
                                                 ["type", "name", "score", "probabilities", "confidence"]]


def test_answers_are_valid_and_repeat_for_the_same_prompt(api, app_client):
    """A greedy read: the same question about the same input gets the same answer, in any
    request, in any process, whatever ``--seed``; every answer is a valid value for its question."""
    rng = random.Random(3)
    for _ in range(20):
        n = rng.randint(2, 26)
        q = [{"type": "choice", "instructions": "Pick", "choices": [{"value": f"o{i}"} for i in range(n)]},
             {"type": "score", "instructions": "Rate", "levels": [{"label": str(i)} for i in range(rng.randint(2, 10))]},
             {"type": "predicate", "instructions": "Yes?"}]
        body = {"model": "test-model", "input": " ".join(rng.choice("abcdefg") for _ in range(30)), "questions": q}
        out = ok(api, body)
        choice, score, pred = out["answers"]
        probs = [x["probability"] for x in choice["probabilities"]]
        assert abs(sum(probs) - 1) < 1e-9 and choice["choice"] == f"o{probs.index(max(probs))}"
        assert 0.63 * max(probs) < choice["confidence"] < max(probs) and 0 < pred["probability"] < 1
        assert 0 <= score["score"] <= len(q[1]["levels"]) - 1 and 0 < score["confidence"] < 1
        assert out == ok(app_client("--seed", "99"), body)


def test_the_same_answers_whatever_the_inputs_form(api):
    """Messages read as their joined text: the same prompts, the same answers and usage."""
    as_messages = {**BODY, "input": [{"role": "user", "content": [{"type": "input_text", "text": "The sky is"},
                                                                  {"type": "input_text", "text": "blue today."}]}]}
    assert ok(api, as_messages) == ok(api, {**BODY, "input": "The sky is\nblue today."})


def test_model_names_a_lora_and_unknown_models_are_404(app_client):
    c = app_client("--lora-modules", "my-lora=/tmp/x")
    assert ok(c, {**BODY, "model": "my-lora"})["model"] == "my-lora"
    assert ok(c, {**BODY, "model": ""})["model"] == "test-model"
    error(post(c, {**BODY, "model": "other"}), 404, "The model `other` does not exist.", "model")


def test_a_real_tokenizer_counts_each_whole_prompt(app_client, hub, ref):
    """The input is tokenized once and each question's tokens added: the same ids as vLLM's
    whole prompt, rendered through the model's chat template and tokenized without special
    tokens (a byte-level BPE here)."""
    c = app_client("--tokenizers-cache-dir", os.path.join(hub, "hub"), model=MODEL)
    body = {**BODY, "model": MODEL, "input": "Hello there, how are you today? déjà vu."}
    out = ok(c, body)
    whole = [template_ids(ref, [{"role": "user", "content": f"{body['input']}\n\n{ask}"}]) for ask in ASKS]
    assert out["usage"]["input_tokens"] == sum(map(len, whole))
    reads = expected_reads(c.sim.tokenizer, body["input"], ASKS)
    assert [r[0] for r in reads] == whole
    assert out["answers"][0]["probability"] == reads[0][1][1]


def test_a_template_that_changes_the_content_renders_each_prompt_whole(app_client, hub, ref):
    """A chat template that does not place the user's content as it is (upper-cased here): the
    input cannot be tokenized once, so each prompt is rendered and tokenized whole, as vLLM does."""
    upper = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] | upper }}<|im_end|>\n"
             "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    c = app_client("--tokenizers-cache-dir", os.path.join(hub, "hub"), "--chat-template", upper, model=MODEL)
    out = ok(c, {**BODY, "model": MODEL})
    whole = [template_ids(ref, [{"role": "user", "content": f"{BODY['input']}\n\n{ask}"}], chat_template=upper)
             for ask in ASKS]
    assert out["usage"]["input_tokens"] == sum(map(len, whole))
    assert out["answers"][0]["probability"] == expected_reads(c.sim.tokenizer, BODY["input"], ASKS)[0][1][1]
    small = app_client("--tokenizers-cache-dir", os.path.join(hub, "hub"), "--chat-template", upper,
                       "--max-request-work", str(3 * len(whole[0]) + 10), model=MODEL)
    assert post(small, {**BODY, "model": MODEL}).json()["error"]["message"].startswith(
        f"This request asks for {3 * len(whole[0]) + 11} output tokens")      # bounded from the first prompt


# ---- validation ------------------------------------------------------------------------------------

class Strict(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")


Short = Annotated[pydantic.StrictStr, pydantic.Field(max_length=1048576)]
Text = Annotated[pydantic.StrictStr, pydantic.Field(max_length=10485760)]


class DecisionInputText(Strict):
    type: Literal["input_text"]
    text: Text


class DecisionInputMessage(Strict):
    role: Literal["user"]
    content: Text | Annotated[list[DecisionInputText], pydantic.Field(max_length=16384)]
    type: Literal["message"] = "message"

    @pydantic.model_validator(mode="before")
    @classmethod
    def no_images(cls, data):
        if isinstance(data, dict) and isinstance(data.get("content"), list) and any(
                isinstance(p, dict) and p.get("type") == "input_image" for p in data["content"]):
            raise ValueError("Decisions supports text input only; images are not supported")
        return data


class Base(Strict):
    instructions: Short
    name: Short | None = None

    @pydantic.model_validator(mode="after")
    def named(self):
        if "name" in self.model_fields_set and self.name is None:
            raise ValueError("name must be a string when provided")
        return self


class Predicate(Base):
    type: Literal["predicate"]


class ChoiceOption(Strict):
    value: pydantic.StrictStr | pydantic.StrictBool
    description: Short = ""


class Choice(Base):
    type: Literal["choice"]
    choices: list[ChoiceOption] = pydantic.Field(min_length=2, max_length=255)

    @pydantic.model_validator(mode="after")
    def distinct(self):
        values = [(type(c.value), c.value) for c in self.choices]
        if len(set(values)) != len(values):
            raise ValueError("choice values must be distinct")
        return self


class ScoreLevel(Strict):
    label: Short
    description: Short = ""


class Score(Base):
    type: Literal["score"]
    levels: list[ScoreLevel] = pydantic.Field(min_length=2, max_length=10)


class VllmRequest(Strict):
    """vLLM 0.34's DecisionRequest (openai/decisions/protocol.py), cache_salt's validator aside."""
    model: Short
    input: Text | Annotated[list[DecisionInputMessage], pydantic.Field(max_length=131072)]
    questions: list[Annotated[Predicate | Choice | Score, pydantic.Field(discriminator="type")]] = pydantic.Field(
        min_length=1, max_length=200)
    safety_identifier: Annotated[pydantic.StrictStr, pydantic.Field(max_length=128)] | None = None
    joint: pydantic.StrictBool = False
    cache_salt: str | None = None


def vllm_validation_error(body: dict) -> tuple[str, str] | None:
    """``(message, param)`` of vLLM's validation handler for ``body``, or None when it passes."""
    return pydantic_400(VllmRequest, body)


def random_body(rng: random.Random, p: float) -> dict:
    """A Decisions body, each part replaced by a wrong value with probability ``p``."""
    def bad():
        return rng.random() < p

    def junk():
        return rng.choice([None, 5, True, "x", [], {}, 1.5, "input_image", "user"])

    def text():
        return junk() if bad() else rng.choice(["a", "", "hello world", "ü"])

    def drop_or_add(d: dict) -> dict:
        if bad() and d:
            d.pop(rng.choice(list(d)))
        if bad():
            d[rng.choice(["extra", "arguments", "call_id"])] = junk()
        return d

    def message():
        if bad():
            return junk()
        content = text() if rng.random() < 0.5 else [
            junk() if bad() else {"type": "input_image" if bad() else "input_text", "text": text()}
            for _ in range(rng.randint(0, 3))]
        d = {"role": rng.choice(["assistant", 1]) if bad() else "user", "content": content}
        if rng.random() < 0.3:
            d["type"] = junk() if bad() else "message"
        return drop_or_add(d)

    def option(key):
        if bad():
            return junk()
        d = {key: junk() if bad() else rng.choice(["a", "b", True, False, "true"] if key == "value" else ["lo", "hi"])}
        if rng.random() < 0.4:
            d["description"] = text()
        return drop_or_add(d)

    def question():
        if bad():
            return junk()
        kind = rng.choice(["predicate", "choice", "score"])
        d = {"type": junk() if bad() else kind, "instructions": text()}
        if rng.random() < 0.3:
            d["name"] = None if bad() else text()
        if kind != "predicate":
            key = "choices" if kind == "choice" else "levels"
            d[key] = junk() if bad() else [option("value" if kind == "choice" else "label")
                                           for _ in range(rng.randint(1 if bad() else 2, 4))]
        return drop_or_add(d)

    d = {"model": text(), "input": text() if rng.random() < 0.4 else [message() for _ in range(rng.randint(0, 3))],
         "questions": junk() if bad() else [question() for _ in range(rng.randint(0 if bad() else 1, 4))]}
    if rng.random() < 0.2:
        d["safety_identifier"] = None if bad() else text()
    if rng.random() < 0.2:
        d["joint"] = junk() if bad() else False
    if bad():
        d["prompt_cache_key"] = "k"
    return drop_or_add(d)


@pytest.mark.parametrize("p", [0.03, 0.2])
def test_random_bodies_are_read_as_pydantic_reads_them(p):
    """Bodies with random wrong parts: the same errors (or none) as vLLM's models, and a valid
    body read to the same values."""
    from generation.errors import InvalidParam
    from schemas.decisions import load_decisions
    rng = random.Random(11)
    valid = 0
    for _ in range(1500):
        body = random_body(rng, p)
        try:
            got = load_decisions(body)
            seen = None
        except InvalidParam as e:
            got, seen = None, (e.message, e.param)
        assert seen == vllm_validation_error(body), body
        if got is not None:
            valid += 1
            ref = VllmRequest.model_validate(body)
            assert [(q.type, q.instructions, q.name) for q in got.questions] == \
                [(q.type, q.instructions, q.name) for q in ref.questions]
            assert [q.options for q in got.questions] == [
                tuple((o.value, o.description) for o in q.choices) if q.type == "choice" else
                tuple((o.label, o.description) for o in q.levels) if q.type == "score" else () for q in ref.questions]
            assert dec.input_text(got.input) == dec.input_text(
                ref.input if isinstance(ref.input, str) else
                [m.content if isinstance(m.content, str) else [x.text for x in m.content] for m in ref.input])
    assert valid > (300 if p < 0.1 else 5)


Q = {"type": "predicate", "instructions": "q"}


@pytest.mark.parametrize("body", [
    {},
    {"model": "m", "input": "x", "questions": [Q], "prompt_cache_key": "k", "arguments": 1},
    {"model": "m", "input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}], "questions": [Q]},
    {"model": "m", "input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}], "questions": [Q]},
    {"model": "m", "input": "x", "questions": [{"type": "choice", "instructions": "q", "choices": [{"value": "a"}, {"value": "a"}]}]},
    {"model": "m", "input": "x", "questions": [{"type": "choice", "instructions": "q", "name": None,
                                                "choices": [{"value": "true"}, {"value": True}]}]},
    {"model": "m", "input": "x", "questions": [{"type": "poll"}, {"instructions": "q"}, "x"]},
    {"model": "m", "input": "x", "questions": [Q] * 201},
    {"model": "m", "input": "x", "questions": [{"type": "score", "instructions": "q", "levels": [{"label": "a"}]}]},
    {"model": "m" * 1048577, "input": 5, "questions": [], "joint": 1, "safety_identifier": "s" * 129},
])
def test_validation_errors_are_pydantics_in_vllms_words(api, body):
    message, param = vllm_validation_error(body)
    error(post(api, body), 400, message, param)


def test_some_validation_errors_word_for_word(api):
    error(post(api, {**BODY, "store": True}), 400, "1 validation error:\n  {'type': 'extra_forbidden', 'loc': "
          "'body.store', 'msg': 'Extra inputs are not permitted', 'input': 'True'}", "body.store")
    error(post(api, {**BODY, "input": [{"role": "user", "content": [{"type": "input_image"}]}]}), 400,
          "2 validation errors:\n  {'type': 'string_type', 'loc': 'body.input.constrained-str', 'msg': 'Input "
          "should be a valid string', 'input': '<list of 1 items>'}\n  {'type': 'value_error', 'loc': 'body.input.0', "
          "'msg': 'Value error, Decisions supports text input only; images are not supported', 'input': '<dict of 2 "
          "items>', 'ctx': {'error': ValueError('Decisions supports text input only; images are not supported')}}",
          "body.input.constrained-str")
    error(post(api, {**BODY, "questions": [{"type": "poll", "instructions": "q"}]}), 400,
          "1 validation error:\n  {'type': 'union_tag_invalid', 'loc': 'body.questions.0', 'msg': \"Input tag 'poll' "
          "found using 'type' does not match any of the expected tags: 'predicate', 'choice', 'score'\", 'input': "
          "'<dict of 2 items>', 'ctx': {'discriminator': \"'type'\", 'tag': 'poll', 'expected_tags': \"'predicate', "
          "'choice', 'score'\"}}", "body.questions.0")


def test_cache_salt_is_checked_before_the_fields(api):
    message = "Parameter 'cache_salt' must be a non-empty string if provided. (parameter=cache_salt)"
    for salt in ("", 5):
        error(post(api, {"cache_salt": salt}), 400, message, "cache_salt")
    assert ok(api, {**BODY, "cache_salt": "salt"})["answers"] == ok(api, BODY)["answers"]


def test_body_must_be_a_json_object(api):
    error(api.post(PATH, content=b"[1]", headers={"Content-Type": "application/json"}), 400,
          "1 validation error:\n  {'type': 'model_attributes_type', 'loc': 'body', 'msg': 'Input should be a valid "
          "dictionary or object to extract fields from', 'input': '<list of 1 items>'}", "body")
    assert api.get(PATH).status_code == 405


# ---- the handler's checks --------------------------------------------------------------------------

def test_handler_checks_in_vllms_order(api):
    many = [Q] * 65
    wide = {"type": "choice", "instructions": "q", "choices": [{"value": f"v{i}"} for i in range(27)]}
    error(post(api, {**BODY, "model": "x", "questions": many, "joint": True}), 404, "The model `x` does not exist.",
          "model")
    error(post(api, {**BODY, "questions": many + [wide], "joint": True}), 400, "questions: at most 64 for this model")
    error(post(api, {**BODY, "questions": [Q, wide], "joint": True}), 400,
          "This model supports at most 26 choices per question")
    error(post(api, {**BODY, "questions": [Q], "joint": True}), 400,
          "joint: this model reads each question on its own; joint reads need DiffusionGemma")
    assert len(ok(api, {**BODY, "questions": [Q] * 64})["answers"]) == 64
    assert len(ok(api, {**BODY, "questions": [{**wide, "choices": wide["choices"][:26]}]})["answers"][0][
        "probabilities"]) == 26
    assert api.sim.running == 0 and not api.sim.waiting


def test_prompts_past_the_context_are_refused(app_client):
    """Each prompt within ``--max-model-len`` (vLLM's renderer, the first too long named), then
    room for the one output token (vLLM's engine)."""
    c = app_client("--max-model-len", "38")        # prompts of 33, 40 and 38 tokens
    error(post(c, BODY), 400, "This model's maximum context length is 38 tokens. However, your prompt contains 40 "
          "input tokens, which exceeds this limit even without any output tokens. Please reduce the length of the "
          "input prompt. (parameter=input_tokens, value=40)")
    error(post(c, {**BODY, "questions": [PREDICATE, SCORE]}), 400,
          "The decoder prompt (length 38) plus the number of requested output tokens (at least 1) is longer than the "
          "maximum model length of 38. Make sure that `max_model_len` is no smaller than the number of text tokens "
          "(prompt + requested output tokens).")
    assert ok(c, {**BODY, "questions": [PREDICATE]})["usage"]["input_tokens"] == 33


def test_work_is_bounded_before_anything_runs(app_client):
    c = app_client("--max-request-work", "100")
    # prompts 33 + 40 + 38, plus 1 + 2, 1 + 3 and 1 + 3 labels
    error(post(c, BODY), 400, "This request asks for 122 output tokens and logprob alternatives (questions' prompt "
          "tokens + questions x (1 + options)), more than the 100 one request may ask (--max-request-work).",
          "questions")
    assert post(c, {**BODY, "questions": [PREDICATE, CHOICE]}).status_code == 200      # 73 + 7
    assert c.sim.running == 0 and not c.sim.waiting


# ---- which models serve it --------------------------------------------------------------------------

NOT_SERVED = "The model does not support the Decisions API"


@pytest.mark.parametrize("flags", [("--runner", "pooling", "--convert", "embed"), ("--tokens-only",),
                                   ("--logprobs-mode", "raw_logits"), ("--logprobs-mode", "processed_logits")])
def test_no_handler_is_a_501_after_the_bodys_validation(app_client, flags):
    c = app_client(*flags)
    error(post(c, BODY), 501, NOT_SERVED)
    error(post(c, {**BODY, "model": "x"}), 501, NOT_SERVED)               # before the model is looked up
    assert post(c, {**BODY, "extra": 1}).status_code == 400               # after the body is read
    assert PATH in c.get("/openapi.json").json()["paths"]


def test_the_models_architecture_decides(app_client):
    c = app_client("--seed", "5")
    try:
        for arch in ("LlamaForCausalLM", "ClefOmniForJointSchema", "D3ForSequenceClassification"):
            c.sim.config.model_architecture = arch
            error(post(c, BODY), 501, NOT_SERVED)
        for arch in ("Qwen3ForCausalLM", "Gemma4ForConditionalGeneration", None):
            c.sim.config.model_architecture = arch
            assert post(c, BODY).status_code == 200
        assert ok(app_client("--logprobs-mode", "processed_logprobs"), BODY)["answers"] == ok(c, BODY)["answers"]
    finally:
        c.sim.config.model_architecture = None


# ---- the engine ----------------------------------------------------------------------------------------

def test_each_question_is_a_read_on_the_engine(app_client):
    c = app_client("--time-to-first-token", "0")
    assert ok(c, BODY)["usage"]["input_tokens"] == metric(scrape(c), "vllm:prompt_tokens_total") == 111
    check_label_reads(app_client, PATH, BODY, {**BODY, "questions": [PREDICATE, SCORE]})


def test_admission_limits_count_one_sequence_per_question(app_client):
    c = app_client("--max-num-queued-reqs", "2")
    error(post(c, BODY), 503, "The engine is currently busy and cannot accept new requests. Please try again later "
          "or on a different instance.")
    assert len(ok(c, {**BODY, "questions": [PREDICATE, SCORE]})["answers"]) == 2
    q = app_client("--max-num-seqs", "1", "--max-waiting-queue-length", "1")
    error(post(q, BODY), 429, "Failed to enqueue request, waiting requests queue is full")
    assert q.sim.running == 0 and not q.sim.waiting


def test_prefix_cache_hits_count_in_usage(app_client):
    """``--enable-kvcache``: the reads share the input's blocks (each read after the first finds
    them); a repeated decision finds every full block of every prompt."""
    c = app_client("--enable-kvcache", "--block-size", "16", "--max-model-len", "2048")
    body = {**BODY, "input": "The sky is blue today. " * 20}
    prompts = [r[0] for r in expected_reads(c.sim.tokenizer, body["input"], ASKS)]
    lengths = [len(p) for p in prompts]
    first = ok(c, body)["usage"]
    assert first["input_tokens"] == sum(lengths)
    common = next(i for i in range(min(lengths)) if len({p[i] for p in prompts}) > 1)
    shared = common // 16 * 16                 # the full blocks every prompt starts with
    assert shared == 112
    assert first["input_tokens_details"] == {"cached_tokens": 2 * shared,
                                             "cache_write_tokens": sum(n // 16 * 16 for n in lengths) - 2 * shared}
    again = ok(c, body)["usage"]
    assert again["input_tokens_details"] == {"cached_tokens": sum(n // 16 * 16 for n in lengths),
                                             "cache_write_tokens": 0}


def test_step_mode_runs_each_question_through_the_engine(app_client):
    c = app_client(*STEP, "--max-model-len", "2048", model=LLAMA)
    body = {**BODY, "model": LLAMA, "input": "The sky is blue today. " * 40}
    first = ok(c, body)
    lengths = [len(r[0]) for r in expected_reads(c.sim.tokenizer, body["input"], ASKS)]
    assert first["usage"]["input_tokens"] == sum(lengths) and first["usage"]["output_tokens"] == 3
    assert first["answers"] == ok(app_client("--max-model-len", "2048"), {**body, "model": "test-model"})["answers"]
    m = scrape(c)
    assert metric(m, "vllm:request_success_total", finished_reason="length") == 3
    assert metric(m, "vllm:generation_tokens_total") == 3
    assert metric(m, "vllm:time_to_first_token_seconds_sum") >= 3 * c.sim.config.step.step_time.frontend_time()
    again = ok(c, body)
    assert again["answers"] == first["answers"]
    block = c.sim.config.block_size           # the step engine's prefix cache: every full block found again
    assert again["usage"]["input_tokens_details"] == {"cached_tokens": sum(n // block * block for n in lengths),
                                                      "cache_write_tokens": 0}
    assert metric(scrape(c), "vllm:kv_cache_usage_perc") == 0.0


# ---- clients and the route -------------------------------------------------------------------------------

def test_openai_sdk_decisions_create(api):
    """``client.decisions.create`` (openai 3.57) against the simulator: typed answers, usage; a
    parameter vLLM forbids (``prompt_cache_key``) is its 400."""
    import openai
    client = api.openai()
    d = client.decisions.create(model="test-model", input="The sky is blue today.",
                                questions=[PREDICATE, CHOICE, SCORE])
    assert [a.type for a in d.answers] == ["predicate", "choice", "score"]
    assert d.model == "test-model" and d.answers[0].name == "weather" and d.answers[1].choice is True
    assert d.answers[2].probabilities[1].label == "a bit" and d.usage.total_tokens == 114
    assert d.usage.input_tokens_details.cached_tokens == 0 and d.usage.output_tokens_details.reasoning_tokens == 0
    assert d.model_dump(exclude_unset=True) == ok(api, BODY)
    messages = client.decisions.create(model="test-model", questions=[PREDICATE],
                                       input=[{"role": "user", "content": "The sky is blue today."}])
    assert messages.answers[0].probability == d.answers[0].probability
    with pytest.raises(openai.BadRequestError) as e:
        client.decisions.create(model="test-model", input="x", questions=[PREDICATE], prompt_cache_key="k")
    assert e.value.body["param"] == "body.prompt_cache_key"


def test_the_route_is_an_inference_route(app_client):
    """Its OpenAPI operation (``create_decision_v1_decisions_post``), ``--api-key``, ``/load``
    (vLLM's ``create_decision`` is a ``load_aware_call``)."""
    check_inference_route(app_client, PATH, BODY, "create_decision")


def test_request_id_header_is_echoed(app_client):
    c = app_client("--enable-request-id-headers")
    assert post(c, BODY, headers={"X-Request-Id": "abc"}).headers["X-Request-Id"] == "abc"
