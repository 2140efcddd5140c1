"""Audio decodes in the hub's thread pool, as the server runs them: after gevent's monkey-patching.

soundfile holds one class-wide lock around every ``sf_open``; imported after the patching it was a
gevent lock, which the pool's native threads cannot share: of 300 transcription uploads at once,
9 hung until shutdown (the pool's other workers, waiting for it, never woke)."""
from __future__ import annotations

import subprocess
import sys

from support import ROOT

SCRIPT = r"""
from gevent import monkey; monkey.patch_all()
import io, gevent, numpy as np, soundfile as raw
from generation.content import audio as au
buf = io.BytesIO()
raw.write(buf, np.zeros(16000, dtype=np.float32), 16000, format="WAV", subtype="PCM_16")
data = buf.getvalue()
done = []
jobs = [gevent.spawn(lambda: done.append(au.off_hub(au.decode_upload, data).duration_s)) for _ in range(40)]
gevent.joinall(jobs, timeout=20)
print(len(done), set(done), type(au.soundfile().SoundFile._sf_error_lock).__module__, sep="|")
"""


def test_concurrent_decodes_in_the_hubs_pool_all_finish():
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().split("|") == ["40", "{1.0}", "_thread"]
