"""``--render-url``: prompts tokenized by an upstream vLLM render service (the seeds' HF mode).

Text prompts go to ``POST <url>/v1/completions/render`` with ``{"model", "prompt"}`` (answer: a
JSON array of ``{"token_ids"}``, or one object), chat conversations to
``POST <url>/v1/chat/completions/render`` with ``{"model", "messages"}`` plus the chat options
given (``tools``, ``chat_template``, ``chat_template_kwargs``, ``add_generation_prompt``,
``continue_final_message``, ``add_special_tokens``); its ``features`` (multimodal hashes and
placeholders) are passed through by the chat render endpoint.  Timeouts: ``--render-timeout``,
``--mm-render-timeout`` when a message carries image / audio / video parts (api.md 3.1).

Generated text, echo and ``/detokenize`` stay on the local simulated tokenizer (the service
only tokenizes); a prompt's strings are approximated as api.md 3.1 describes.

Failures are that request's error, in vLLM's envelope, never a hang: connection refused or a
DNS failure -> 502, a timeout -> 504, an upstream 4xx -> the same status and message (a client
mistake such as a bad template), an upstream 5xx or an unreadable answer -> 502.

HTTP is ``urllib`` (stdlib): under the gevent worker's monkey patching its sockets are
cooperative, so a slow service delays only the request waiting for it.
"""
from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request

from generation.errors import APIError
from .tokenizer import SimulatedTokenizer, approximate_pieces, flatten_messages

_MEDIA = ("image_url", "audio_url", "input_audio", "video_url", "image")


def has_media(messages) -> bool:
    for m in messages or ():
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and part.get("type") in _MEDIA:
                    return True
    return False


class RenderTokenizer(SimulatedTokenizer):
    """Prompt tokenization by the render service at ``url``; everything else simulated."""
    name = "render"

    def __init__(self, url: str, model: str, timeout: float = 30.0, mm_timeout: float = 60.0):
        super().__init__()
        self.url = url.rstrip("/")
        self.model = model
        self.timeout = timeout
        self.mm_timeout = mm_timeout

    # ---- HTTP ----------------------------------------------------------------------------
    def _post(self, path: str, body: dict, timeout: float):
        url = self.url + path
        req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as e:
            detail = _error_message(e.read())
            if 400 <= e.code < 500:
                raise APIError(detail or f"render service answered {e.code}", e.code) from None
            raise APIError(f"Render service error: {url} answered {e.code}: {detail}", 502) from None
        except (TimeoutError, socket.timeout):
            raise APIError(f"Render service timed out after {timeout:g} s: {url}", 504) from None
        except urllib.error.URLError as e:
            if isinstance(e.reason, (TimeoutError, socket.timeout)):
                raise APIError(f"Render service timed out after {timeout:g} s: {url}", 504) from None
            raise APIError(f"Render service unreachable: {url}: {e.reason}", 502) from None
        except OSError as e:
            raise APIError(f"Render service unreachable: {url}: {e}", 502) from None
        try:
            return json.loads(raw)
        except ValueError:
            raise APIError(f"Render service sent an unreadable answer: {url}", 502) from None

    @staticmethod
    def _token_ids(obj, url: str) -> list[int]:
        ids = obj.get("token_ids") if isinstance(obj, dict) else None
        if not isinstance(ids, list) or not all(isinstance(t, int) for t in ids):
            raise APIError(f"Render service answer has no token_ids: {url}", 502)
        return ids

    # ---- the tokenizer calls -------------------------------------------------------------
    def encode_prompt(self, text: str, add_special_tokens: bool = True) -> tuple[list[int], list[str]]:
        out = self._post("/v1/completions/render",
                         {"model": self.model, "prompt": text, "add_special_tokens": add_special_tokens},
                         self.timeout)
        first = out[0] if isinstance(out, list) and out else out
        ids = self._token_ids(first, self.url)
        return ids, approximate_pieces(text, len(ids))

    def render_chat(self, messages, tools=None, chat_template=None, chat_template_kwargs=None,
                    add_generation_prompt=True, continue_final_message=False,
                    add_special_tokens=False) -> tuple[list[int], list[str], dict | None]:
        """``(ids, pieces, features)`` of a conversation; ``features`` as the service sent them."""
        body = {"model": self.model, "messages": messages,
                "add_generation_prompt": add_generation_prompt,
                "continue_final_message": continue_final_message,
                "add_special_tokens": add_special_tokens}
        if tools:
            body["tools"] = tools
        if chat_template:
            body["chat_template"] = chat_template
        if chat_template_kwargs:
            body["chat_template_kwargs"] = chat_template_kwargs
        timeout = self.mm_timeout if has_media(messages) else self.timeout
        out = self._post("/v1/chat/completions/render", body, timeout)
        ids = self._token_ids(out, self.url)
        return ids, approximate_pieces(flatten_messages(messages), len(ids)), out.get("features")

    chat_text = None        # the service renders and tokenizes a conversation: its text never comes back

    def tokenize_chat(self, messages, tools=None, chat_template=None, chat_template_kwargs=None,
                      add_generation_prompt=True, continue_final_message=False,
                      add_special_tokens=False) -> tuple[list[int], list[str]]:
        ids, pieces, _ = self.render_chat(messages, tools, chat_template, chat_template_kwargs,
                                          add_generation_prompt, continue_final_message,
                                          add_special_tokens)
        return ids, pieces


def _error_message(raw: bytes) -> str:
    try:
        obj = json.loads(raw)
    except ValueError:
        return raw[:200].decode("utf-8", "replace")
    if isinstance(obj, dict):
        err = obj.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if obj.get("message"):
            return str(obj["message"])
    return str(obj)[:200]
