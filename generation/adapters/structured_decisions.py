"""vLLM 0.34's structured decisions (``POST /v1/systemone``) on the simulator's engine: the same
reads as the Decisions API (:mod:`generation.adapters.decisions`), asked in vLLM's own question
types.

Source: ``vllm/entrypoints/generate/structured_decisions/`` (``serving.py``
``ServingStructuredDecisions.create_decision``, ``parse_questions``; ``protocol.py``) and
``vllm/entrypoints/openai/decisions/question_types.py`` (``build_question``, the ``choice``,
``noul`` and ``score`` types).

**The request**: ``state`` (a text, or any JSON value, read as ``json.dumps``), ``questions`` an
object of question id -> ``{"type", "instructions", "criteria"}`` asked in that order,
``instructions`` (a system turn before each question's user turn), ``chat_template_kwargs`` (over
``enable_thinking: false``; thinking on is refused), ``priority``, ``request_id``, ``cache_salt``,
``joint`` (refused), ``images`` / ``audio`` / ``videos`` (refused: no model here takes media).

**The question types** (each asked as its own read): ``choice`` (``criteria`` an object of option
name -> description or null; labels ``A``, ``B``, ...: ``"A: name - description"``, "Answer with
the letter of one option only."), ``noul`` (yes or no; ``criteria`` null or ``{"true", "false"}``
descriptions; labels ``yes`` and ``no``: ``"yes: description"`` or ``"yes"``, "Answer with yes or
no only."), ``score`` (``criteria`` a list of at least two level names; labels ``0`` to ``9``:
``"0: name"``, "Answer with the number of one level only.").  The answers: a choice's ``choice``
and ``probabilities`` by name, a noul's ``noul`` (the yes probability) and ``probabilities``
``{"yes", "no"}`` with ``confidence`` the likelier side's probability times the label mass, a
score's expected ``score``, ``legend`` and ``probabilities`` by level index; ``diagnostics`` per
question (``label_mass``, ``argmax_is_label``: whether the greedy reply is a label).

Checks, in vLLM's order after :mod:`schemas.structured_decisions`: the model (404); a
``chat_template`` in ``chat_template_kwargs`` without ``--trust-request-chat-template`` (400); the
questions (``parse_questions``: at least one, at most 64, per question in order: unknown fields,
an empty id, an unknown type, its criteria, duplicate option names, at most 26 / 2 / 10 options);
media (400); ``joint``; admission (as the Decisions API); thinking on (400); the prompts (context,
``--max-request-work``); the priority (the engine's check).

Which models serve it: as the Decisions API (:func:`generation.adapters.decisions.served`), where
vLLM's own condition is wider (its pooling read strategies, Clef and Decision 3.0 models, serve
this route only); otherwise 501 "The model does not support the structured decision API".
Simplified as the Decisions API is; the greedy reply is taken to be a label when the top label's
probability is above what the non-label token has.
"""
from __future__ import annotations

import string
from dataclasses import dataclass

from ..errors import UNTRUSTED_TEMPLATE, APIError, InvalidParam
from .decisions import (ID_PREFIX, LABELS, MAX_QUESTIONS, admit_reads, read_prompts, run_reads)
from .fields import scheduling_priority
from .json_dumps import dumps_deep

LABEL_SETS = {"choice": LABELS, "noul": ("yes", "no"), "score": tuple(string.digits)}    # QuestionType.label_set
REPLIES = {"choice": "Answer with the letter of one option only.", "noul": "Answer with yes or no only.",
           "score": "Answer with the number of one level only."}


@dataclass
class QuestionSpec:
    """One question as the request gives it (``QuestionSpec``): ``extra`` its unknown keys."""
    type: str
    instructions: object = ""
    criteria: object = None
    extra: tuple = ()


@dataclass
class StructuredDecisionRequest:
    """vLLM 0.34's ``StructuredDecisionRequest`` (``questions``: id -> :class:`QuestionSpec`)."""
    state: object
    questions: dict
    model: str | None = None
    instructions: str | None = None
    images: list | None = None
    audio: list | None = None
    videos: list | None = None
    chat_template_kwargs: dict | None = None
    joint: bool = False
    cache_salt: str | None = None
    priority: int = 0
    request_id: str | None = None       # vLLM's default is a fresh uuid: the route draws one


@dataclass(frozen=True)
class Question:
    """A built question (``question_types.Question``): ``options`` ``(name, description or None)``."""
    id: str
    type: str
    instructions: str
    options: tuple


class NotServed(APIError):
    """``api_router.py`` ``create_structured_decision``: ``raise NotImplementedError(...)``."""

    def __init__(self):
        super().__init__("The model does not support the structured decision API", 501, None, "NotImplementedError")


def _text(value) -> str:
    return "" if value is None else str(value)


def parse_options(qid: str, kind: str, criteria) -> list[tuple]:
    """``parse_options`` of question type ``kind``.  Raises InvalidParam with its words."""
    if kind == "choice":
        if not isinstance(criteria, dict) or not criteria:
            raise InvalidParam(f"question {qid!r}: choice criteria must map option names to a description or null")
        return [(str(name), None if d is None else str(d)) for name, d in criteria.items()]
    if kind == "noul":
        if criteria is not None and (not isinstance(criteria, dict) or not criteria.keys() <= {"true", "false"}):
            raise InvalidParam(f"question {qid!r}: noul criteria must be an object with true and false")
        criteria = criteria or {}
        return [("yes", None if criteria.get("true") is None else str(criteria["true"])),
                ("no", None if criteria.get("false") is None else str(criteria["false"]))]
    if not isinstance(criteria, list) or len(criteria) < 2:
        raise InvalidParam(f"question {qid!r}: score criteria must be an ordered list of levels")
    return [(str(level), None) for level in criteria]


def build_question(qid: str, spec: QuestionSpec) -> Question:
    """``parse_questions``' checks of one question, then ``build_question``."""
    if spec.extra:
        raise InvalidParam(f"question {qid!r}: unknown field(s) {sorted(spec.extra)}")
    if not qid:
        raise InvalidParam("question ids must be non-empty")
    if spec.type not in LABEL_SETS:
        raise InvalidParam(f"unknown question type {spec.type!r}; supported: {sorted(LABEL_SETS)}")
    options = parse_options(qid, spec.type, spec.criteria)
    names = [name for name, _ in options]
    if len(set(names)) != len(names):
        raise InvalidParam(f"question {qid!r}: duplicate option names")
    limit = min(len(LABELS), len(LABEL_SETS[spec.type]))
    if len(options) > limit:
        raise InvalidParam(f"question {qid!r}: at most {limit} options for this model")
    instructions = spec.instructions if isinstance(spec.instructions, str) else _text(spec.instructions)
    return Question(qid, spec.type, instructions, tuple(options))


def question_text(q: Question) -> str:
    """``QuestionType.prompt``: the heading, a line per option, the reply instruction."""
    lines = []
    for label, (name, description) in zip(LABEL_SETS[q.type], q.options):
        if q.type == "noul":       # a side shows its description, or its label alone
            lines.append(f"{label}: {description}" if description else label)
        else:
            lines.append(f"{label}: {name} - {description}" if description else f"{label}: {name}")
    lines.append(REPLIES[q.type])
    body = "\n".join(lines)
    return f"Question: {q.instructions}\n{body}" if q.instructions else body


def answer(q: Question, probs: list[float], mass: float) -> dict:
    """``QuestionType.answer``."""
    top = max(range(len(probs)), key=probs.__getitem__)
    if q.type == "choice":
        return {"type": "choice", "choice": q.options[top][0],
                "probabilities": {name: p for (name, _), p in zip(q.options, probs)}, "confidence": probs[top] * mass}
    if q.type == "noul":
        return {"type": "noul", "noul": probs[0], "probabilities": {"yes": probs[0], "no": probs[1]},
                "confidence": max(probs) * mass}
    return {"type": "score", "score": sum(i * p for i, p in enumerate(probs)),
            "legend": {str(i): name for i, (name, _) in enumerate(q.options)},
            "probabilities": {str(i): p for i, p in enumerate(probs)}, "confidence": probs[top] * mass}


def state_text(state) -> str:
    """``state_text``: a text as it is, any other JSON value as ``json.dumps`` writes it."""
    return state if isinstance(state, str) else dumps_deep(state, ensure_ascii=False)


def prepare(sim, b: StructuredDecisionRequest, base: str):
    """Every check and the reads' sequences of a loaded request, before anything is admitted:
    ``(model, rid, questions, seqs, reads)``.  Raises the domain errors (module docstring)."""
    model, lora = sim.resolve_model(b.model)
    if (b.chat_template_kwargs or {}).get("chat_template") is not None and not sim.config.trust_request_chat_template:
        raise InvalidParam(UNTRUSTED_TEMPLATE)
    if not b.questions:
        raise InvalidParam("questions: needs at least one question")
    if len(b.questions) > MAX_QUESTIONS:
        raise InvalidParam(f"questions: at most {MAX_QUESTIONS} for this model")
    questions = [build_question(qid, spec) for qid, spec in b.questions.items()]
    media = sorted(name for name, items in (("image", b.images), ("audio", b.audio), ("video", b.videos)) if items)
    if media:
        raise InvalidParam(f"this model does not take {', '.join(media)} inputs")
    admit_reads(sim, len(questions), b.joint)
    if (b.chat_template_kwargs or {}).get("enable_thinking"):
        raise InvalidParam("a read is the reply's first token, so thinking must be off")
    labels = [LABEL_SETS[q.type][:len(q.options)] for q in questions]
    prompts = read_prompts(sim, state_text(b.state), [question_text(q) for q in questions], list(map(len, labels)),
                           b.instructions, b.chat_template_kwargs)
    priority = scheduling_priority(sim, b.priority)
    rid = ID_PREFIX + base
    seqs, reads = run_reads(sim, rid, model, lora, prompts, labels, b.cache_salt, priority)
    return model, rid, questions, seqs, reads


def response(rid: str, model: str, questions: list, seqs, reads: list, created: int) -> dict:
    """vLLM's ``StructuredDecisionResponse.model_dump()``."""
    inputs = sum(s.prompt_len for s in seqs)
    return {"id": rid, "object": "structured_decision", "created": created, "model": model,
            "answers": {q.id: answer(q, *r) for q, r in zip(questions, reads)},
            "usage": {"input_tokens": inputs, "output_tokens": sum(s.completion_tokens for s in seqs)},
            "diagnostics": {q.id: {"label_mass": mass, "argmax_is_label": max(probs) * mass > 1 - mass}
                            for q, (probs, mass) in zip(questions, reads)},
            "joint": None}
