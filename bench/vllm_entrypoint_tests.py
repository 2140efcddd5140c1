"""Run vLLM's own API tests (its ``tests/entrypoints``) against this simulator (``python app.py``).

vLLM's test files start ``vllm serve`` through their ``RemoteOpenAIServer`` fixture
(``tests/utils.py``).  This script lays the chosen test files out in a work folder as they sit in
vLLM's tree, with a stand-in ``tests/utils.py`` whose ``RemoteOpenAIServer`` starts
``python app.py --model <model> <the test's vllm serve flags>`` of this repository instead (flags
the simulator does not know are dropped, one by one, and reported), a stand-in root
``tests/conftest.py`` (vLLM's imports torch and the model runners), and offline stand-ins for the
fixtures that download things (``hf_api().snapshot_download`` of a LoRA adapter: a local
``adapter_config.json``; vLLM's audio assets: synthetic WAV files of the same length), and a
per-test time limit (``--test-timeout``: a test whose client spins fails alone).  It then runs pytest in the Python environment
that has vLLM installed (``--python``), reads the JUnit report and prints the counts.

Tests that cannot apply to a simulator are deselected with their reason (:data:`NOT_APPLICABLE`:
they compare a real model's text, need the model's files offline, or drive vLLM's Python objects
rather than its server); the pass rate is over the rest.  Not collected by the project's pytest
run (it lives in ``bench/``).

Usage::

    # vLLM's sources at the release under test (the PyPI sdist carries tests/):
    python bench/vllm_entrypoint_tests.py --fetch 0.34.0                       # into ~/.cache/vllm-sim
    python bench/vllm_entrypoint_tests.py --vllm-src /path/to/vllm-0.34.0 \\
        --python /tmp/vllm-venv/bin/python [--files openai/test_return_tokens_as_ids.py ...] \\
        [-k EXPR] [--json out.json] [--workdir DIR]

``--python``: a virtual environment with ``pip install --no-deps vllm==<release>`` plus
``pytest pytest-asyncio openai anthropic requests httpx soundfile numpy transformers
prometheus_client pydantic fastapi`` (and ``torch`` for the files that import it; vLLM's full
install needs GPU wheels that may not be reachable).  The simulator itself runs with this
Python (``sys.executable``).  Prints the machine's load with the figures.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

EMBEDDING_ROWS = 151936

# The test files that apply (paths under vLLM's tests/entrypoints/, as of 0.34.0)
DEFAULT_FILES = [
    "openai/chat_completion/test_chat.py",
    "openai/chat_completion/test_chat_completion.py",
    "openai/chat_completion/test_chat_echo.py",
    "openai/chat_completion/test_chat_logit_bias_validation.py",
    "openai/chat_completion/test_enable_force_include_usage.py",
    "openai/completion/test_completion.py",
    "openai/completion/test_prompt_validation.py",
    "openai/test_return_token_ids.py",
    "openai/test_return_tokens_as_ids.py",
    "openai/models/test_models.py",
    "serve/instrumentator/test_basic.py",
    "serve/instrumentator/test_metrics.py",
    "serve/lora/test_lora_adapters.py",
    "scale_out/token_in_token_out/test_serving_tokens.py",
    "anthropic/test_messages.py",
    "speech_to_text/transcription/test_transcription_validation_whisper.py",
    "speech_to_text/transcription/test_enable_force_include_usage.py",
    "speech_to_text/translation/test_translation_validation.py",
]

# nodeid substring (a trailing "$": the nodeid's end) -> why it cannot apply to a simulator
# (deselected, not counted)
NOT_APPLICABLE = {
    # a real model's words
    "test_basic_audio": "asserts Whisper's transcript of the recording (\"Mary had a little lamb\")",
    "test_basic_audio_batched": "asserts Whisper's transcript of the recordings",
    "test_long_audio_request": "asserts Whisper's transcript repeated 10 times",
    "test_audio_prompt": "asserts Whisper's transcript",
    "test_language_auto_detect": "asserts the language Whisper detects from the recording",
    "test_whisper_beam_search_multibeam": "asserts Whisper's transcript",
    "test_audio_with_max_tokens": "counts tokens with Whisper's own tokenizer (downloaded)",
    "test_translation_validation.py::test_basic_audio": "asserts Whisper's translation",
    "test_long_audio_request_foscolo": "asserts Whisper's translation",
    "test_completion_endpoints": "a Whisper model serves no chat/completions (404): the simulator serves every API "
                                 "for any --model",
    "test_complex_message_content": "asserts the model's answer to 1+1 (\"2\")",
    "test_response_format_json_object": "asserts the model's answer to 1+1 ({\"result\": 2})",
    "test_response_format_json_schema": "asserts the model's answer to 1+1 ({\"result\": 2})",
    "test_metrics_exist_run_batch": "runs vLLM's own run_batch launcher, not a server",
    # decoded with the model's own tokenizer: the offline stand-in's vocabulary (the simulator's
    # sentences and common words) lacks the test's words, which decode as "unk "
    "return_tokens_as_token_ids_completion": "decodes the prompt with the model's full vocabulary",
    "test_chat_completion_with_tool_use": "decodes with the model's full vocabulary",
    "test_comparison_with_prompt_logprobs_and_logprobs": "decodes with the model's full vocabulary",
    "test_chat_completion_with_emoji_and_token_ids": "decodes emoji with the model's full vocabulary",
    "test_render_then_generate_forwards_reasoning_ended": "decodes the JSON answer with the offline stand-in "
                                                          "tokenizer, whose vocabulary lacks the schema's key "
                                                          "('count') and numbers of two digits",
    "test_non_asr_model": "the simulator serves the audio routes for any --model (vLLM: only ASR models)",
    "test_canary_translation": "asserts Canary's translation",
    "test_load_lora_adapter_with_same_name_replaces_inplace": "asserts the adapters' own answers (\"Meow\")",
    # the model's files, which an offline machine does not have (its vocabulary, its tokenizer)
    "test_out_of_vocab_token_ids": "needs gpt2's vocabulary size (its config.json, downloaded)",
    "test_single_chat_session": "counts the prompt with zephyr's own chat template and tokenizer (37 tokens; "
                                "downloaded)",
    "test_chat_echo.py::test_prompt_logprobs": "-1 is the whole vocabulary: needs Qwen2's (its tokenizer, downloaded)",
    "test_chat_echo.py::test_top_logprobs": "-1 is the whole vocabulary: needs Qwen2's (its tokenizer, downloaded)",
    "test_chat_logit_bias_valid": "builds vLLM's ModelConfig of the model (its config.json, downloaded)",
    "test_chat_logit_bias_invalid": "builds vLLM's ModelConfig of the model (its config.json, downloaded)",
    "test_stop_string_workflow": "asserts the model's answer contains \"27 member\" (the EU's member states)",
    "::test_anthropic_tool_call$": "asserts the model chooses to call the tool (no tool_choice: the simulator's auto "
                                "draws a call with --tool-call-extra-call-probability, 45 %)",
    "test_min_tokens_delays_stop_sequence": "asserts the model's poem has a newline within 16 tokens (its stop "
                                            "sequence); the random-mode sentences have none",
}

STUB_UTILS = r'''
"""Stand-in for vLLM's tests/utils.py: RemoteOpenAIServer starts the simulator (written by
bench/vllm_entrypoint_tests.py)."""
import os
import re
import socket
import subprocess
import sys
import time

import openai
import requests

SIM_ROOT = os.environ["VLLM_SIM_ROOT"]
SIM_PYTHON = os.environ.get("VLLM_SIM_PYTHON", sys.executable)
ROCM_EXTRA_ARGS = []
DROPPED = os.environ.get("VLLM_SIM_DROPPED_LOG")


def get_open_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent():
    """The server gets SIGTERM when the pytest that started it dies (Linux prctl PR_SET_PDEATHSIG)."""
    try:
        import ctypes
        import signal
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)
    except Exception:
        pass


def _drop(args, flag):
    """``args`` without ``flag`` (``--x`` or ``--x=v``) and its value."""
    out, skip = [], False
    for k, a in enumerate(args):
        if skip:
            skip = False
            continue
        if a == flag:
            nxt = args[k + 1] if k + 1 < len(args) else None
            skip = nxt is not None and not nxt.startswith("--")
            continue
        if a.startswith(flag + "="):
            continue
        out.append(a)
    return out


class RemoteOpenAIServer:
    DUMMY_API_KEY = "token-abc123"

    def __init__(self, model, vllm_serve_args, *, env_dict=None, seed=0, auto_port=True,
                 max_wait_seconds=None, override_hf_configs=None):
        args = list(vllm_serve_args) + os.environ.get("VLLM_SIM_EXTRA_ARGS", "").split()
        if auto_port and "--port" not in args and "-p" not in args:
            args += ["--port", str(get_open_port())]
        if seed is not None and "--seed" not in args:
            args += ["--seed", str(seed)]
        self.host = "127.0.0.1"
        self.port = int(args[args.index("--port") + 1]) if "--port" in args else 8000
        self.uds = None
        self.show_hidden_metrics = False
        env = dict(os.environ)
        env.update(env_dict or {})
        env.setdefault("HF_HUB_OFFLINE", "1")
        for _ in range(40):
            cmd = [SIM_PYTHON, os.path.join(SIM_ROOT, "app.py"), "--model", model, *args]
            self.proc = subprocess.Popen(cmd, cwd=SIM_ROOT, env=env, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.PIPE, text=True, preexec_fn=_die_with_parent)
            err = self._wait(max_wait_seconds or 120)
            if err is None:
                return
            m = re.search(r"unrecognized arguments: (\S+)", err)
            if not m:
                raise RuntimeError(f"simulator failed to start: {err[-2000:]}")
            flag = m.group(1).split("=")[0]
            if DROPPED:
                with open(DROPPED, "a") as f:
                    f.write(f"{flag}\n")
            args = _drop(args, flag)
        raise RuntimeError("too many unknown flags")

    def _wait(self, timeout):
        start = time.time()
        while time.time() - start < timeout:
            if self.proc.poll() is not None:
                return self.proc.stderr.read()
            try:
                if requests.get(self.url_for("health"), timeout=1).status_code == 200:
                    return None
            except requests.RequestException:
                pass
            time.sleep(0.2)
        self.proc.kill()
        return "timeout"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    @property
    def url_root(self):
        return f"http://{self.host}:{self.port}"

    def url_for(self, *parts):
        path = "/".join(part.strip("/") for part in parts if part)
        return f"{self.url_root}/{path}"

    def get_client(self, **kw):
        kw.setdefault("timeout", 600)
        return openai.OpenAI(base_url=self.url_for("v1"), api_key=self.DUMMY_API_KEY, max_retries=0, **kw)

    def get_async_client(self, **kw):
        kw.setdefault("timeout", 600)
        return openai.AsyncOpenAI(base_url=self.url_for("v1"), api_key=self.DUMMY_API_KEY, max_retries=0, **kw)

    def get_client_anthropic(self, **kw):
        import anthropic
        kw.setdefault("timeout", 600)
        return anthropic.Anthropic(base_url=self.url_for(), api_key=self.DUMMY_API_KEY, max_retries=0, **kw)

    def get_async_client_anthropic(self, **kw):
        import anthropic
        kw.setdefault("timeout", 600)
        return anthropic.AsyncAnthropic(base_url=self.url_for(), api_key=self.DUMMY_API_KEY, max_retries=0, **kw)


RemoteLaunchRenderServer = RemoteOpenAIServer
RemoteVLLMServer = RemoteOpenAIServer
'''

STUB_CONFTEST = r'''
"""Stand-in for vLLM's tests/conftest.py (which imports torch and the model runners)."""
import json
import os

import pytest

NOT_APPLICABLE = json.loads(os.environ.get("VLLM_SIM_NOT_APPLICABLE", "{}"))
TEST_TIMEOUT = int(os.environ.get("VLLM_SIM_TEST_TIMEOUT", "0") or 0)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Each test (its setup, call and teardown) within TEST_TIMEOUT seconds: a test whose client
    spins (vLLM's test_loading_invalid_adapters_does_not_break_others, once its loop of loads has
    failed, retries a closed client in a loop that never yields) fails alone, and the file goes on."""
    if TEST_TIMEOUT <= 0:
        yield
        return
    import signal

    def on_alarm(signum, frame):
        pytest.fail(f"timed out after {TEST_TIMEOUT} s (the harness's --test-timeout)", pytrace=False)

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(TEST_TIMEOUT)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def pytest_collection_modifyitems(config, items):
    keep, drop = [], []
    for item in items:
        reason = next((r for key, r in NOT_APPLICABLE.items()
                       if (item.nodeid.endswith(key[:-1]) if key.endswith("$") else key in item.nodeid)), None)
        (drop if reason else keep).append(item)
        if reason:
            print(f"not applicable: {item.nodeid}: {reason}")
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


class LocalAssetServer:
    """vLLM's image server for its multimodal tests: the simulator counts an image URL's tokens
    without fetching it, so no server runs."""

    def url_for(self, name):
        return f"http://127.0.0.1:9/{name}"


@pytest.fixture(scope="session")
def local_asset_server():
    return LocalAssetServer()


class _OfflineHub:
    """vLLM's ``hf_api()`` offline: what the Hugging Face cache has (the tokenizers) as usual;
    ``snapshot_download`` of anything else (a LoRA adapter's repository) gives a local adapter
    folder the simulator reads (``adapter_config.json``: r 8, alpha 16)."""

    def __init__(self, real):
        self.real = real

    def __getattr__(self, name):
        return getattr(self.real, name)

    def snapshot_download(self, repo_id=None, **kw):
        try:
            return self.real.snapshot_download(repo_id=repo_id, **kw)
        except Exception:       # noqa: BLE001 - not in the offline cache: a LoRA stand-in
            pass
        import tempfile
        d = tempfile.mkdtemp(prefix="lora-" + str(repo_id).replace("/", "--") + "-")
        with open(os.path.join(d, "adapter_config.json"), "w") as f:
            json.dump({"r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"], "peft_type": "LORA",
                       "base_model_name_or_path": str(repo_id)}, f)
        open(os.path.join(d, "adapter_model.safetensors"), "wb").close()
        return d


def pytest_configure(config):
    try:
        import vllm.transformers_utils.repo_utils as repo_utils
    except Exception:       # noqa: BLE001 - a file that needs it fails on its own
        return
    real = repo_utils.hf_api
    repo_utils.hf_api = lambda *a, **k: _OfflineHub(real(*a, **k))
'''

SPEECH_CONFTEST = r'''
"""Offline stand-in for vLLM's speech_to_text/conftest.py: synthetic WAV files as long as vLLM's
audio assets (mary_had_lamb 15.8 s, winning_call 11.4 s, azacinto_foscolo 8.3 s)."""
import io

import numpy as np
import pytest
import soundfile as sf


def add_attention_backend(server_args, attention_config):
    if attention_config and "backend" in attention_config:
        server_args.extend(["--attention-backend", attention_config["backend"]])


def _wav(seconds, freq, name):
    rate = 16000
    t = np.arange(int(seconds * rate)) / rate
    buf = io.BytesIO()
    sf.write(buf, (0.2 * np.sin(2 * np.pi * freq * t)).astype(np.float32), rate, format="WAV")
    buf.seek(0)
    buf.name = name
    return buf


@pytest.fixture
def mary_had_lamb():
    yield _wav(15.8, 220.0, "mary_had_lamb.wav")


@pytest.fixture
def winning_call():
    yield _wav(11.4, 330.0, "winning_call.wav")


@pytest.fixture
def foscolo():
    yield _wav(8.3, 440.0, "azacinto_foscolo.wav")
'''


def fetch_sdist(version: str, cache: Path) -> Path:
    """vLLM's sdist (it carries ``tests/``) from PyPI's simple index, unpacked under ``cache``."""
    import urllib.request
    out = cache / f"vllm-{version}"
    if (out / "tests").is_dir():
        return out
    cache.mkdir(parents=True, exist_ok=True)
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
    html = urllib.request.urlopen(f"{index}/vllm/", timeout=60).read().decode()
    links = re.findall(rf'href="([^"]*vllm-{re.escape(version)}\.tar\.gz[^"]*)"', html)
    if not links:
        raise SystemExit(f"no sdist of vllm {version} in {index}")
    url = links[0].replace("&amp;", "&")
    if not url.startswith("http"):
        url = urllib.parse.urljoin(f"{index}/vllm/", url)
    tarball = cache / f"vllm-{version}.tar.gz"
    urllib.request.urlretrieve(url, tarball)
    subprocess.run(["tar", "xzf", str(tarball), "-C", str(cache), f"vllm-{version}/tests", f"vllm-{version}/pyproject.toml"],
                   check=True)
    return out


def offline_hub(work: Path, files: list, src: Path) -> Path:
    """A Hugging Face cache (``HF_HOME``) in which every model the chosen files name (each
    ``"org/name"`` string in them) is the simulated tokenizer, as ``vllm-sim
    export-tokenizer --bare-words`` writes it, with a ``config.json`` giving the model's
    embedding rows (:data:`EMBEDDING_ROWS`, the vocabulary size vLLM checks ids against): the
    tests' own ``get_tokenizer(MODEL_NAME)`` and the simulator then share one tokenizer offline
    (the real models' tokenizers would be downloaded).  Returns the ``HF_HOME`` folder."""
    home = work / "hf"
    export = work / "exported-tokenizer"
    # --bare-words: the tests decode the server's answers ("assistant," and "today?" too) with it
    subprocess.run([sys.executable, "-m", "data.tokenizer_export", str(export), "--bare-words"], cwd=ROOT,
                   check=True, capture_output=True)
    # the model's embedding rows: Qwen3's 151,936 (real models pad past their tokenizer's
    # vocabulary), so the ids the tests pick from a real vocabulary (logprob_token_ids 5000,
    # allowed_token_ids 42) are in range, as with the real model
    vocab = max(len(json.loads((export / "tokenizer.json").read_text())["model"]["vocab"]) + 1, EMBEDDING_ROWS)
    names = set()
    for f in files:
        path = src / "tests" / "entrypoints" / f
        if path.is_file():
            names.update(n for n in re.findall(r'"([A-Za-z0-9][\w.-]*/[\w.-]+)"', path.read_text())
                         if "lora" not in n.lower())      # adapters: hf_api's stand-in makes those
    rev = "0" * 40
    for name in sorted(names):
        repo = home / "hub" / ("models--" + name.replace("/", "--"))
        snap = repo / "snapshots" / rev
        snap.mkdir(parents=True, exist_ok=True)
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text(rev)
        for item in export.iterdir():
            shutil.copy(item, snap / item.name)
        (snap / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"],
                                                      "vocab_size": vocab}))
    return home


def lay_out(src: Path, work: Path, files: list) -> None:
    """The chosen test files under ``work/tests/entrypoints/``, with every ``__init__.py`` and
    ``conftest.py`` on their way, and the stand-ins."""
    tests = src / "tests"
    if work.exists():
        shutil.rmtree(work)
    (work / "tests").mkdir(parents=True)
    (work / "tests" / "__init__.py").write_text("")
    (work / "tests" / "utils.py").write_text(STUB_UTILS)
    (work / "tests" / "conftest.py").write_text(STUB_CONFTEST)
    for rel in files:
        path = tests / "entrypoints" / rel
        if not path.is_file():
            print(f"missing in vLLM's tree: {rel}")
            continue
        dest = work / "tests" / "entrypoints" / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, dest)
        d = path.parent
        while d != tests:
            target = work / "tests" / d.relative_to(tests)
            target.mkdir(parents=True, exist_ok=True)
            for name in ("__init__.py", "conftest.py"):
                if (d / name).is_file() and not (target / name).exists():
                    shutil.copy(d / name, target / name)
            if not (target / "__init__.py").exists():
                (target / "__init__.py").write_text("")
            d = d.parent
    speech = work / "tests" / "entrypoints" / "speech_to_text" / "conftest.py"
    if speech.exists():
        speech.write_text(SPEECH_CONFTEST)
    (work / "pytest.ini").write_text("[pytest]\nasyncio_default_fixture_loop_scope = function\n"
                                     "markers =\n    slow_test\n    skip_global_cleanup\n    core_model\n"
                                     "    cpu_test\n    optional\n    distributed\n    split\n")


def _limit_memory(gb: float):
    """A ``preexec_fn`` capping the child's address space (RLIMIT_AS) at ``gb`` GiB."""
    def apply():
        import resource
        limit = int(gb * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return apply


def read_junit(path: Path) -> list:
    """``[(nodeid, outcome, message)]`` from pytest's JUnit XML."""
    out = []
    for case in ET.parse(path).getroot().iter("testcase"):
        nodeid = f"{case.get('classname')}::{case.get('name')}"
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                message = (el.get("message") or "").splitlines()[0][:300] if el.get("message") else ""
                break
        out.append((nodeid, outcome, message))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--vllm-src", type=Path, help="vLLM's source tree (an unpacked sdist or a checkout)")
    p.add_argument("--fetch", metavar="VERSION", help="download vLLM VERSION's sdist (PyPI) and use it")
    p.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "vllm-sim")
    p.add_argument("--python", default=sys.executable, help="the Python that has vLLM and pytest")
    p.add_argument("--files", nargs="*", default=DEFAULT_FILES, help="paths under tests/entrypoints/")
    p.add_argument("-k", dest="keyword", help="pytest -k expression")
    p.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "vllm-sim-entrypoint-tests")
    p.add_argument("--json", type=Path, help="write the per-test outcomes here")
    p.add_argument("--sim-args", default="--time-to-first-token 20ms --inter-token-latency 5ms --response-length natural",
                   help="flags every simulator gets after the test's own: a GPU model's latency (vLLM's tests that "
                        "watch a request while it runs need one) and a small real model's lengths (its short "
                        "answers run to max_tokens: tests assert finish_reason 'length' and count max_tokens "
                        "tokens per request)")
    p.add_argument("--no-offline-tokenizers", dest="offline_tokenizers", action="store_false",
                   help="do not stand the simulated tokenizer in for the tests' models (offline HF cache)")
    p.add_argument("--file-timeout", type=int, default=300, help="seconds for one test file")
    p.add_argument("--test-timeout", type=int, default=90, help="seconds for one test (its setup, call and teardown)")
    p.add_argument("--memory-gb", type=float, default=8.0, help="address space of one test file's pytest")
    a = p.parse_args(argv)
    src = fetch_sdist(a.fetch, a.cache) if a.fetch else a.vllm_src
    if src is None:
        p.error("give --vllm-src or --fetch")
    lay_out(src, a.workdir, a.files)
    hf_home = offline_hub(a.workdir, a.files, src) if a.offline_tokenizers else None
    dropped = a.workdir / "dropped-flags.txt"
    env = dict(os.environ, VLLM_SIM_ROOT=str(ROOT), VLLM_SIM_PYTHON=sys.executable, HF_HUB_OFFLINE="1",
               VLLM_SIM_NOT_APPLICABLE=json.dumps(NOT_APPLICABLE), VLLM_SIM_DROPPED_LOG=str(dropped),
               PYTHONPATH=str(a.workdir), VLLM_SIM_EXTRA_ARGS=a.sim_args, VLLM_SIM_TEST_TIMEOUT=str(a.test_timeout))
    if hf_home is not None:
        env["HF_HOME"] = str(hf_home)
    # one pytest process per file: a file that hangs or grows is cut off alone (--file-timeout,
    # --memory-gb of address space), the others still run
    results, wall, stdout = [], 0.0, ""
    for f in a.files:
        if not (a.workdir / "tests/entrypoints" / f).exists():
            continue
        junit = a.workdir / (f.replace("/", "__") + ".xml")
        cmd = [a.python, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rN", f"--junitxml={junit}",
               str(Path("tests/entrypoints") / f)]
        if a.keyword:
            cmd += ["-k", a.keyword]
        t0 = time.time()
        try:
            run = subprocess.run(cmd, cwd=a.workdir, env=env, timeout=a.file_timeout, capture_output=True, text=True,
                                 preexec_fn=_limit_memory(a.memory_gb))
            stdout += run.stdout
        except subprocess.TimeoutExpired:
            results.append((f"{f}::(the file)", "error", f"timed out after {a.file_timeout} s"))
        wall += time.time() - t0
        if junit.exists():
            results += read_junit(junit)
        elif not any(r[0].startswith(f) for r in results):
            results.append((f"{f}::(the file)", "error", "no report (crashed or out of memory)"))
    counts: dict = {}
    for _, outcome, _ in results:
        counts[outcome] = counts.get(outcome, 0) + 1
    passed = counts.get("passed", 0)
    failed = counts.get("failed", 0) + counts.get("error", 0)
    for nodeid, outcome, message in results:
        if outcome in ("failed", "error"):
            print(f"{outcome.upper():6} {nodeid}: {message}")
    deselected = len(re.findall(r"^not applicable: ", stdout, re.M))
    flags = sorted(set(dropped.read_text().split())) if dropped.exists() else []
    print(f"\nflags the simulator does not take (dropped): {' '.join(flags) or 'none'}")
    print(f"not applicable (deselected): {deselected}; skipped by the tests themselves: {counts.get('skipped', 0)}")
    rate = 100.0 * passed / (passed + failed) if passed + failed else 0.0
    print(f"{passed} passed, {failed} failed ({rate:.1f}% of {passed + failed} that apply) in {wall:.0f} s, "
          f"load {os.getloadavg()[0]:.2f}")
    if a.json:
        a.json.write_text(json.dumps([{"test": n, "outcome": o, "message": m} for n, o, m in results], indent=1))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
