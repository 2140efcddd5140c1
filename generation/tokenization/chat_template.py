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

from generation.errors import ContextLengthError, InvalidParam

from .patched_imports import native as _native
from .worker_thread import in_worker

MAX_RENDERED_CHARS = 8 << 20      # the longest text a chat template may render (or build)
MAX_REQUEST_TEMPLATE = 65536      # characters of a template sent with a request
RENDER_SECONDS = 2.0              # the longest a request's template may render
_SIZED = (str, list, tuple)


BUILD_BUDGET = 64 << 20           # characters one render may build in all (results of 4 KiB or more)
BUDGET_FROM = 4096                # results shorter than this are not counted
ESCAPE_WIDTH = 6                  # the most characters escaping one can take (``\u0001``, ``&#39;``)


class TemplateTooBig(Exception):
    """A template operation would build more than :data:`MAX_RENDERED_CHARS`, or a render more
    than :data:`BUILD_BUDGET` in all."""


class TemplateTimeout(Exception):
    """Raised inside a render thread that ran past :data:`RENDER_SECONDS`."""


_BUDGET = threading.local()       # .left: characters the render in this thread may still build


def reset_budget() -> None:
    """Start a render's :data:`BUILD_BUDGET` (in the thread, or greenlet, that renders)."""
    _BUDGET.left = BUILD_BUDGET


def text_size(obj, cap: int = MAX_RENDERED_CHARS + 1) -> int:
    """The characters ``str(obj)`` (or its JSON) takes at least: strings by length, containers
    by their items plus 2 each, anything else 8; counting stops once past ``cap`` (an object
    that lists one 8 Mi string a million times is not walked to the end)."""
    if isinstance(obj, str):
        return len(obj)
    if not isinstance(obj, (list, tuple, dict, set, frozenset)):
        return 8
    total, stack = 0, [obj]
    while stack and total <= cap:
        o = stack.pop()
        if isinstance(o, str):
            total += len(o) + 2
        elif isinstance(o, dict):
            total += 2 * len(o) + 2
            stack.extend(o.keys())
            stack.extend(o.values())
        elif isinstance(o, (list, tuple, set, frozenset)):
            total += 2
            stack.extend(o)
        else:
            total += 8
    return total


def json_lines(obj, cap: int = MAX_RENDERED_CHARS + 1) -> tuple:
    """``(lines, depth)`` of ``obj``'s indented JSON at most: an item per line, the deepest
    nesting; counting stops once past ``cap`` lines."""
    lines, depth, stack = 1, 0, [(obj, 0)]
    while stack and lines <= cap:
        o, d = stack.pop()
        depth = max(depth, d)
        if isinstance(o, dict):
            lines += len(o) + 1
            stack.extend((v, d + 1) for v in o.values())
        elif isinstance(o, (list, tuple)):
            lines += len(o) + 1
            stack.extend((v, d + 1) for v in o)
    return lines, depth


def check(n: int) -> None:
    """Refuse (TemplateTooBig) building ``n`` characters in one operation."""
    if n > MAX_RENDERED_CHARS:
        raise TemplateTooBig(f"the template would build {n} characters, more than {MAX_RENDERED_CHARS}")


def spend(n: int) -> None:
    """Count ``n`` characters built against the render's :data:`BUILD_BUDGET` (results under
    :data:`BUDGET_FROM` are free): each operation is bounded on its own, but a loop that keeps
    8 Mi strings (``{% set ns.l = ns.l + [ns.s ~ i] %}``) would otherwise hold gigabytes."""
    if n < BUDGET_FROM:
        return
    left = getattr(_BUDGET, "left", BUILD_BUDGET) - n
    _BUDGET.left = left
    if left < 0:
        raise TemplateTooBig(f"the template built more than {BUILD_BUDGET} characters in all")


def _built(out):
    """``out`` (an operation's result) after its size is :func:`spend`-counted."""
    if isinstance(out, (str, list, tuple, dict)):
        spend(text_size(out, BUILD_BUDGET + 1) if not isinstance(out, str) else len(out))
    return out


def bounded_concat(parts, markup: bool = False):
    """Jinja's ``~`` (``str_join`` / ``markup_join``) with the result's size checked from its
    parts' before anything is built: ``{% set x.s = x.s ~ x.s %}`` 40 times took RSS from
    0.7 to 2.3 GB before the render's time limit came."""
    check(sum(text_size(p) for p in parts))
    from jinja2.runtime import markup_join, str_join
    return _built(markup_join(parts) if markup else str_join(parts))


def _str_method_size(obj: str, name: str, args, kwargs) -> int | None:
    """An upper bound on what ``obj.name(*args)`` builds, for the ``str`` methods that can
    build more than their input (None: bounded by the input already)."""
    def num(i, key):
        v = args[i] if len(args) > i else kwargs.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) else 0
    if name in ("ljust", "rjust", "center", "zfill"):
        return max(len(obj), num(0, "width"))
    if name == "expandtabs":
        return len(obj) + obj.count("\t") * max(num(0, "tabsize"), 8)
    if name == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
        old, new = args[0], args[1]
        hits = obj.count(old) if old else len(obj) + 1
        return len(obj) + hits * max(0, len(new) - len(old))
    if name == "join" and args:
        items = args[0]
        if isinstance(items, (list, tuple)):
            return text_size(items) + len(obj) * len(items)
        return None
    if name in ("split", "rsplit", "splitlines", "partition", "rpartition"):
        return 9 * len(obj)           # pieces: a pointer and a small object each
    if name in ("format", "format_map"):        # an integer argument may be a nested width: ``{:>{}}``
        values = list(args) + list(kwargs.values())
        return len(obj) + sum(text_size(a) + (a if isinstance(a, int) and a > 0 else 0) for a in values)
    return None


def _filter_size(name: str, args, kwargs) -> int | None:
    """An upper bound on what filter ``name`` builds from ``args`` (its input first)."""
    if not args:
        return None
    value = args[0]
    if name in ("tojson", "escape", "e", "forceescape", "urlencode", "string", "pprint", "list", "join",
                "xmlattr", "format", "safe", "urlize"):
        size = ESCAPE_WIDTH * text_size(value) if name in ("tojson", "escape", "e", "forceescape", "urlencode", "xmlattr") \
            else 2 * ESCAPE_WIDTH * text_size(value) if name == "urlize" else text_size(value)    # <a href=...>
        if name == "tojson":
            indent = kwargs.get("indent", args[2] if len(args) > 2 else None)
            width = len(indent) if isinstance(indent, str) else (indent if isinstance(indent, int) else 0)
            if width:
                lines, depth = json_lines(value)
                size += lines * (width * depth + 1)            # a line per item, indented per level
        elif name == "join":
            sep = kwargs.get("d", args[1] if len(args) > 1 else "")
            if isinstance(value, (list, tuple)) and isinstance(sep, str):
                size += len(sep) * len(value)
        elif name == "list" and isinstance(value, str):
            size *= 9                 # a pointer per character
        elif name == "pprint":        # a line per item, indented by its depth
            lines, depth = json_lines(value)
            size += lines * (depth + 1)
        elif name == "format":
            size += sum(text_size(a) for a in args[1:]) + sum(text_size(v) for v in kwargs.values())
        return size
    if name == "replace" and isinstance(value, str) and len(args) >= 3:
        return _str_method_size(value, "replace", args[1:], {})
    return None


def _guarded_filter(name: str, fn):
    """Filter ``fn`` whose result is bounded before it is built (:func:`_filter_size`) and
    counted against the render's budget after."""
    import functools

    @functools.wraps(fn)
    def guarded(*args, **kwargs):
        # an environment / context first argument (``pass_*`` filters) is not the value
        value_args = args[1:] if getattr(fn, "jinja_pass_arg", None) is not None else args
        size = _filter_size(name, value_args, kwargs)
        if size is not None:
            check(size)
        return _built(fn(*args, **kwargs))
    guarded.__wrapped_filter__ = fn
    return guarded


class _GuardedFilters(dict):
    """The environment's filter table: every filter, including those set after the environment
    is built (transformers sets its own ``tojson``), goes in through :func:`_guarded_filter`."""

    def __init__(self, filters):
        super().__init__()
        for k, v in filters.items():
            self[k] = v

    def __setitem__(self, name, fn):
        if not hasattr(fn, "__wrapped_filter__"):
            fn = _guarded_filter(name, fn)
        super().__setitem__(name, fn)


def _bounded_environment_class():
    """jinja2's ``ImmutableSandboxedEnvironment`` (what transformers renders with) in which
    every way of building a string is bounded by :data:`MAX_RENDERED_CHARS` before it builds
    (``{{ 'ab' * 100000000 }}`` killed the process in the tokenizer): ``*``, ``+``, ``**`` and
    ``%``, ``~`` (compiled to :func:`bounded_concat`), every filter (:func:`_filter_size`:
    ``tojson``, ``join``, ``replace``, ``center``, ``indent``, ...), and the ``str`` methods
    a template may call (:func:`_str_method_size`: ``ljust``, ``replace``, ``join``, ...) and
    the ``lipsum`` global (up to 16 characters a word); what
    a render builds in all is bounded by :data:`BUILD_BUDGET`.  Loops are bounded by the
    sandbox's ``range`` (100,000) and by the render's time limit (:func:`render_bounded`)."""
    import re

    from jinja2.compiler import CodeGenerator
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from jinja2.utils import generate_lorem_ipsum
    width = re.compile(r"%[-+ #0]*(\d{7,}|\*)")
    spec_width = re.compile(r"\{[^{}]*:[^{}]*?(\d{7,})[^{}]*\}")

    class BoundedCodeGenerator(CodeGenerator):
        def visit_Concat(self, node, frame):
            markup = "context.eval_ctx.volatile" if frame.eval_ctx.volatile else repr(bool(frame.eval_ctx.autoescape))
            self.write("environment.bounded_concat((")
            for arg in node.nodes:
                self.visit(arg, frame)
                self.write(", ")
            self.write(f"), {markup})")

    class BoundedEnvironment(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset(["*", "+", "**", "%"])
        code_generator_class = BoundedCodeGenerator

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            for name, arg in (("center", 1), ("indent", 1), ("wordwrap", 1)):
                self.filters[name] = self._widening(self.filters[name], arg)
            self.filters = _GuardedFilters(self.filters)

        @staticmethod
        def bounded_concat(parts, markup=False):
            return bounded_concat(parts, markup)

        @staticmethod
        def _widening(fn, arg):
            import functools
            # ``wordwrap`` takes the environment first (``pass_environment``): the wrapper keeps
            # that mark (functools.wraps), or Jinja would not pass it ('str' object has no
            # attribute 'newline_sequence'), and its value and width come one place later
            skip = 1 if getattr(fn, "jinja_pass_arg", None) is not None else 0

            @functools.wraps(fn)
            def bounded(*args, **kwargs):
                value = args[skip:skip + 1]
                for a in list(args[skip + arg:skip + arg + 1]) + list(kwargs.values()):
                    if isinstance(a, int) and not isinstance(a, bool):
                        check(a + len(str(value[0])) if value else a)
                return fn(*args, **kwargs)
            return bounded

        def call(__self, __context, __obj, *args, **kwargs):
            if __obj is generate_lorem_ipsum:       # Jinja's ``lipsum`` global: n paragraphs of up
                n, _, low, high = (list(args) + [5, True, 20, 100][len(args):])[:4]     # to max words
                n, high = kwargs.get("n", n), kwargs.get("max", high)
                if isinstance(n, int) and isinstance(high, int):
                    check(max(n, 0) * max(high, 0) * 16)
            elif getattr(__obj, "__name__", "") == "strftime_now" and args and isinstance(args[0], str):
                check(len(args[0]) * 16)           # transformers' global: ``%c`` is 2 -> 24 characters
            # jinja2 wraps ``str.format`` in a sandboxed formatter (the method is its __wrapped__)
            owner = getattr(getattr(__obj, "__wrapped__", __obj), "__self__", None)
            if isinstance(owner, str):
                name = getattr(__obj, "__name__", "")
                if name in ("format", "format_map") and spec_width.search(owner):
                    check(MAX_RENDERED_CHARS + 1)
                size = _str_method_size(owner, name, args, kwargs)
                if size is not None:
                    check(size)
            return _built(super().call(__context, __obj, *args, **kwargs))

        def call_binop(self, context, operator, left, right):
            if operator == "*":
                if isinstance(left, _SIZED) and isinstance(right, int):
                    check(text_size(left) * max(right, 0) if isinstance(left, str) else len(left) * max(right, 0))
                elif isinstance(right, _SIZED) and isinstance(left, int):
                    check(text_size(right) * max(left, 0) if isinstance(right, str) else len(right) * max(left, 0))
            elif operator == "+":
                if isinstance(left, _SIZED) and isinstance(right, _SIZED):
                    check(len(left) + len(right))
            elif operator == "**":
                if isinstance(left, int) and isinstance(right, int) and abs(left) > 1 and right > 0:
                    check(right * abs(left).bit_length() // 8)      # digits, roughly
            elif operator == "%" and isinstance(left, str):
                if width.search(left):
                    check(MAX_RENDERED_CHARS + 1)
                check(len(left) + text_size(right))
            return _built(super().call_binop(context, operator, left, right))
    return BoundedEnvironment


_INSTALLED = []


def install_bounded_environment() -> None:
    """Make transformers compile chat templates with :func:`_bounded_environment_class`
    (idempotent; its module looks the class up when it compiles a template).  ``python app.py``
    calls it before gevent patches the process when requests may send templates; imported after
    the patching (``gunicorn wsgi:app``), transformers is imported with ``select.epoll`` back
    (:func:`~generation.tokenization.patched_imports.epoll_for_import`): without it the import
    failed, every request's template retried it (~40 ms and four log lines each) and rendered
    without these bounds (``{{ 'a' * 100000000 }}`` built its 100 MB).  Raises ImportError
    rather than render unbounded."""
    if _INSTALLED:
        return
    from .patched_imports import epoll_for_import
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")   # "PyTorch was not found": expected
    with epoll_for_import():
        import transformers.utils.chat_template_utils as ctu
    if hasattr(ctu, "ImmutableSandboxedEnvironment"):
        ctu.ImmutableSandboxedEnvironment = _bounded_environment_class()
    _native_jinja_locks()
    _INSTALLED.append(True)


def _native_jinja_locks() -> None:
    """jinja2's ``LRUCache`` locks made native when jinja2 was imported after gevent's patching
    (``gunicorn wsgi:app``): the module-wide lexer cache (every template compile takes it) is
    shared by the render threads (:func:`render_bounded`) and the tokenizer's worker; as a gevent
    lock, native threads that met on it waited for good (both render threads of a server under
    load, and every later request's template then timed out)."""
    import jinja2.lexer
    import jinja2.utils
    if not type(jinja2.lexer._lexer_cache._wlock).__module__.startswith("gevent"):
        return
    jinja2.utils.Lock = _native("allocate_lock")          # the caches made from now on
    jinja2.lexer._lexer_cache._wlock = _native("allocate_lock")()


def render_bounded(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` (a template render) in a thread of its own, waited for at most
    :data:`RENDER_SECONDS`; past it the thread is interrupted (an asynchronous exception: a
    Jinja loop is Python code) and InvalidParam raised.  A nested ``range(100000)`` loop never
    returned, and SIGTERM could not stop it.

    The thread is named by the native ``_thread.get_ident``: gevent's patched ``get_ident``
    gives a greenlet's id, which ``PyThreadState_SetAsyncExc`` matched to no thread, so in the
    real server a runaway template was never interrupted and two of them held both render
    threads for good (every later request's template then timed out).  Called in the
    tokenizer's worker thread (a batch of conversations, :mod:`generation.adapters.chat_batch`),
    which cannot use the hub's pool (gevent raised InvalidThreadUseError, answered as a 400), the
    render runs there, interrupted the same way by a native watchdog thread."""
    if in_worker():
        return _bounded_here(fn, args, kwargs)
    import gevent
    from gevent.threadpool import ThreadPool
    global _RENDER_POOL
    if _RENDER_POOL is None:
        _RENDER_POOL = ThreadPool(2)
    state = {"tid": None, "done": False}
    lock = _native("allocate_lock")()      # shared with a native thread

    def job():
        # the outcome is returned, an exception too: raised in the thread, gevent's pool would
        # print its traceback for every template error answered with a 400 (issue 31, item 13)
        state["tid"] = _native("get_ident")()
        try:
            try:
                return True, fn(*args, **kwargs)
            finally:
                with lock:
                    state["done"] = True
        except TemplateTimeout:         # interrupted: nobody waits for the answer any more
            return True, None
        except Exception as e:          # noqa: BLE001 - re-raised on the hub below
            return False, e
    task = _RENDER_POOL.spawn(job)
    try:
        ok, out = task.get(timeout=RENDER_SECONDS)
        if not ok:
            raise out
        return out
    except gevent.Timeout:
        with lock:
            if not state["done"] and state["tid"] is not None:
                _interrupt(state["tid"])
        raise _timed_out() from None


def _interrupt(tid: int) -> None:
    import ctypes
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(tid), ctypes.py_object(TemplateTimeout))


def _timed_out() -> InvalidParam:
    return InvalidParam(f"Failed to apply chat template: it did not render within {RENDER_SECONDS:g} s.",
                        "chat_template")


def _bounded_here(fn, args, kwargs):
    """:func:`render_bounded` in a worker thread: ``fn`` runs in this thread, and a native
    watchdog thread interrupts it past :data:`RENDER_SECONDS`, again every 0.1 s until it stops
    (an interruption caught on its way out is not the end of it); the watchdog ends with ``fn``."""
    tid, lock, finished = _native("get_ident")(), _native("allocate_lock")(), _native("allocate_lock")()
    state = {"done": False}
    finished.acquire()

    def watchdog():
        wait = RENDER_SECONDS
        while not finished.acquire(timeout=wait):
            with lock:
                if state["done"]:
                    return
                _interrupt(tid)
            wait = 0.1
    _native("start_new_thread")(watchdog, ())
    try:
        return fn(*args, **kwargs)
    except TemplateTimeout:
        raise _timed_out() from None
    finally:
        while not state["done"]:        # set under the lock: no interruption after it
            try:
                with lock:
                    state["done"] = True
            except TemplateTimeout:
                pass
        finished.release()


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
        if msg.get("role") == "assistant" and msg.get("reasoning") is not None:
            # vLLM 0.34's chat_message.py (l. 655-660): an assistant's reasoning reaches the
            # template as reasoning_content too ("keep compatibility": Qwen3's, DeepSeek's read it)
            msg["reasoning_content"] = msg["reasoning"]
        out.append(msg)
    return out


def _render_without_tokenizer(messages, tokenize=False, **options) -> str:
    """``apply_chat_template(messages, tokenize=False, **options)`` for a template given without
    a tokenizer: transformers' own renderer (the same sandboxed, bounded environment)."""
    from transformers.utils.chat_template_utils import render_jinja_template
    rendered, _ = render_jinja_template(conversations=[messages], **options)
    return rendered[0]


def merge_kwargs(defaults: dict | None, overrides: dict | None) -> dict:
    """``defaults`` updated with ``overrides``, whose ``None`` and ``"auto"`` values do not
    override (and are dropped): vLLM 0.34's ``merge_kwargs`` (``vllm/renderers/params.py``),
    which puts ``--default-chat-template-kwargs`` under a request's ``chat_template_kwargs``."""
    if not overrides:                   # the common request: nothing to merge (a copy: callers may add keys)
        return dict(defaults) if defaults else {}
    return {**(defaults or {}), **{k: v for k, v in overrides.items() if v is not None and v != "auto"}}


def effort_kwargs(requested, effort) -> dict | None:
    """A request's ``chat_template_kwargs`` with what vLLM 0.34's ``build_chat_params`` (chat
    and Responses, ``ChatCompletionRequest`` / ``ResponsesRequest``) lays over them from its
    ``reasoning_effort``: the effort itself and, unless the request's kwargs hold an
    ``enable_thinking`` key, ``enable_thinking = effort != "none"``.  ``requested`` unchanged
    when there is no effort; the result still goes under :func:`merge_kwargs` with the server's
    defaults (``with_defaults``), so a derived switch beats --default-chat-template-kwargs'."""
    if effort is None or effort == "auto":
        return requested
    own = requested if isinstance(requested, dict) else {}
    extra = {"reasoning_effort": effort}
    if "enable_thinking" not in own:
        extra["enable_thinking"] = effort != "none"
    return {**own, **extra}


def render_chat(hf_tokenizer, messages, tools=None, chat_template: str | None = None,
                chat_template_kwargs: dict | None = None, add_generation_prompt: bool = True,
                continue_final_message: bool = False, from_request: bool = False,
                max_chars: int | None = None, max_model_len: int = 0) -> str:
    """The prompt text of ``messages`` through the chat template.  ``from_request``: the
    template came with the request (``--trust-request-chat-template``): it renders in a thread
    within :data:`RENDER_SECONDS` and may be :data:`MAX_REQUEST_TEMPLATE` characters long.
    Every template's operations and output are bounded by :data:`MAX_RENDERED_CHARS`.

    ``hf_tokenizer`` None (the simulated tokenizer, which ships no template): ``chat_template``
    is rendered with transformers' ``render_jinja_template``, without a tokenizer's variables
    (``bos_token`` and friends are undefined).

    ``max_chars`` (the most characters a prompt of ``max_model_len`` tokens can have, see
    :meth:`generation.engine.simulator.Simulator.prompt_char_limit`): a longer rendered text is
    refused before it is tokenized (``('a' * 8000000)|tojson`` rendered under the cap, then
    spent 10 s in the tokenizer).

    Raises :class:`InvalidParam` (400) when the template cannot render this conversation (a Jinja
    error, or a template that raises for e.g. alternating roles), as vLLM does;
    :class:`ContextLengthError` past ``max_chars``."""
    kwargs = dict(chat_template_kwargs or {})
    for reserved in ("conversation", "messages", "tools", "chat_template", "tokenize",
                     "add_generation_prompt", "continue_final_message"):
        kwargs.pop(reserved, None)
    install_bounded_environment()

    def apply(*args, **kw):          # in the thread (or greenlet) that renders: its own budget
        reset_budget()
        if hf_tokenizer is None:
            return _render_without_tokenizer(*args, **kw)
        return hf_tokenizer.apply_chat_template(*args, **kw)
    call = (apply, template_messages(messages))
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
    if max_chars is not None and isinstance(text, str) and len(text) > max_chars:
        raise ContextLengthError(         # vLLM 0.34's words (TokenizeParams._text_len_check on the rendered prompt)
            f"This model's maximum context length is {max_model_len} tokens. However, your prompt contains "
            f"{len(text)} characters (more than {max_chars} characters, which is the upper bound for "
            f"{max_model_len} input tokens). Please reduce the length of the input prompt.", "input_text", len(text))
    return text
