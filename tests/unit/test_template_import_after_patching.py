"""transformers' chat-template renderer imported after gevent's patching (``gunicorn wsgi:app``
without ``--preload``): the import puts ``select.epoll`` back for its duration (trio, under
huggingface_hub's httpx, reads it at import time), and request templates keep their bounds."""
from __future__ import annotations

import subprocess
import sys

from support import ROOT

SCRIPT = r"""
from gevent import monkey; monkey.patch_all()
import select
from generation.tokenization import chat_template as ct
ct.install_bounded_environment()
msgs = [{"role": "user", "content": "hi"}]
print(ct.render_chat(None, msgs, chat_template="{% for m in messages %}<{{ m['content'] }}>{% endfor %}",
                     from_request=True))
try:
    ct.render_chat(None, msgs, chat_template="{{ 'a' * 100000000 }}", from_request=True)
except Exception as e:
    print(type(e).__name__, "TemplateTooBig" in str(e))
print(hasattr(select, "epoll"))
"""


def test_the_bounded_environment_installs_after_the_patching():
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:3] == ["<hi>", "InvalidParam True", "False"], out.stdout
    assert "Error importing" not in out.stderr
