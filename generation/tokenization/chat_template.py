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

from generation.errors import InvalidParam


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


def render_chat(hf_tokenizer, messages, tools=None, chat_template: str | None = None,
                chat_template_kwargs: dict | None = None, add_generation_prompt: bool = True,
                continue_final_message: bool = False) -> str:
    """The prompt text of ``messages`` through the chat template.

    Raises :class:`InvalidParam` (400) when the template cannot render this conversation (a Jinja
    error, or a template that raises for e.g. alternating roles), as vLLM does."""
    kwargs = dict(chat_template_kwargs or {})
    for reserved in ("conversation", "messages", "tools", "chat_template", "tokenize",
                     "add_generation_prompt", "continue_final_message"):
        kwargs.pop(reserved, None)
    try:
        return hf_tokenizer.apply_chat_template(
            template_messages(messages), tools=tools or None, chat_template=chat_template,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=continue_final_message, tokenize=False, **kwargs)
    except Exception as e:      # jinja2.TemplateError, ValueError from transformers' checks
        raise InvalidParam(f"Failed to apply chat template: {type(e).__name__}: {e}", "messages") from None
