"""Chat templates: how a conversation becomes the prompt text a real model sees.

Rendering is transformers' ``apply_chat_template`` (Jinja, sandboxed), with vLLM's request
fields: ``chat_template`` (overrides ``--chat-template``, which overrides the tokenizer's own),
``chat_template_kwargs`` (extra template variables), ``add_generation_prompt``,
``continue_final_message``; ``tools`` are passed to the template.  Messages are first put in
the "string" content format vLLM uses for text models: a list of content parts becomes its
text parts joined by newlines, and tool-call ``arguments`` JSON strings become objects
(templates index them).
"""
from __future__ import annotations

import json
import os
import threading

from generation.errors import InvalidParam

MAX_RENDERED_CHARS = 8 << 20      # the longest text a chat template may render (or build)
MAX_REQUEST_TEMPLATE = 65536      # characters of a template sent with a request
RENDER_SECONDS = 2.0              # the longest a request's template may render
_SIZED = (str, list, tuple)


class TemplateTooBig(Exception):
    """A template operation would build more than :data:`MAX_RENDERED_CHARS`."""


class TemplateTimeout(Exception):
    """Raised inside a render thread that ran past :data:`RENDER_SECONDS`."""


def _bounded_environment_class():
    """jinja2's ``ImmutableSandboxedEnvironment`` (what transformers renders with) whose
    ``*``, ``+``, ``**`` and ``%`` refuse results past :data:`MAX_RENDERED_CHARS` before
    building them (``{{ 'ab' * 100000000 }}`` killed the process in the tokenizer), and whose
    string-widening filters do too.  Loops are bounded by the sandbox's ``range`` (100,000)
    and by the render's time limit (:func:`render_bounded`)."""
    import re

    from jinja2.sandbox import ImmutableSandboxedEnvironment
    width = re.compile(r"%[-+ #0]*(\d{7,}|\*)")

    def check(n):
        if n > MAX_RENDERED_CHARS:
            raise TemplateTooBig(f"the template would build {n} characters, more than {MAX_RENDERED_CHARS}")

    class BoundedEnvironment(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset(["*", "+", "**", "%"])

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            for name, arg in (("center", 1), ("indent", 1), ("wordwrap", 1)):
                self.filters[name] = self._widening(self.filters[name], arg)

        @staticmethod
        def _widening(fn, arg):
            def bounded(*args, **kwargs):
                for a in list(args[arg:arg + 1]) + list(kwargs.values()):
                    if isinstance(a, int) and not isinstance(a, bool):
                        check(a + len(str(args[0])) if args else a)
                return fn(*args, **kwargs)
            bounded.__name__ = fn.__name__
            return bounded

        def call_binop(self, context, operator, left, right):
            if operator == "*":
                if isinstance(left, _SIZED) and isinstance(right, int):
                    check(len(left) * max(right, 0))
                elif isinstance(right, _SIZED) and isinstance(left, int):
                    check(len(right) * max(left, 0))
            elif operator == "+":
                if isinstance(left, _SIZED) and isinstance(right, _SIZED):
                    check(len(left) + len(right))
            elif operator == "**":
                if isinstance(left, int) and isinstance(right, int) and abs(left) > 1 and right > 0:
                    check(right * abs(left).bit_length() // 8)      # digits, roughly
            elif operator == "%" and isinstance(left, str) and width.search(left):
                check(MAX_RENDERED_CHARS + 1)
            return super().call_binop(context, operator, left, right)
    return BoundedEnvironment


_INSTALLED = []


def install_bounded_environment() -> None:
    """Make transformers compile chat templates with :func:`_bounded_environment_class`
    (idempotent; its module looks the class up when it compiles a template)."""
    if _INSTALLED:
        return
    try:
        import transformers.utils.chat_template_utils as ctu
    except ImportError:         # pragma: no cover - transformers is a requirement
        return
    if hasattr(ctu, "ImmutableSandboxedEnvironment"):
        ctu.ImmutableSandboxedEnvironment = _bounded_environment_class()
    _INSTALLED.append(True)


def render_bounded(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` (a template render) in a thread of its own, waited for at most
    :data:`RENDER_SECONDS`; past it the thread is interrupted (an asynchronous exception: a
    Jinja loop is Python code) and InvalidParam raised.  A nested ``range(100000)`` loop never
    returned, and SIGTERM could not stop it."""
    import gevent
    from gevent.threadpool import ThreadPool
    global _RENDER_POOL
    if _RENDER_POOL is None:
        _RENDER_POOL = ThreadPool(2)
    state = {"tid": None, "done": False}
    lock = threading.Lock()

    def job():
        state["tid"] = threading.get_ident()
        try:
            try:
                return fn(*args, **kwargs)
            finally:
                with lock:
                    state["done"] = True
        except TemplateTimeout:         # interrupted: nobody waits for the answer any more
            return None
    task = _RENDER_POOL.spawn(job)
    try:
        return task.get(timeout=RENDER_SECONDS)
    except gevent.Timeout:
        with lock:
            if not state["done"] and state["tid"] is not None:
                import ctypes
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(state["tid"]),
                                                           ctypes.py_object(TemplateTimeout))
        raise InvalidParam(f"Failed to apply chat template: it did not render within {RENDER_SECONDS:g} s.",
                           "chat_template") from None


_RENDER_POOL = None


def load_chat_template(value: str | None) -> str | None:
    """``--chat-template``: a file path (read as UTF-8) or the template itself, as vLLM's
    ``load_chat_template``.  A value that looks like a path but does not exist is an error
    (raises ``ValueError`` with one line), since an inline template always contains ``{``."""
    if not value:
        return None
    if os.path.isfile(value):
        with open(value, encoding="utf-8") as fh:
            return fh.read()
    if any(c in value for c in "{}\n"):
        return value
    raise ValueError(f"--chat-template: {value!r} is neither a file nor a Jinja template")


def template_messages(messages) -> list[dict]:
    """Messages in vLLM's "string" content format (copies; the request is not changed)."""
    out = []
    for m in messages or ():
        if not isinstance(m, dict):
            continue
        msg = dict(m)
        content = msg.get("content")
        if isinstance(content, list):
            texts = []
            for part in content:
                if isinstance(part, dict) and (part.get("type") in ("text", "input_text", "output_text")
                                               or (part.get("type") is None and "text" in part)):
                    texts.append(str(part.get("text") or ""))
                elif isinstance(part, str):
                    texts.append(part)
            msg["content"] = "\n".join(texts)
        calls = msg.get("tool_calls")
        if calls:
            fixed = []
            for tc in calls:
                if isinstance(tc, dict) and isinstance(tc.get("function"), dict):
                    fn = dict(tc["function"])
                    args = fn.get("arguments")
                    if isinstance(args, str):
                        try:
                            fn["arguments"] = json.loads(args)
                        except ValueError:
                            pass
                    tc = {**tc, "function": fn}
                fixed.append(tc)
            msg["tool_calls"] = fixed
        out.append(msg)
    return out


def _render_without_tokenizer(messages, tokenize=False, **options) -> str:
    """``apply_chat_template(messages, tokenize=False, **options)`` for a template given without
    a tokenizer: transformers' own renderer (the same sandboxed, bounded environment)."""
    from transformers.utils.chat_template_utils import render_jinja_template
    rendered, _ = render_jinja_template(conversations=[messages], **options)
    return rendered[0]


def render_chat(hf_tokenizer, messages, tools=None, chat_template: str | None = None,
                chat_template_kwargs: dict | None = None, add_generation_prompt: bool = True,
                continue_final_message: bool = False, from_request: bool = False) -> str:
    """The prompt text of ``messages`` through the chat template.  ``from_request``: the
    template came with the request (``--trust-request-chat-template``): it renders in a thread
    within :data:`RENDER_SECONDS` and may be :data:`MAX_REQUEST_TEMPLATE` characters long.
    Every template's operations and output are bounded by :data:`MAX_RENDERED_CHARS`.

    ``hf_tokenizer`` None (the simulated tokenizer, which ships no template): ``chat_template``
    is rendered with transformers' ``render_jinja_template``, without a tokenizer's variables
    (``bos_token`` and friends are undefined).

    Raises :class:`InvalidParam` (400) when the template cannot render this conversation (a Jinja
    error, or a template that raises for e.g. alternating roles), as vLLM does."""
    kwargs = dict(chat_template_kwargs or {})
    for reserved in ("conversation", "messages", "tools", "chat_template", "tokenize",
                     "add_generation_prompt", "continue_final_message"):
        kwargs.pop(reserved, None)
    install_bounded_environment()
    call = (_render_without_tokenizer if hf_tokenizer is None else hf_tokenizer.apply_chat_template,
            template_messages(messages))
    options = dict(tools=tools or None, chat_template=chat_template, add_generation_prompt=add_generation_prompt,
                   continue_final_message=continue_final_message, tokenize=False, **kwargs)
    try:
        if from_request:        # a client's template: in a thread, bounded in time
            if isinstance(chat_template, str) and len(chat_template) > MAX_REQUEST_TEMPLATE:
                raise InvalidParam(f"chat_template is {len(chat_template)} characters long, more than the "
                                   f"{MAX_REQUEST_TEMPLATE} a request's template may be.", "chat_template")
            text = render_bounded(*call, **options)
        else:
            text = call[0](call[1], **options)
    except InvalidParam:
        raise
    except (Exception, TemplateTimeout) as e:      # jinja2.TemplateError, ValueError from transformers' checks
        raise InvalidParam(f"Failed to apply chat template: {type(e).__name__}: {e}", "messages") from None
    if isinstance(text, str) and len(text) > MAX_RENDERED_CHARS:
        raise InvalidParam(f"Failed to apply chat template: it rendered {len(text)} characters, more than "
                           f"{MAX_RENDERED_CHARS}.", "messages")
    return text
