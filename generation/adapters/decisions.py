"""vLLM 0.34's Decisions API (``POST /v1/decisions``, OpenAI's ``client.decisions.create``) on
the simulator's engine.

Source: ``vllm/entrypoints/openai/decisions/`` (``serving.py`` ``OpenAIServingDecisions.
create_decisions``, ``adapters.py``, ``question_types.py``, ``strategies.py``
``NextTokenStrategy``, ``state.py`` ``init_decisions_state``) and
``vllm/entrypoints/generate/label_reads.py`` (``next_token_label_reads``).

**Which models serve it** (``state.py``, ``strategies.py`` ``select_read_strategy``): vLLM
registers the route for every model, and answers 501 ``NotImplementedError`` "The model does not
support the Decisions API" (after the body's validation) when the model has no handler: its
architecture is not one of :data:`GENERATE_ARCHITECTURES` (the ``READ_STRATEGIES`` whose task is
``generate``), it is a pooling model, it has no tokenizer (``--tokens-only``), or
``--logprobs-mode`` is a logits mode.  The simulator knows the architecture from the model's
``config.json`` (``config.model_architecture``); a model without one (``test-model``) is served
as a ``NextTokenStrategy`` model.

**The work** (``NextTokenStrategy.read``): one engine request per question (``{id}-{i}``, the
request id ``decision-<id>``), all added at once.  Question ``i`` is asked as a letter choice
whatever its type (``adapters.make_read_question``): its options are ``false`` and ``true`` (a
predicate), the choices' values as JSON (``"red"``, ``true``) or the levels' labels, labelled
``A``, ``B``, ...; its prompt is one user turn, ``"{input}\\n\\n{question}"`` with the question
``"Question: {instructions}\\n"`` (left out without instructions), one line per option ``"A:
{name}"`` (``" - {description}"`` when there is one) and ``"Answer with the letter of one option
only."``, rendered through the chat template with the generation prompt and
``enable_thinking=False`` (over ``--default-chat-template-kwargs``) and tokenized without special
tokens; ``input`` is the text, or the messages' texts joined (``adapters.input_text``: parts by
``"\\n"``, messages by ``"\\n\\n"``).  Each request is ``max_tokens=1``, ``temperature=0``,
``logprob_token_ids`` the option labels' tokens: a prefill and one output token, run by the
engine like any request (``--max-num-seqs``, the queue, the prefix cache, default or step timing,
``/metrics``: one ``request_success`` per question).

**The answer** (``adapters.make_answer``): ``probs`` is the softmax of the labels' logprobs and
``label_mass`` their total probability; a predicate's ``probability`` is the ``true`` label's, a
choice's and a score's ``confidence`` is the top label's probability times ``label_mass``, a
score's ``score`` the expected level (``sum(i * p_i)``).  ``usage`` sums the reads' prompt tokens,
output tokens (one each), prefix-cache hits (``cached_tokens``) and written prompt blocks
(``cache_write_tokens``); ``reasoning_tokens`` is 0.  The response has no ``id`` or ``created``:
``DecisionResponse`` is ``model``, ``answers``, ``usage``.

Checks, in vLLM's order (each a 4xx in vLLM's envelope, after :mod:`schemas.decisions`): the
model (404); at most :data:`MAX_QUESTIONS` questions and :data:`LABELS` options (400); ``joint``
(400: no model here reads jointly); the admission limits for one sequence per question (503); each
prompt within the context (400, ``TokenizeParams``' words), the simulator's work bound; then the
engine's: a prompt of exactly ``--max-model-len`` tokens leaves no room for the output (400).

Simplified: the reads' logprobs are synthetic (:func:`read`), from
:mod:`generation.content.label_logprobs` (a function of the prompt and a token id, as
``/generative_scoring``'s: a greedy read of the same prompt gives the same answer, whatever
``--seed``); a label's token is the tokenizer's for the
letter alone (vLLM's ``reply_label_ids`` checks at start-up that each letter is one distinct token
after the chat prompt, and has no handler otherwise: not checked here); every served architecture
reads as ``NextTokenStrategy`` (vLLM's Liquid models word their prompts differently and
DiffusionGemma reads on a canvas, jointly when asked), and the warm-up prefill vLLM adds for
hybrid models with prefix caching is not run.  The input is rendered and tokenized once: the chat
template is rendered around a marker content, and each prompt is the tokens of the template's
head, the input and ``"\\n\\n"`` (shared) followed by the tokens of its question and the
template's tail.  That is vLLM's tokenization for the simulated tokenizer and for tokenizers whose
pre-tokenizer splits a newline from the letter after it (byte-level BPE); a SentencePiece
tokenizer may count a token differently at that seam.  A tokenizer whose text stays remote
(``--render-url``) or a template that does not place the content verbatim renders each prompt
whole, its work bounded by ``--max-request-work`` from the first prompt's length.

Everything here is free of Flask; the route is :mod:`blueprints.decisions`.
"""
from __future__ import annotations

import json
import math
import string
from dataclasses import dataclass

from generation.content.label_logprobs import label_logprobs
from generation.engine.admission import check_admission
from generation.engine.outputs import prompt_too_long
from generation.engine.request import GenerationRequest, Prompt
from generation.tokenization.chat_template import merge_kwargs
from generation.lanes import paced
from generation.tokenization.tokenizer import each_text

from ..errors import APIError, InvalidParam
from .base import check_size, check_work, created_cache_tokens, prefix_block
from .generative_scoring import label_probabilities, label_read_sequences

ID_PREFIX = "decision-"            # vLLM: request_id = f"decision-{base_id}"
LABELS = tuple(string.ascii_uppercase)     # question_types.LABELS
MAX_QUESTIONS = 64                 # NextTokenStrategy.limits().max_questions
REPLY = "Answer with the letter of one option only."     # ChoiceQuestion.reply_instruction
MARK = "<<vllm-sim decision content>>"                   # the content the chat template is probed with
OTHER_TOKEN = 0                    # the id whose synthetic logprob is the reply's chance not to be a label

# strategies.READ_STRATEGIES whose task is "generate" (the pooling ones serve /v1/systemone only)
GENERATE_ARCHITECTURES = frozenset({
    "Gemma4ForCausalLM", "Gemma4ForConditionalGeneration", "Gemma4UnifiedForConditionalGeneration",
    "Lfm2VlForConditionalGeneration", "Qwen3ForCausalLM", "Qwen3_5ForConditionalGeneration",
    "Qwen3_5MoeForConditionalGeneration", "DiffusionGemmaForBlockDiffusion"})
LOGPROBS_MODES = frozenset({"raw_logprobs", "processed_logprobs"})     # strategies.LOGPROBS_MODES


@dataclass(frozen=True)
class DecisionQuestion:
    """One question as :mod:`schemas.decisions` loads it: ``type`` ``"predicate"``, ``"choice"``
    or ``"score"``; ``options`` the choices' ``(value, description)`` or the levels' ``(label,
    description)`` (a predicate has none)."""
    type: str
    instructions: str
    name: str | None = None
    options: tuple = ()


@dataclass
class DecisionRequest:
    """vLLM 0.34's ``DecisionRequest``: ``input`` the text, or each message's content (a text, or
    the list of its parts' texts)."""
    model: str
    input: str | list
    questions: list
    safety_identifier: str | None = None
    joint: bool = False
    cache_salt: str | None = None


class NotServed(APIError):
    """The route's answer when vLLM has no Decisions handler for the model (``api_router.py``
    ``create_decision``: ``create_error_response(NotImplementedError(...))``)."""

    def __init__(self):
        super().__init__("The model does not support the Decisions API", 501, None, "NotImplementedError")


def served(cfg) -> bool:
    """Whether vLLM would have a Decisions handler for the model ``cfg`` serves (the module
    docstring's conditions)."""
    arch = cfg.model_architecture
    return (not cfg.pooling_kind and not cfg.tokens_only and cfg.logprobs_mode in LOGPROBS_MODES
            and (arch is None or arch in GENERATE_ARCHITECTURES))


# ---- prompts -----------------------------------------------------------------------------------------

def options(q: DecisionQuestion) -> list[tuple[str, str]]:
    """``make_read_question``'s options, ``(name, description)``: ``false`` and ``true``, the
    choices' values as JSON, or the levels' labels."""
    if q.type == "predicate":
        return [("false", ""), ("true", "")]
    if q.type == "choice":
        return [(json.dumps(value, ensure_ascii=False), description) for value, description in q.options]
    return list(q.options)


def question_text(q: DecisionQuestion) -> str:
    """The question as the model reads it after the input (``QuestionType.prompt``)."""
    lines = [f"{label}: {name} - {description}" if description else f"{label}: {name}"
             for label, (name, description) in zip(LABELS, options(q))]
    lines.append(REPLY)
    body = "\n".join(lines)
    return f"Question: {q.instructions}\n{body}" if q.instructions else body


def input_text(value) -> str:
    """``adapters.input_text``: the text, or the messages' texts (parts joined by newlines)
    joined by blank lines."""
    if isinstance(value, str):
        return value
    return "\n\n".join(c if isinstance(c, str) else "\n".join(c) for c in value)


def chat_options(sim, kwargs: dict | None = None) -> dict:
    """``ReadPromptRequest.build_chat_params`` over the server's defaults: the generation prompt,
    thinking off unless ``kwargs`` (a request's ``chat_template_kwargs``) say otherwise, no tools,
    the server's template."""
    kw = merge_kwargs(sim.config.default_chat_template_kwargs, merge_kwargs({"enable_thinking": False}, kwargs))
    return {"tools": None, "chat_template": None, "chat_template_kwargs": kw,
            "add_generation_prompt": True, "continue_final_message": False}


def check_lengths(sim, lengths: list[int]) -> None:
    """Every prompt within the context (rendering, ``TokenizeParams._token_len_check``), then
    room for the output token (the engine, ``InputProcessor._validate_prompt_len``); in question
    order.  Raises ContextLengthError / InvalidParam."""
    max_len = sim.config.max_model_len
    for n in lengths:
        if n > max_len:
            raise prompt_too_long(max_len, n)
    for n in lengths:
        if n == max_len:
            raise InvalidParam(f"The decoder prompt (length {n}) plus the number of requested output tokens (at "
                               f"least 1) is longer than the maximum model length of {max_len}. Make sure that "
                               f"`max_model_len` is no smaller than the number of text tokens (prompt + requested "
                               f"output tokens).")


def work(lengths: list[int], label_counts: list[int]) -> tuple[int, str, str]:
    """``(units, formula, param)`` for ``check_work``: the prompts' tokens (the input is copied
    into each) plus, per question, its output token and its labels' logprobs."""
    return sum(lengths) + sum(1 + n for n in label_counts), "questions' prompt tokens + questions x (1 + options)", \
        "questions"


def read_prompts(sim, text: str, asks: list[str], label_counts: list[int], system: str | None = None,
                 kwargs: dict | None = None) -> list[list]:
    """Each question's prompt ids: the user turn ``"{text}\\n\\n{ask}"`` after a system turn
    ``system`` (when given), rendered with :func:`chat_options` of ``kwargs``; after
    :func:`check_lengths` and ``check_work`` (``label_counts``: each question's labels).  The
    text is tokenized once; each question adds only its own tokens (see the module docstring)."""
    tok, opts = sim.tokenizer, chat_options(sim, kwargs)
    turns = [{"role": "system", "content": system}] if system else []
    chat_text = getattr(tok, "chat_text", None)
    frame = chat_text([*turns, {"role": "user", "content": MARK}], **opts) if chat_text is not None else None
    if frame is None or frame.count(MARK) != 1:
        return _whole_prompts(sim, turns, text, asks, label_counts, opts)
    head, tail = frame.split(MARK)
    prefix = f"{head}{text}\n\n"
    for ask in asks:                  # vLLM's bound on each rendered text before it is tokenized
        sim.check_prompt_chars(len(prefix) + len(ask) + len(tail), "input")
    shared = tok.encode(prefix)[0]
    own = each_text(lambda t: tok.encode(t)[0], [ask + tail for ask in asks])
    lengths = [len(shared) + len(ids) for ids in own]
    check_lengths(sim, lengths)
    check_work(sim, *work(lengths, label_counts))
    return [shared + ids for ids in paced(own)]


def _whole_prompts(sim, turns: list, text: str, asks: list, label_counts: list, opts: dict) -> list[list]:
    """Each prompt rendered and tokenized whole (vLLM's way), the first before the others, whose
    work is bounded from its length: the input is in every prompt."""
    def one(ask):
        messages = [*turns, {"role": "user", "content": f"{text}\n\n{ask}"}]
        return sim.tokenize_messages(messages, bounded="input", **opts)[0]
    first = one(asks[0])
    check_work(sim, *work([len(first)] * len(asks), label_counts))
    prompts = [first] + [one(ask) for ask in asks[1:]]
    lengths = [len(p) for p in prompts]
    check_lengths(sim, lengths)
    check_work(sim, *work(lengths, label_counts))
    return prompts


def admit_reads(sim, count: int, joint: bool) -> None:
    """``BaseServingDecisions._admit``: ``joint`` refused (no model here reads jointly), then
    ``count`` engine requests against the queue (429, the simulator's) and vLLM's admission
    limits (503), before anything is rendered."""
    if joint:
        raise InvalidParam("joint: this model reads each question on its own; joint reads need DiffusionGemma")
    check_size(sim, count, False)
    if sim.config.max_num_queued_reqs is not None or sim.config.max_num_queued_tokens is not None:
        check_admission(sim, count)


def run_reads(sim, rid: str, model: str, lora: str | None, prompts: list, labels: list[list[str]],
              cache_salt: str | None = None, priority: int = 0) -> tuple[list, list]:
    """``next_token_label_reads``: one engine request per prompt (``max_tokens=1``, greedy),
    prompt ``i`` read for the tokens of ``labels[i]`` (each label alone): ``(seqs, reads)``, each
    read :func:`read`'s ``(probs, label_mass)``."""
    req = GenerationRequest(request_id=rid, model=model, lora=lora, prompts=[Prompt(p) for p in prompts],
                            max_tokens=1, temperature=0.0, cache_salt=cache_salt, priority=priority)
    token = {}
    for label in {x for ls in labels for x in ls}:
        token[label] = sim.tokenizer.encode(label)[0][-1]
    label_sets = [[token[x] for x in ls] for ls in labels]
    seqs, logprobs = label_read_sequences(sim, req, label_sets)
    return seqs, [read(ls, lps, label_logprobs(s.prompt.ids, (OTHER_TOKEN,))[0])
                  for ls, lps, s in zip(label_sets, logprobs, seqs)]


# ---- answers -----------------------------------------------------------------------------------------

def read(labels: list[int], logprobs: list[float], other: float) -> tuple[list[float], float]:
    """``(probs, label_mass)`` of one read (``NextTokenStrategy._question_read``: the softmax of
    the labels' logprobs, and their total probability).  The synthetic reply's first token is a
    label, as a model told to answer with a letter mostly replies, except for one other token
    whose synthetic logprob is ``other`` (at most -1.0): the labels share the rest, 0.63 to 1, in
    the proportions of their own synthetic logprobs."""
    by_id = label_probabilities(labels, logprobs, True)
    return [by_id[t] for t in labels], 1.0 - math.exp(other)


def answer(q: DecisionQuestion, probs: list[float], mass: float) -> dict:
    """``adapters.make_answer`` as ``model_dump`` writes it."""
    if q.type == "predicate":
        return {"type": "predicate", "name": q.name, "probability": probs[1]}
    top = max(range(len(probs)), key=probs.__getitem__)          # the first of equal ones, as argmax
    confidence = probs[top] * mass
    if q.type == "choice":
        return {"type": "choice", "name": q.name, "choice": q.options[top][0],
                "probabilities": [{"value": value, "probability": p} for (value, _), p in zip(q.options, probs)],
                "confidence": confidence}
    return {"type": "score", "name": q.name, "score": sum(i * p for i, p in enumerate(probs)),
            "probabilities": [{"value": i, "label": label, "probability": p}
                              for i, ((label, _), p) in enumerate(zip(q.options, probs))],
            "confidence": confidence}


def response(sim, model: str, b: DecisionRequest, seqs, reads: list) -> dict:
    """vLLM's ``DecisionResponse.model_dump()``: ``{"model", "answers", "usage"}``, the answers
    in question order."""
    block = prefix_block(sim)
    inputs = sum(s.prompt_len for s in seqs)
    outputs = sum(s.completion_tokens for s in seqs)
    return {"model": model,
            "answers": [answer(q, *r) for q, r in zip(b.questions, reads)],
            "usage": {"input_tokens": inputs,
                      "input_tokens_details": {"cached_tokens": sum(s.cached_tokens for s in seqs),
                                               "cache_write_tokens": sum(created_cache_tokens(s, block)
                                                                         for s in seqs)},
                      "output_tokens": outputs, "output_tokens_details": {"reasoning_tokens": 0},
                      "total_tokens": inputs + outputs}}


# ---- the request -------------------------------------------------------------------------------------

def prepare(sim, b: DecisionRequest, rid: str):
    """Every check and the reads' sequences of a loaded request, before anything is admitted:
    ``(model, seqs, reads)`` with ``reads[i]`` question ``i``'s ``(probs, label_mass)``.  Raises
    the domain errors (see the module docstring)."""
    model, lora = sim.resolve_model(b.model)
    if len(b.questions) > MAX_QUESTIONS:
        raise InvalidParam(f"questions: at most {MAX_QUESTIONS} for this model")
    if any(len(options(q)) > len(LABELS) for q in b.questions):
        raise InvalidParam(f"This model supports at most {len(LABELS)} choices per question")
    admit_reads(sim, len(b.questions), b.joint)
    labels = [LABELS[:len(options(q))] for q in b.questions]
    prompts = read_prompts(sim, input_text(b.input), [question_text(q) for q in b.questions], list(map(len, labels)))
    seqs, reads = run_reads(sim, ID_PREFIX + rid, model, lora, prompts, labels, b.cache_salt)
    return model, seqs, reads
