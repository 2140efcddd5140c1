"""vLLM's gRPC API (issue 24): real ``python app.py --grpc`` and ``--grpc-port`` servers driven
by a real gRPC client built from ``smg-grpc-proto`` (``vllm.grpc.engine.VllmEngine``), the
gRPC health service and server reflection."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

grpc = pytest.importorskip("grpc")
from smg_grpc_proto.generated import common_pb2, vllm_engine_pb2 as pb, vllm_engine_pb2_grpc as pbg  # noqa: E402

from support import ROOT, _clean_env, free_port, metric, scrape  # noqa: E402

pytestmark = pytest.mark.server
SERVICE = "vllm.grpc.engine.VllmEngine"


class GrpcServers:
    def __init__(self):
        self.procs = {}

    def start(self, *flags, env=None, model="test-model") -> int:
        key = (flags, tuple(sorted((env or {}).items())), model)
        if key in self.procs:
            return self.procs[key][1]
        port = free_port()
        args = [sys.executable, str(ROOT / "app.py"), "--grpc", "--port", str(port), "--host", "127.0.0.1",
                "--model", model, *flags]
        proc = subprocess.Popen(args, cwd=ROOT, env=_clean_env(env), stdout=subprocess.DEVNULL,
                                stderr=subprocess.STDOUT)
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        try:
            grpc.channel_ready_future(channel).result(timeout=90)     # an HF tokenizer under load: slow
        except grpc.FutureTimeoutError:
            proc.kill()
            raise RuntimeError("gRPC server did not start")
        channel.close()
        self.procs[key] = (proc, port)
        return port

    def stop_all(self):
        for proc, _ in self.procs.values():
            proc.send_signal(signal.SIGINT)
        for proc, _ in self.procs.values():
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.fixture(scope="module")
def grpc_server():
    pool = GrpcServers()
    yield pool.start
    pool.stop_all()


def stub_for(port: int):
    return pbg.VllmEngineStub(grpc.insecure_channel(f"127.0.0.1:{port}"))


@pytest.fixture(scope="module")
def engine(grpc_server):
    return stub_for(grpc_server("--inter-token-latency", "5ms"))


def gen(text="hello there friend", stream=True, rid="r1", **sp):
    return pb.GenerateRequest(request_id=rid, text=text, stream=stream, sampling_params=pb.SamplingParams(**sp))


# ---- Generate ------------------------------------------------------------------------------------

def test_streamed_generate_with_logprobs(engine):
    out = list(engine.Generate(gen(max_tokens=6, ignore_eos=True, logprobs=2), timeout=10))
    chunks = [r.chunk for r in out if r.WhichOneof("response") == "chunk"]
    (done,) = [r.complete for r in out if r.WhichOneof("response") == "complete"]
    assert out[-1].complete == done
    # one chunk per token (tokens that fell due together under load share one)
    sizes = [len(c.token_ids) for c in chunks]
    assert sum(sizes) == 6 and [c.completion_tokens for c in chunks] == [sum(sizes[:i + 1]) for i in range(len(sizes))]
    assert all(c.prompt_tokens == 3 and c.index == 0 for c in chunks)
    for c in chunks:
        lp = c.output_logprobs
        assert list(lp.token_ids) == list(c.token_ids) and len(lp.token_logprobs) == len(c.token_ids)
        assert all(len(t.values) == 2 and t.token_ids[0] == tid for t, tid in zip(lp.top_logprobs, c.token_ids))
    assert done.finish_reason == "length" and done.prompt_tokens == 3 and done.completion_tokens == 6


def test_non_streamed_generate_and_n(engine):
    out = list(engine.Generate(gen(stream=False, max_tokens=4, ignore_eos=True, n=2,
                                   logprobs=1), timeout=10))
    assert [r.WhichOneof("response") for r in out] == ["complete", "complete"]
    assert sorted(r.complete.index for r in out) == [0, 1]
    for r in out:
        c = r.complete
        assert len(c.output_ids) == 4 and c.completion_tokens == 4 and c.finish_reason == "length"
        assert list(c.output_logprobs.token_ids) == list(c.output_ids)


def test_token_ids_input_and_remote_decode_params(engine):
    req = pb.GenerateRequest(request_id="kv1", tokenized=pb.TokenizedInput(input_ids=[5, 6, 7, 8]), stream=False,
                             sampling_params=pb.SamplingParams(max_tokens=2),
                             kv_transfer_params_json=json.dumps({"do_remote_decode": True}))
    (r,) = list(engine.Generate(req, timeout=10))
    c = r.complete
    assert c.prompt_tokens == 4 and c.finish_reason == "remote_decode"
    assert json.loads(c.kv_transfer_params_json)["remote_host"] == "DUMMY"


@pytest.mark.parametrize("req, text", [
    (pb.GenerateRequest(request_id="x", sampling_params=pb.SamplingParams(max_tokens=1)), "input"),
    (gen(max_tokens=0), "max_tokens"),
    (gen(logprobs=50), "max allowed: 20"),
    (pb.GenerateRequest(request_id="x", text="hi", kv_transfer_params_json="{bad"), "not JSON"),
    (pb.GenerateRequest(request_id="x", text="hi", stream=True, kv_transfer_params_json='{"do_remote_decode": true}'),
     "streaming"),
    (gen(text="word " * 2000, max_tokens=1), "maximum context length"),
])
def test_malformed_requests_are_invalid_argument(engine, req, text):
    with pytest.raises(grpc.RpcError) as e:
        list(engine.Generate(req, timeout=10))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and text in e.value.details()
    assert engine.HealthCheck(pb.HealthCheckRequest(), timeout=5).healthy      # never a crash


# ---- Abort and disconnect ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def slow(grpc_server):
    return stub_for(grpc_server("--inter-token-latency", "50ms", "--max-num-seqs", "1"))


def _running(stub) -> int:
    return stub.GetLoads(pb.GetLoadsRequest(), timeout=5).loads[0].num_running_reqs


def test_abort_mid_stream_frees_the_slot(slow):
    stream = slow.Generate(gen(rid="ab1", max_tokens=100, ignore_eos=True), timeout=30)
    first = [next(stream), next(stream)]
    assert all(r.WhichOneof("response") == "chunk" for r in first)
    assert _running(slow) == 1
    slow.Abort(pb.AbortRequest(request_ids=["ab1", "unknown"]), timeout=5)
    rest = list(stream)
    assert rest[-1].complete.finish_reason == "abort" and len(rest) < 20
    assert _running(slow) == 0


def test_client_cancel_aborts(slow):
    stream = slow.Generate(gen(rid="c1", max_tokens=100, ignore_eos=True), timeout=30)
    next(stream)
    stream.cancel()
    deadline = time.monotonic() + 3
    while _running(slow) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _running(slow) == 0
    out = list(slow.Generate(gen(rid="c2", max_tokens=2, stream=False), timeout=10))    # the slot is free
    assert out[0].complete.completion_tokens >= 1


# ---- information -----------------------------------------------------------------------------------

def test_model_server_info_loads_and_health(slow):
    info = slow.GetModelInfo(pb.GetModelInfoRequest(), timeout=5)
    assert info.model_path == "test-model" and info.is_generation and info.max_context_length == 1024
    assert info.served_model_name == "test-model"
    stream = slow.Generate(gen(rid="load1", max_tokens=40, ignore_eos=True), timeout=30)
    next(stream)
    second = []
    waiting = threading.Thread(target=lambda: second.extend(slow.Generate(gen(rid="load2", stream=False,
                                                                              max_tokens=1), timeout=30)))
    waiting.start()
    deadline = time.monotonic() + 10              # until the second request is queued
    while time.monotonic() < deadline:
        loads = slow.GetLoads(pb.GetLoadsRequest(), timeout=5)
        if loads.loads[0].num_waiting_reqs:
            break
        time.sleep(0.02)
    assert loads.dp_rank_count == 1 and loads.version
    (load,) = loads.loads
    assert (load.num_running_reqs, load.num_waiting_reqs, load.max_running_requests) == (1, 1, 1)
    server = slow.GetServerInfo(pb.GetServerInfoRequest(), timeout=5)
    assert server.server_type == "vllm-grpc" and server.active_requests == 2 and server.max_num_seqs == 1
    assert server.uptime_seconds > 0 and server.block_size == 16
    stream.cancel()
    waiting.join(10)
    assert second and second[0].complete.completion_tokens == 1
    h = slow.HealthCheck(pb.HealthCheckRequest(), timeout=5)
    assert h.healthy and h.message
    with pytest.raises(grpc.RpcError) as e:
        slow.GetLoads(pb.GetLoadsRequest(dp_rank=3), timeout=5)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_health_service_and_reflection(grpc_server):
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
    channel = grpc.insecure_channel(f"127.0.0.1:{grpc_server('--inter-token-latency', '5ms')}")
    health = health_pb2_grpc.HealthStub(channel)
    for name in ("", SERVICE):
        assert health.Check(health_pb2.HealthCheckRequest(service=name), timeout=5).status == \
            health_pb2.HealthCheckResponse.SERVING
    services = set(ProtoReflectionDescriptorDatabase(channel).get_services())
    assert {SERVICE, "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"} <= services


def test_admin_methods(engine):
    assert engine.FlushCache(common_pb2.FlushCacheRequest(), timeout=5).success
    assert not engine.StartProfile(common_pb2.StartProfileRequest(), timeout=5).success
    assert not engine.StopProfile(common_pb2.StopProfileRequest(), timeout=5).success
    with pytest.raises(grpc.RpcError) as e:
        list(engine.GetTokenizer(common_pb2.GetTokenizerRequest(), timeout=5))
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(grpc.RpcError) as e:
        list(engine.SubscribeKvEvents(common_pb2.SubscribeKvEventsRequest(), timeout=5))
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(grpc.RpcError) as e:
        engine.Embed(pb.EmbedRequest(tokenized=pb.TokenizedInput(input_ids=[1])), timeout=5)
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_get_tokenizer_from_the_hub_cache(grpc_server, tmp_path_factory):
    """End to end over gRPC with a hub-cache tokenizer; which files, the chunking and the
    directory rules are checked in-process (``tests/app/test_grpc_tokenizer_files.py``)."""
    import hashlib
    import io
    import zipfile
    from support.tokenizer_hub import MODEL, make_hub
    root = str(tmp_path_factory.mktemp("hf"))
    make_hub(root)
    stub = stub_for(grpc_server(env={"HF_HOME": root, "HF_HUB_OFFLINE": "1"}, model=MODEL))
    chunks = list(stub.GetTokenizer(common_pb2.GetTokenizerRequest(), timeout=10))
    data = b"".join(c.data for c in chunks)
    assert chunks[-1].sha256 == hashlib.sha256(data).hexdigest() and all(not c.sha256 for c in chunks[:-1])
    names = zipfile.ZipFile(io.BytesIO(data)).namelist()
    assert "tokenizer.json" in names and "tokenizer_config.json" in names


def test_subscribe_kv_events_receives_a_requests_blocks(grpc_server):
    stub = stub_for(grpc_server("--enable-kvcache", "--block-size", "8", env={"POD_IP": "10.0.0.1"}))
    events = stub.SubscribeKvEvents(common_pb2.SubscribeKvEventsRequest(), timeout=10)
    got = []
    ready = threading.Event()

    def read():
        for batch in events:
            got.append(batch)
            ready.set()
            return

    t = threading.Thread(target=read)
    t.start()
    sent = []
    for attempt in range(10):                 # until the subscription is in place on the server
        ids = list(range(1000 * (attempt + 1), 1000 * (attempt + 1) + 24))     # 3 full blocks of 8
        sent.append(ids)
        list(stub.Generate(pb.GenerateRequest(request_id=f"kv{attempt}", tokenized=pb.TokenizedInput(input_ids=ids),
                                              sampling_params=pb.SamplingParams(max_tokens=1)), timeout=10))
        if ready.wait(1):
            break
    events.cancel()
    t.join(2)
    assert got
    (ev,) = got[0].events
    assert ev.WhichOneof("data") == "stored" and got[0].sequence_number >= 1
    blocks = ev.stored.blocks
    ids = [s for s in sent if s[0] == blocks[0].token_ids[0]][0]
    assert [list(b.token_ids) for b in blocks] == [ids[0:8], ids[8:16], ids[16:24]]
    assert all(b.block_size == 8 for b in blocks)


def test_pooling_embed(grpc_server):
    stub = stub_for(grpc_server("--runner", "pooling"))
    r = stub.Embed(pb.EmbedRequest(request_id="e", tokenized=pb.TokenizedInput(input_ids=[1, 2, 3])), timeout=5)
    assert r.embedding_dim == 384 and len(r.embedding) == 384 and r.prompt_tokens == 3
    assert not stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=5).is_generation


# ---- --grpc-port: beside HTTP, the same engine --------------------------------------------------------

def test_grpc_port_beside_http_shares_the_engine(sim_server):
    port = free_port()
    base = sim_server("--grpc-port", str(port))
    stub = stub_for(port)
    out = list(stub.Generate(gen(text="one two three four", stream=False, max_tokens=3, ignore_eos=True),
                             timeout=10))
    assert out[0].complete.completion_tokens == 3
    r = httpx.post(base + "/v1/completions", json={"prompt": "a b", "max_tokens": 2, "ignore_eos": True})
    assert r.status_code == 200
    m = scrape(base)
    assert metric(m, "vllm:prompt_tokens_total") == 4 + r.json()["usage"]["prompt_tokens"]
    assert metric(m, "vllm:generation_tokens_total") == 5
    assert stub.HealthCheck(pb.HealthCheckRequest(), timeout=5).healthy


def test_grpc_flag_conflicts():
    from generation.config.cli import load_config
    from generation.config.values import ConfigError
    for argv in (["--grpc", "--grpc-port", "9000"], ["--grpc-port", "8000"], ["--grpc", "--mm-encoder-only"]):
        with pytest.raises(ConfigError):
            load_config(argv, env={})
