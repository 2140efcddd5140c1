"""vLLM's gRPC API (issue 24): real ``python app.py --grpc`` and ``--grpc-port`` servers driven
by a real gRPC client built from ``smg-grpc-proto`` (``vllm.grpc.engine.VllmEngine``), the
gRPC health service and server reflection.  Most tests run against both: ``--grpc`` (gRPC on
``--port``, no HTTP) and ``--grpc-port`` (beside HTTP, whose ``/metrics`` then shows the same
engine)."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import httpx
import pytest

grpc = pytest.importorskip("grpc")
from smg_grpc_proto.generated import common_pb2, vllm_engine_pb2 as pb, vllm_engine_pb2_grpc as pbg  # noqa: E402

from support import ROOT, _clean_env, free_port, metric, scrape  # noqa: E402

pytestmark = pytest.mark.server
SERVICE = "vllm.grpc.engine.VllmEngine"
MODES = ("grpc", "grpc-port")


@dataclass
class Target:
    stub: object
    port: int                 # the gRPC port
    base: str | None          # HTTP base URL (--grpc-port), None with --grpc

    def running_waiting(self) -> tuple[int, int]:
        load = self.stub.GetLoads(pb.GetLoadsRequest(), timeout=5).loads[0]
        return load.num_running_reqs, load.num_waiting_reqs

    def gauges(self) -> tuple[int, int]:
        m = scrape(self.base)
        return int(metric(m, "vllm:num_requests_running")), int(metric(m, "vllm:num_requests_waiting"))


# gRPC's reconnect backoff starts at 1 s (then 1.6 s, 2.56 s, ...): a channel that first tries a
# server still importing waited that long after the port opened (a ``--grpc`` start: ~1 s to
# ready instead of ~0.5 s; an HF tokenizer's, seconds more).  The probe retries every 50-100 ms.
READY_PROBE = [("grpc.initial_reconnect_backoff_ms", 50), ("grpc.min_reconnect_backoff_ms", 50),
               ("grpc.max_reconnect_backoff_ms", 100)]


def _ready(port: int, proc=None) -> None:
    channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=READY_PROBE)
    ready = grpc.channel_ready_future(channel)
    try:
        deadline = time.monotonic() + 90           # an HF tokenizer under load: slow
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"gRPC server exited with {proc.returncode}")
            try:
                ready.result(timeout=0.2)
                return
            except grpc.FutureTimeoutError:
                continue
        if proc is not None:
            proc.kill()
        raise RuntimeError("gRPC server did not start")
    finally:
        channel.close()


class GrpcServers:
    """``python app.py --grpc`` processes keyed by (flags, env, model); ``--grpc-port`` servers
    come from the shared ``sim_server`` pool."""

    def __init__(self, sim_server):
        self.procs = {}
        self.sim_server = sim_server
        self.beside = {}

    def start(self, mode: str, *flags, env=None, model="test-model") -> Target:
        key = (mode, flags, tuple(sorted((env or {}).items())), model)
        if mode == "grpc-port":
            if key not in self.beside:
                port = free_port()
                base = self.sim_server("--grpc-port", str(port), *flags, env=env, model=model)
                _ready(port)
                self.beside[key] = (port, base)
            port, base = self.beside[key]
            return Target(stub_for(port), port, base)
        if key not in self.procs:
            port = free_port()
            args = [sys.executable, str(ROOT / "app.py"), "--grpc", "--port", str(port), "--host", "127.0.0.1",
                    "--model", model, *flags]
            proc = subprocess.Popen(args, cwd=ROOT, env=_clean_env(env), stdout=subprocess.DEVNULL,
                                    stderr=subprocess.STDOUT)
            _ready(port, proc)
            self.procs[key] = (proc, port)
        return Target(stub_for(self.procs[key][1]), self.procs[key][1], None)

    def stop_all(self):
        for proc, _ in self.procs.values():
            proc.send_signal(signal.SIGINT)
        for proc, _ in self.procs.values():
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.fixture(scope="module")
def grpc_server(sim_server):
    pool = GrpcServers(sim_server)
    yield pool.start
    pool.stop_all()


def stub_for(port: int):
    return pbg.VllmEngineStub(grpc.insecure_channel(f"127.0.0.1:{port}"))


@pytest.fixture(scope="module", params=MODES)
def mode(request):
    return request.param


@pytest.fixture(scope="module")
def engine(grpc_server, mode):
    return grpc_server(mode, "--inter-token-latency", "5ms").stub


@pytest.fixture(scope="module")
def slow(grpc_server, mode) -> Target:
    return grpc_server(mode, "--inter-token-latency", "50ms", "--max-num-seqs", "1")


def gen(text="hello there friend", stream=True, rid="r1", **sp):
    return pb.GenerateRequest(request_id=rid, text=text, stream=stream, sampling_params=pb.SamplingParams(**sp))


def kinds(out) -> list[str]:
    return [r.WhichOneof("response") for r in out]


def collect(stream, out: list) -> threading.Thread:
    """Read ``stream`` into ``out`` in a thread (until it ends or is cancelled)."""
    def read():
        try:
            for r in stream:
                out.append(r)
        except grpc.RpcError:
            pass
    t = threading.Thread(target=read, daemon=True)
    t.start()
    return t


def until(pred, timeout: float = 5.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.02)
    raise AssertionError(f"{what} not reached within {timeout}s")


# ---- Generate ------------------------------------------------------------------------------------

def test_streamed_generate_with_logprobs(engine):
    out = list(engine.Generate(gen(max_tokens=6, ignore_eos=True, logprobs=2), timeout=10))
    chunks = [r.chunk for r in out if r.WhichOneof("response") == "chunk"]
    (done,) = [r.complete for r in out if r.WhichOneof("response") == "complete"]
    assert kinds(out)[-1] == "complete"
    # one chunk per token (tokens that fell due together under load share one); completion_tokens
    # is the chunk's own count, as vLLM's servicer sends it (the client accumulates)
    sizes = [len(c.token_ids) for c in chunks]
    assert sum(sizes) == 6 and [c.completion_tokens for c in chunks] == sizes
    assert all(c.prompt_tokens == 3 and c.index == 0 and c.cached_tokens == 0 for c in chunks)
    for c in chunks:
        lp = c.output_logprobs
        assert list(lp.token_ids) == list(c.token_ids) and len(lp.token_logprobs) == len(c.token_ids)
        assert all(len(t.values) == 2 and t.token_ids[0] == tid for t, tid in zip(lp.top_logprobs, c.token_ids))
        assert all(t.values[0] == v for t, v in zip(lp.top_logprobs, lp.token_logprobs))
    # the complete repeats the last delta (vLLM's finishing output is both)
    assert done.finish_reason == "length" and done.prompt_tokens == 3
    assert list(done.output_ids) == list(chunks[-1].token_ids) and done.completion_tokens == sizes[-1]
    assert list(done.output_logprobs.token_ids) == list(chunks[-1].token_ids)
    assert not done.HasField("kv_transfer_params_json")


def test_non_streamed_generate_and_n(engine):
    out = list(engine.Generate(gen(stream=False, max_tokens=4, ignore_eos=True, n=2,
                                   logprobs=1), timeout=10))
    assert kinds(out) == ["complete", "complete"]
    assert sorted(r.complete.index for r in out) == [0, 1]
    for r in out:
        c = r.complete
        assert len(c.output_ids) == 4 and c.completion_tokens == 4 and c.finish_reason == "length"
        assert list(c.output_logprobs.token_ids) == list(c.output_ids)
        assert all(len(t.values) == 1 for t in c.output_logprobs.top_logprobs)


def test_streamed_n_gives_each_choice_its_chunks_and_complete(engine):
    out = list(engine.Generate(gen(max_tokens=3, ignore_eos=True, n=2), timeout=10))
    for i in (0, 1):
        mine = [r for r in out if getattr(r, r.WhichOneof("response")).index == i]
        assert kinds(mine)[-1] == "complete"
        assert sum(r.chunk.completion_tokens for r in mine if r.WhichOneof("response") == "chunk") == 3


def test_stream_interval_groups_the_chunks(grpc_server, mode):
    """--stream-interval 4: the first token alone, then 4 a chunk, the rest with the finish (vLLM's
    output processor serves gRPC too); groups that fall due together under load share a chunk."""
    stub = grpc_server(mode, "--inter-token-latency", "20ms", "--stream-interval", "4").stub
    out = list(stub.Generate(gen(max_tokens=10, ignore_eos=True), timeout=10))
    sizes = [len(r.chunk.token_ids) for r in out if r.WhichOneof("response") == "chunk"]
    ends = [sum(sizes[:k + 1]) for k in range(len(sizes))]
    assert sizes[0] == 1 and ends[-1] == 10 and set(ends) <= {1, 5, 9, 10}, sizes


def test_stop_string_is_matched_stop_str(engine):
    (r,) = list(engine.Generate(pb.GenerateRequest(request_id="st", text="x", stream=False,
                                                   sampling_params=pb.SamplingParams(max_tokens=50, stop=["the"])),
                                timeout=10))
    c = r.complete
    if c.finish_reason == "stop" and c.WhichOneof("matched_stop") is not None:
        assert c.matched_stop_str == "the"
    assert c.finish_reason in ("stop", "length")


def test_seed_temperature_and_stop_ids_reach_the_engine(engine):
    """vLLM's gRPC server builds its SamplingParams from every proto field: a seeded request
    answers the same streamed or not, temperature 0 is greedy, and a stop token id ends the
    answer with the matched_token_id (the simulator ignored seed, temperature, stop_token_ids,
    min_tokens and include_stop_str_in_output)."""
    def ids(stream, rid, **sp):
        toks = []
        for r in engine.Generate(gen(stream=stream, rid=rid, **sp), timeout=10):
            m = getattr(r, r.WhichOneof("response"))
            if r.WhichOneof("response") == "chunk" or not stream:
                toks += list(m.output_ids if not stream else m.token_ids)
        return toks, m
    a, _ = ids(True, "sd1", max_tokens=30, seed=11, ignore_eos=True)
    b, _ = ids(False, "sd2", max_tokens=30, seed=11, ignore_eos=True)
    assert a == b and len(a) == 30
    assert ids(False, "t01", max_tokens=20, temperature=0.0)[0] == ids(False, "t02", max_tokens=20, temperature=0.0)[0]
    k = next(k for k in range(5, 30) if a[k] not in a[3:k])     # its first time past min_tokens
    toks, c = ids(False, "sid", max_tokens=30, seed=11, ignore_eos=True, stop_token_ids=[a[k]], min_tokens=3)
    assert toks == a[:k + 1] and c.finish_reason == "stop"
    assert c.WhichOneof("matched_stop") == "matched_token_id" and c.matched_token_id == a[k]


def test_token_ids_input_and_remote_decode_params(engine):
    req = pb.GenerateRequest(request_id="kv1", tokenized=pb.TokenizedInput(input_ids=[5, 6, 7, 8]), stream=False,
                             sampling_params=pb.SamplingParams(max_tokens=2),
                             kv_transfer_params_json=json.dumps({"do_remote_decode": True}))
    (r,) = list(engine.Generate(req, timeout=10))
    c = r.complete
    assert c.prompt_tokens == 4 and c.finish_reason == "remote_decode" and c.completion_tokens == len(c.output_ids)
    params = json.loads(c.kv_transfer_params_json)
    assert params == {"do_remote_decode": False, "do_remote_prefill": True, "remote_engine_id": "DUMMY_ID",
                      "remote_block_ids": ["DUMMY_ID"], "remote_host": "DUMMY", "remote_port": 1234, "tp_size": 1}
    assert (c.kv_transfer_params.remote_host, c.kv_transfer_params.remote_port) == ("DUMMY", 1234)  # legacy mirror


@pytest.mark.parametrize("req, text", [
    (pb.GenerateRequest(request_id="x", sampling_params=pb.SamplingParams(max_tokens=1)), "input"),
    (pb.GenerateRequest(request_id="x", tokenized=pb.TokenizedInput(input_ids=[])), "empty"),
    (gen(max_tokens=0), "max_tokens"),
    (gen(logprobs=50), "max allowed: 20"),
    (pb.GenerateRequest(request_id="x", text="hi", kv_transfer_params_json="{bad"), "not JSON"),
    (pb.GenerateRequest(request_id="x", text="hi", kv_transfer_params_json="[1]"), "JSON object"),
    (pb.GenerateRequest(request_id="x", text="hi", stream=True, kv_transfer_params_json='{"do_remote_decode": true}'),
     "streaming"),
    (gen(text="word " * 2000, max_tokens=1), "maximum context length"),
    # vLLM's SamplingParams checks, as its gRPC server reads the proto (HTTP's messages)
    (gen(max_tokens=2, temperature=-5), "temperature must be non-negative, got -5.0."),
    (gen(max_tokens=2, temperature=float("nan")), "temperature must be a finite number"),
    (gen(max_tokens=2, top_p=2.0), "top_p must be in (0, 1], got 2.0."),
    (gen(max_tokens=2, min_p=5.0), "min_p must be in [0, 1]"),
    (gen(max_tokens=2, repetition_penalty=-1.0), "repetition_penalty must be greater than zero"),
    (gen(max_tokens=2, frequency_penalty=float("inf")), "frequency_penalty must be in [-2, 2]"),
    (gen(max_tokens=2, presence_penalty=5), "presence_penalty must be in [-2, 2]"),
    (gen(max_tokens=2, min_tokens=10), "min_tokens must be less than or equal to max_tokens=2"),
    (gen(max_tokens=2, logit_bias={-5: 1e9}), "out-of-vocab token ids"),
    (gen(max_tokens=2, truncate_prompt_tokens=-5), "truncate_prompt_tokens must be an integer >= 1 or -1"),
    # vLLM's InputProcessor.process_inputs, one engine: [0, 1)
    (pb.GenerateRequest(request_id="x", text="hi", data_parallel_rank=1, sampling_params=pb.SamplingParams(max_tokens=2)),
     "data_parallel_rank 1 is out of range [0, 1)."),
    # --max-request-work, as on HTTP (500 x 1,000 tokens x 21 were 99 MB of messages and 8 s of CPU)
    (gen(stream=False, max_tokens=1000, n=500, logprobs=20),
     "(n x max_tokens x (1 + logprobs)), more than the 1048576 one request may ask (--max-request-work)"),
])
def test_malformed_requests_are_invalid_argument(engine, req, text):
    with pytest.raises(grpc.RpcError) as e:
        list(engine.Generate(req, timeout=10))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and text in e.value.details()
    assert engine.HealthCheck(pb.HealthCheckRequest(), timeout=5).healthy      # never a crash


def test_proto_defaults_are_valid_sampling(engine):
    """Proto3 zeros are not a client's choice: top_p and repetition_penalty 0 read as 1 (vLLM's
    gRPC server), so a request that sets nothing is served."""
    out = list(engine.Generate(gen(rid="defaults", stream=False, max_tokens=2), timeout=10))
    assert kinds(out) == ["complete"]


def test_undecodable_bytes_are_a_status(grpc_server, mode):
    """Bytes that are no GenerateRequest at all: a status from the gRPC layer, the server lives."""
    target = grpc_server(mode, "--inter-token-latency", "5ms")
    channel = grpc.insecure_channel(f"127.0.0.1:{target.port}")
    raw = channel.unary_stream(f"/{SERVICE}/Generate", request_serializer=lambda b: b,
                               response_deserializer=lambda b: b)
    with pytest.raises(grpc.RpcError) as e:
        list(raw(b"\xff\xff\xff\xff", timeout=5))
    assert e.value.code() in (grpc.StatusCode.INTERNAL, grpc.StatusCode.INVALID_ARGUMENT) and e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        channel.unary_unary(f"/{SERVICE}/NoSuchMethod")(b"", timeout=5)
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert target.stub.HealthCheck(pb.HealthCheckRequest(), timeout=5).healthy


def test_a_request_id_in_use_is_not_refused_and_abort_reaches_every_request_under_it(slow):
    """vLLM 0.34 refuses no request id in use: InputProcessor.assign_request_id suffixes each
    request's id with 8 random characters, so both run (here the second waits for the one seat),
    and Abort of the id aborts both (OutputProcessor.abort_requests: an external id maps to all
    its internal ids).  The simulator answered INVALID_ARGUMENT "Request id dup already running."
    (the ValueError of vLLM releases before the randomisation)."""
    stream = slow.stub.Generate(gen(rid="dup", max_tokens=100, ignore_eos=True), timeout=30)
    next(stream)
    second = slow.stub.Generate(gen(rid="dup", max_tokens=100, ignore_eos=True), timeout=30)
    until(lambda: slow.running_waiting() == (1, 1), what="one running, one waiting")
    slow.stub.Abort(pb.AbortRequest(request_ids=["dup"]), timeout=5)
    assert list(stream)[-1].complete.finish_reason == "abort"
    assert list(second)[-1].complete.finish_reason == "abort"
    until(lambda: slow.running_waiting() == (0, 0), what="idle")


# ---- Abort and disconnect ----------------------------------------------------------------------------

def _assert_idle(target: Target) -> None:
    until(lambda: target.running_waiting() == (0, 0), what="GetLoads back to 0 running, 0 waiting")
    if target.base is not None:
        until(lambda: target.gauges() == (0, 0), what="vllm:num_requests_running / _waiting back to 0")


def test_abort_mid_stream_frees_the_slot(slow):
    stream = slow.stub.Generate(gen(rid="ab1", max_tokens=100, ignore_eos=True), timeout=30)
    first = [next(stream), next(stream)]
    assert kinds(first) == ["chunk", "chunk"]
    queued = slow.stub.Generate(gen(rid="ab2", max_tokens=100, ignore_eos=True), timeout=30)   # waits for the slot
    until(lambda: slow.running_waiting() == (1, 1), what="one running, one waiting")
    if slow.base is not None:
        assert slow.gauges() == (1, 1)
    slow.stub.Abort(pb.AbortRequest(request_ids=["ab1", "ab2", "unknown"]), timeout=5)
    rest = list(stream)
    assert len(rest) < 20 and kinds(rest[-2:]) == ["chunk", "complete"]
    assert list(rest[-2].chunk.token_ids) == [] and rest[-2].chunk.completion_tokens == 0   # the abort output
    assert rest[-1].complete.finish_reason == "abort" and rest[-1].complete.completion_tokens == 0
    waited = list(queued)
    assert waited[-1].complete.finish_reason == "abort"
    _assert_idle(slow)


def test_an_abort_is_counted_in_the_metrics(slow):
    """Issue 31 item 7: a gRPC ``Abort`` counts the request as vLLM does: its prompt, the tokens
    made until the abort (at least those sent) and ``request_success{finished_reason="abort"}``."""
    if slow.base is None:
        pytest.skip("/metrics needs the HTTP port (--grpc-port)")
    before = scrape(slow.base)
    stream = slow.stub.Generate(gen(rid="am1", max_tokens=100, ignore_eos=True), timeout=30)
    first = [next(stream) for _ in range(3)]
    slow.stub.Abort(pb.AbortRequest(request_ids=["am1"]), timeout=5)
    rest = list(stream)
    received = sum(len(r.chunk.token_ids) for r in first + rest if r.WhichOneof("response") == "chunk")
    _assert_idle(slow)
    after = scrape(slow.base)

    def delta(name, **labels):
        return metric(after, name, **labels) - metric(before, name, **labels)
    assert delta("vllm:request_success_total", finished_reason="abort") == 1
    assert delta("vllm:prompt_tokens_total") == first[0].chunk.prompt_tokens
    made = delta("vllm:generation_tokens_total")
    assert received <= made <= received + 4, (received, made)         # 50 ms apart: 0.2 s of slack


def test_abort_a_non_streamed_request(slow):
    got = []
    t = threading.Thread(target=lambda: got.extend(slow.stub.Generate(gen(rid="ns1", stream=False, max_tokens=100,
                                                                          ignore_eos=True), timeout=30)))
    t.start()
    until(lambda: slow.running_waiting()[0] == 1, what="running")
    time.sleep(0.2)
    slow.stub.Abort(pb.AbortRequest(request_ids=["ns1"]), timeout=5)
    t.join(10)
    (r,) = got
    assert r.complete.finish_reason == "abort" and 1 <= r.complete.completion_tokens < 100
    assert len(r.complete.output_ids) == r.complete.completion_tokens
    _assert_idle(slow)


def test_client_cancel_aborts(slow):
    stream = slow.stub.Generate(gen(rid="c1", max_tokens=100, ignore_eos=True), timeout=30)
    next(stream)
    stream.cancel()
    _assert_idle(slow)
    out = list(slow.stub.Generate(gen(rid="c2", max_tokens=2, stream=False), timeout=10))    # the slot is free
    assert out[0].complete.completion_tokens >= 1


def test_a_deadline_aborts_too(slow):
    with pytest.raises(grpc.RpcError) as e:
        list(slow.stub.Generate(gen(rid="dl", max_tokens=100, ignore_eos=True), timeout=0.5))
    assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    _assert_idle(slow)



def test_a_client_that_stops_reading_holds_no_seat(grpc_server, mode):
    """A hostile tester's finding: grpcio asks for the next message only once the previous one
    is sent, and the generation was driven by the sends, so a client that stopped reading (its
    HTTP/2 window shut) held its sequence running for good: ``--max-num-seqs`` such clients held
    every seat and every other request waited forever.  As vLLM, the generation now runs to its
    end and frees the seat; the output waits for the client, merged, and reads whole later."""
    target = grpc_server(mode, "--inter-token-latency", "1ms", "--max-num-seqs", "1")
    channel = grpc.insecure_channel(f"127.0.0.1:{target.port}", options=[("grpc.http2.bdp_probe", 0)])
    try:
        idle = pbg.VllmEngineStub(channel).Generate(gen(rid="nr", max_tokens=600, ignore_eos=True, logprobs=20),
                                                    timeout=60)      # ~150 KB of chunks: past the 64 KB window
        time.sleep(0.3)
        t0 = time.monotonic()
        out = list(target.stub.Generate(gen(rid="other", max_tokens=2, stream=False, ignore_eos=True), timeout=20))
        assert out[0].complete.completion_tokens == 2 and time.monotonic() - t0 < 10
        _assert_idle(target)                                   # the reader's generation is over
        # ... and so its id is free (vLLM's _finish_request): an Abort of it reaches nothing, and
        # a new request under it runs to its end
        target.stub.Abort(pb.AbortRequest(request_ids=["nr"]), timeout=5)
        again = list(target.stub.Generate(gen(rid="nr", max_tokens=3, stream=False, ignore_eos=True), timeout=20))
        assert again[-1].complete.finish_reason == "length" and again[-1].complete.completion_tokens == 3
        got = list(idle)
        assert kinds(got)[-1] == "complete" and got[-1].complete.finish_reason == "length"
        assert sum(len(r.chunk.token_ids) for r in got if r.WhichOneof("response") == "chunk") == 600
    finally:
        channel.close()


# ---- information -----------------------------------------------------------------------------------

def test_model_server_info_loads_and_health(slow):
    stub = slow.stub
    info = stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=5)
    assert info.model_path == "test-model" and info.is_generation and info.max_context_length == 1024
    assert info.served_model_name == "test-model" and info.max_req_input_len == 1024
    stream = stub.Generate(gen(rid="load1", max_tokens=40, ignore_eos=True), timeout=30)
    next(stream)
    second = []
    waiting = threading.Thread(target=lambda: second.extend(stub.Generate(gen(rid="load2", stream=False,
                                                                              max_tokens=1), timeout=30)))
    waiting.start()
    until(lambda: slow.running_waiting()[1], timeout=10, what="the second request queued")
    loads = stub.GetLoads(pb.GetLoadsRequest(dp_rank=3, include=["core"]), timeout=5)   # accepted, not applied
    assert loads.dp_rank_count == 1 and loads.version == "0.34.0" and loads.timestamp
    (load,) = loads.loads
    assert (load.dp_rank, load.num_running_reqs, load.num_waiting_reqs, load.num_total_reqs) == (0, 1, 1, 2)
    assert (load.max_running_requests, load.max_total_num_tokens) == (1, 1024 * 16)
    assert load.num_waiting_uncached_tokens == 3 and load.utilization == load.token_usage
    if slow.base is not None:
        m = scrape(slow.base)
        assert load.token_usage == pytest.approx(metric(m, "vllm:kv_cache_usage_perc"), abs=0.01)
    server = stub.GetServerInfo(pb.GetServerInfoRequest(), timeout=5)
    assert server.server_type == "vllm-grpc" and server.active_requests == 2 and server.max_num_seqs == 1
    assert server.uptime_seconds > 0 and server.block_size == 16 and server.last_receive_timestamp > 0
    stream.cancel()
    waiting.join(10)
    assert second and second[0].complete.completion_tokens == 1
    h = stub.HealthCheck(pb.HealthCheckRequest(), timeout=5)
    assert h.healthy and h.message == "Health"


STEP = ("--latency-calculator", "step", "--force-dummy-tokenizer", "--max-model-len", "4096", "--max-num-seqs", "2")
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def test_get_loads_reports_the_step_schedulers_state(grpc_server, mode):
    target = grpc_server(mode, *STEP, model=LLAMA)
    streams = [target.stub.Generate(pb.GenerateRequest(
        request_id=f"s{i}", tokenized=pb.TokenizedInput(input_ids=list(range(100 * i + 1, 100 * i + 65))),
        stream=True, sampling_params=pb.SamplingParams(max_tokens=2000, ignore_eos=True)), timeout=60)
        for i in range(3)]
    threads = [collect(s, []) for s in streams]
    until(lambda: target.running_waiting() == (2, 1), timeout=10, what="two running, one waiting")
    load = target.stub.GetLoads(pb.GetLoadsRequest(), timeout=5).loads[0]
    assert load.max_running_requests == 2 and load.token_usage > 0 and load.num_used_tokens > 0
    assert load.num_waiting_uncached_tokens == 64
    if target.base is not None:
        assert target.gauges() == (2, 1)
    for s in streams:
        s.cancel()
    for t in threads:
        t.join(10)
    _assert_idle(target)


def test_health_service_and_reflection(grpc_server, mode):
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
    channel = grpc.insecure_channel(f"127.0.0.1:{grpc_server(mode, '--inter-token-latency', '5ms').port}")
    health = health_pb2_grpc.HealthStub(channel)
    for name in ("", SERVICE):
        assert health.Check(health_pb2.HealthCheckRequest(service=name), timeout=5).status == \
            health_pb2.HealthCheckResponse.SERVING
    with pytest.raises(grpc.RpcError) as e:
        health.Check(health_pb2.HealthCheckRequest(service="nope"), timeout=5)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    db = ProtoReflectionDescriptorDatabase(channel)
    assert {SERVICE, "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"} <= set(db.get_services())
    from google.protobuf.descriptor_pool import DescriptorPool
    methods = {m.name for m in DescriptorPool(db).FindServiceByName(SERVICE).methods}
    assert {"Generate", "Embed", "HealthCheck", "Abort", "GetModelInfo", "GetServerInfo", "GetLoads", "GetTokenizer",
            "SubscribeKvEvents", "FlushCache", "StartProfile", "StopProfile"} <= methods


# ---- administration ------------------------------------------------------------------------------

def test_admin_methods(engine):
    ok = engine.FlushCache(common_pb2.FlushCacheRequest(), timeout=5)
    assert ok.success and ok.message == "Local KV prefix cache flushed successfully"
    with pytest.raises(grpc.RpcError) as e:
        engine.FlushCache(common_pb2.FlushCacheRequest(timeout_s=-1), timeout=5)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "timeout_s" in e.value.details()
    for call, req, op in ((engine.StartProfile, common_pb2.StartProfileRequest(), "Start profiling"),
                          (engine.StopProfile, common_pb2.StopProfileRequest(), "Stop profiling")):
        with pytest.raises(grpc.RpcError) as e:           # vLLM without a profiler config
            call(req, timeout=5)
        assert e.value.code() == grpc.StatusCode.INTERNAL and e.value.details().startswith(f"{op} failed")
    with pytest.raises(grpc.RpcError) as e:
        engine.StartProfile(common_pb2.StartProfileRequest(output_dir="/tmp/x", num_steps=3), timeout=5)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "output_dir, num_steps" in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        list(engine.GetTokenizer(common_pb2.GetTokenizerRequest(), timeout=5))
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(grpc.RpcError) as e:
        list(engine.SubscribeKvEvents(common_pb2.SubscribeKvEventsRequest(), timeout=5))
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED and "--enable-kvcache" in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        engine.Embed(pb.EmbedRequest(tokenized=pb.TokenizedInput(input_ids=[1])), timeout=5)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "embeddings" in e.value.details()


def test_flush_cache_waits_for_running_requests(slow):
    stub = slow.stub
    stream = stub.Generate(gen(rid="fl1", max_tokens=6, ignore_eos=True), timeout=30)     # ~300 ms
    next(stream)
    refused = stub.FlushCache(common_pb2.FlushCacheRequest(timeout_s=0), timeout=5)
    assert not refused.success and "in flight" in refused.message
    with pytest.raises(grpc.RpcError) as e:
        stub.FlushCache(common_pb2.FlushCacheRequest(timeout_s=0.05), timeout=5)
    assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    t0 = time.monotonic()
    assert stub.FlushCache(common_pb2.FlushCacheRequest(timeout_s=10), timeout=15).success   # once it finished
    assert time.monotonic() - t0 < 5
    assert kinds(list(stream))[-1] == "complete"


def test_an_abandoned_flush_does_not_flush_later(grpc_server, mode):
    """A FlushCache whose client gave up (its deadline) while requests ran must not reset the
    cache once they finish (vLLM's grpc.aio cancels the handler)."""
    target = grpc_server(mode, "--inter-token-latency", "50ms", "--max-num-seqs", "1", "--enable-kvcache",
                         "--block-size", "8")
    stub = target.stub
    prompt = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi"
    assert kinds(list(stub.Generate(gen(text=prompt, rid="fa1", stream=False, max_tokens=1), timeout=10))) == \
        ["complete"]
    stream = stub.Generate(gen(rid="fa2", max_tokens=8, ignore_eos=True), timeout=30)     # ~400 ms
    next(stream)
    with pytest.raises(grpc.RpcError) as e:
        stub.FlushCache(common_pb2.FlushCacheRequest(timeout_s=60), timeout=0.1)
    assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert kinds(list(stream))[-1] == "complete"
    time.sleep(0.3)                                   # past the handler's next poll
    again = list(stub.Generate(gen(text=prompt, rid="fa3", stream=False, max_tokens=1), timeout=10))
    assert again[-1].complete.cached_tokens > 0


# ---- GetTokenizer --------------------------------------------------------------------------------

def _tokenizer_zip(stub) -> tuple[list, bytes]:
    chunks = list(stub.GetTokenizer(common_pb2.GetTokenizerRequest(), timeout=10))
    return chunks, b"".join(c.data for c in chunks)


def test_get_tokenizer_streams_a_real_tokenizers_files(grpc_server, tmp_path_factory):
    """On ``--grpc`` only: the servicer is the same on ``--grpc-port``, and each server with a real
    tokenizer costs seconds of CPU (transformers)."""
    import hashlib
    import io
    import zipfile

    from tokenizers import Tokenizer

    from support.tokenizer_hub import make_hub
    snap = make_hub(str(tmp_path_factory.mktemp("hub")))
    stub = grpc_server("grpc", "--tokenizer", snap).stub
    chunks, data = _tokenizer_zip(stub)
    assert chunks[-1].sha256 == hashlib.sha256(data).hexdigest() and all(not c.sha256 for c in chunks[:-1])
    assert all(len(c.data) <= 64 * 1024 for c in chunks)
    z = zipfile.ZipFile(io.BytesIO(data))
    assert set(z.namelist()) == {"tokenizer.json", "tokenizer_config.json", "config.json"}
    # the files are the tokenizer the server runs: its prompt count is theirs
    tok = Tokenizer.from_str(z.read("tokenizer.json").decode())
    tok.no_padding()
    tok.no_truncation()
    text = "Hello there, how are you today?"
    (r,) = list(stub.Generate(gen(text=text, stream=False, max_tokens=1), timeout=10))
    assert r.complete.prompt_tokens == len(tok.encode(text).ids)
    assert json.loads(z.read("tokenizer_config.json"))["chat_template"]
    assert _tokenizer_zip(stub)[1] == data                    # built once, the same bytes


def test_get_tokenizer_from_the_hub_cache(grpc_server, tmp_path_factory):
    """End to end over gRPC with a hub-cache tokenizer; which files, the chunking and the
    directory rules are checked in-process (``tests/app/test_grpc_tokenizer_files.py``)."""
    import hashlib
    import io
    import zipfile
    from support.tokenizer_hub import MODEL, make_hub
    root = str(tmp_path_factory.mktemp("hf"))
    make_hub(root)
    stub = grpc_server("grpc", env={"HF_HOME": root, "HF_HUB_OFFLINE": "1"}, model=MODEL).stub
    assert "tokenizer.json" in zipfile.ZipFile(io.BytesIO(_tokenizer_zip(stub)[1])).namelist()
    assert stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=5).vocab_size > 0


# ---- SubscribeKvEvents: the ZMQ batches ---------------------------------------------------------------

def _signed(h: int) -> int:
    return h - (1 << 64) if h >= 1 << 63 else h


def test_subscribe_kv_events_relays_the_zmq_batches(grpc_server, mode):
    from support.kv_events import POD_IP, Listener, kind
    listener = Listener()
    try:
        target = grpc_server(mode, "--enable-kvcache", "--block-size", "8", "--zmq-endpoint", listener.endpoint,
                             env={"POD_IP": POD_IP})
        listener.prime()
        events = target.stub.SubscribeKvEvents(common_pb2.SubscribeKvEventsRequest(), timeout=30)
        got: list = []
        collect(events, got)

        def generate(rid: str, ids: list) -> None:
            list(target.stub.Generate(pb.GenerateRequest(request_id=rid, tokenized=pb.TokenizedInput(input_ids=ids),
                                                         sampling_params=pb.SamplingParams(max_tokens=1)),
                                      timeout=10))

        for attempt in range(20):           # until both the ZMQ and the gRPC subscription are in place
            generate(f"warm{attempt}", list(range(5000 + 100 * attempt, 5000 + 100 * attempt + 8)))
            time.sleep(0.1)
            if listener.drain() and got:
                break
        assert got and listener.messages
        time.sleep(0.2)
        listener.drain()
        before = len(got)
        ids = list(range(1000, 1024))       # three full blocks of 8
        generate("kv-compare", ids)
        zmq_msgs = []
        until(lambda: zmq_msgs.extend(listener.drain()) or any(
            kind(e) == "BlockStored" for m in zmq_msgs for e in m[2][1]), what="the ZMQ BlockStored")
        last_seq = zmq_msgs[-1][1]
        until(lambda: got and got[-1].sequence_number >= last_seq, what="the gRPC batches")
        relayed = {b.sequence_number: b for b in got[before:]}
        for _, seq, (ts, zevents, rank) in zmq_msgs:
            b = relayed[seq]                                   # the same batch, the same number
            assert b.timestamp == ts and b.dp_rank == rank == 0 and len(b.events) == len(zevents)
            for ev, zev in zip(b.events, zevents):
                assert ev.WhichOneof("data") == {"BlockStored": "stored", "BlockRemoved": "removed",
                                                 "AllBlocksCleared": "cleared"}[kind(zev)]
                if kind(zev) == "BlockStored":
                    _, hashes, parent, tokens, bs, lora_id, medium, lora_name, _ = zev
                    assert [b_.block_hash for b_ in ev.stored.blocks] == [_signed(h) for h in hashes]
                    assert [t for b_ in ev.stored.blocks for t in b_.token_ids] == tokens
                    assert all(b_.block_size == bs == 8 for b_ in ev.stored.blocks)
                    assert ev.stored.medium == medium == "GPU"
                    assert ev.stored.tier == common_pb2.KV_CACHE_TIER_DEVICE
                    assert (ev.stored.parent_block_hash if ev.stored.HasField("parent_block_hash") else None) == \
                        (None if parent is None else _signed(parent))
        stored = [e for b in got[before:] for e in b.events if e.WhichOneof("data") == "stored"]
        assert [list(b_.token_ids) for b_ in stored[-1].stored.blocks] == [ids[0:8], ids[8:16], ids[16:24]]
        ids_ = [e.event_id for b in got for e in b.events]
        assert ids_ == sorted(ids_) and len(set(ids_)) == len(ids_)
        events.cancel()
    finally:
        listener.close()


@pytest.mark.parametrize("timing", [(), ("--latency-calculator", "step")], ids=["reference", "step"])
def test_subscribe_kv_events_without_zmq(grpc_server, timing):
    """``--zmq-endpoint ""``: no ZMQ, the batches still reach gRPC subscribers (in step mode the
    engine's block pool announces the blocks)."""
    stub = grpc_server("grpc", "--enable-kvcache", "--block-size", "8", "--zmq-endpoint", "", *timing,
                       env={"POD_IP": "10.0.0.5"}).stub
    events = stub.SubscribeKvEvents(common_pb2.SubscribeKvEventsRequest(), timeout=10)
    got = []
    collect(events, got)
    for attempt in range(10):
        ids = list(range(1000 * (attempt + 1), 1000 * (attempt + 1) + 16))
        list(stub.Generate(pb.GenerateRequest(request_id=f"z{attempt}", tokenized=pb.TokenizedInput(input_ids=ids),
                                              sampling_params=pb.SamplingParams(max_tokens=1)), timeout=10))
        time.sleep(0.1)
        if got:
            break
    events.cancel()
    assert got[0].sequence_number >= 1 and got[0].events[0].WhichOneof("data") == "stored"
    assert len(got[0].events[0].stored.blocks) == 2


# ---- Embed ----------------------------------------------------------------------------------------

def test_pooling_embed(grpc_server, mode):
    target = grpc_server(mode, "--runner", "pooling")
    stub = target.stub
    r = stub.Embed(pb.EmbedRequest(request_id="e", tokenized=pb.TokenizedInput(input_ids=[1, 2, 3])), timeout=5)
    assert r.embedding_dim == 384 and len(r.embedding) == 384 and r.prompt_tokens == 3
    again = stub.Embed(pb.EmbedRequest(request_id="e2", tokenized=pb.TokenizedInput(input_ids=[1, 2, 3])), timeout=5)
    assert list(again.embedding) == list(r.embedding)
    assert sum(v * v for v in r.embedding) == pytest.approx(1.0, abs=1e-4)
    assert not stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=5).is_generation
    for bad, text in ((pb.EmbedRequest(request_id="b"), "tokenized"),
                      (pb.EmbedRequest(tokenized=pb.TokenizedInput(input_ids=[1] * 1025)), "1 to 1024 tokens")):
        with pytest.raises(grpc.RpcError) as e:
            stub.Embed(bad, timeout=5)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and text in e.value.details()
    if target.base is not None:     # on the engine: counted as a pooling request
        m = scrape(target.base)
        assert metric(m, "vllm:prompt_tokens_total") >= 6
        assert metric(m, "vllm:request_success_total", finished_reason="stop") >= 2
    with pytest.raises(grpc.RpcError) as e:          # a pooling model generates nothing
        list(stub.Generate(gen(max_tokens=1), timeout=5))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "'generate' task" in e.value.details()


# ---- --grpc-port: beside HTTP, the same engine --------------------------------------------------------

def test_grpc_port_beside_http_shares_the_engine(grpc_server):
    target = grpc_server("grpc-port")
    base = target.base
    out = list(target.stub.Generate(gen(text="one two three four", stream=False, max_tokens=3, ignore_eos=True),
                                    timeout=10))
    assert out[0].complete.completion_tokens == 3
    r = httpx.post(base + "/v1/completions", json={"prompt": "a b", "max_tokens": 2, "ignore_eos": True})
    assert r.status_code == 200
    m = scrape(base)
    assert metric(m, "vllm:prompt_tokens_total") == 4 + r.json()["usage"]["prompt_tokens"]
    assert metric(m, "vllm:generation_tokens_total") == 5
    assert target.stub.HealthCheck(pb.HealthCheckRequest(), timeout=5).healthy


def test_grpc_flag_conflicts():
    from generation.config.cli import load_config
    from generation.config.values import ConfigError
    for argv in (["--grpc", "--grpc-port", "9000"], ["--grpc-port", "8000"], ["--grpc", "--mm-encoder-only"]):
        with pytest.raises(ConfigError):
            load_config(argv, env={})


# ---- issue 31 item 8: nesting, malformed messages, SIGTERM -------------------------------------------

def test_deeply_nested_kv_transfer_params_is_invalid_argument(engine):
    """5,000 levels of ``kv_transfer_params_json`` gave ``UNKNOWN`` and a traceback
    (``RecursionError`` in ``json.loads``): a JSON error, ``INVALID_ARGUMENT``."""
    req = gen(rid="deep", max_tokens=2)
    req.kv_transfer_params_json = "[" * 5000 + "]" * 5000
    with pytest.raises(grpc.RpcError) as e:
        list(engine.Generate(req, timeout=10))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "kv_transfer_params_json is not JSON" in e.value.details()
    req.kv_transfer_params_json = '{"do_remote_prefill": "yes"}'
    with pytest.raises(grpc.RpcError) as e:
        list(engine.Generate(req, timeout=10))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details().startswith("kv_transfer_params_json.do_remote_prefill: must be a boolean")


@pytest.mark.parametrize("beside_http", [True, False], ids=["grpc-port", "grpc"])
def test_sigterm_ends_grpc_streams_with_an_abort_and_malformed_messages_log_one_line(tmp_path, beside_http):
    """At SIGTERM, gRPC streams were cut with ``UNAVAILABLE``/``CANCELLED`` and no ``complete``
    while the log said "0 request(s) in flight"; 300 malformed messages printed 356 tracebacks.
    Now the streams get the grace, then vLLM's abort output (an empty chunk, a ``complete``
    whose finish reason is ``abort``), the log counts them, and a malformed message is one
    warning line (at most one per 10 s)."""
    port, http = free_port(), free_port()
    log = tmp_path / "out.log"
    with open(log, "wb") as out:
        where = ["--port", str(http), "--grpc-port", str(port)] if beside_http else ["--grpc", "--port", str(port)]
        proc = subprocess.Popen([sys.executable, str(ROOT / "app.py"), *where, "--host", "127.0.0.1",
                                 "--inter-token-latency", "50ms", "--shutdown-timeout", "0.5"], cwd=ROOT,
                                env=_clean_env(None), stdout=out, stderr=subprocess.STDOUT)
    try:
        _ready(port, proc)
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        stub = pbg.VllmEngineStub(channel)
        garbage = channel.unary_stream(f"/{SERVICE}/Generate", request_serializer=lambda b: b,
                                       response_deserializer=lambda b: b)
        for _ in range(30):
            with pytest.raises(grpc.RpcError) as e:
                list(garbage(b"\xff\xff\xff\xff", timeout=5))
            assert e.value.code() == grpc.StatusCode.INTERNAL
        streams = [stub.Generate(gen(rid=f"t{i}", max_tokens=1000, ignore_eos=True), timeout=30) for i in range(5)]
        firsts = [next(s) for s in streams]
        assert kinds(firsts) == ["chunk"] * 5
        proc.send_signal(signal.SIGTERM)
        rests = [list(s) for s in streams]          # no RpcError: each ends as vLLM's abort output does
        for rest in rests:
            assert kinds(rest[-2:]) == ["chunk", "complete"], kinds(rest[-3:])
            assert rest[-1].complete.finish_reason == "abort"
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text(errors="replace")
    assert "Traceback" not in text, text[-3000:]
    assert text.count("could not be parsed") == 1, text[-3000:]
    line = ("shutting down (SIGTERM): 0 request(s) in flight and 5 gRPC stream(s), grace 0.5s" if beside_http
            else "shutting down: 5 gRPC stream(s) in flight, grace 0.5s")
    assert line in text, text[-2000:]


def test_grpc_beside_a_data_parallel_endpoint_serves_every_engine(grpc_server):
    """``--grpc-port`` with ``--data-parallel-size 2`` (server.grpc_dp): ``data_parallel_rank``
    places a generation on its engine (out of range: vLLM's words), the others go to the HTTP
    endpoint's balancer, ``GetLoads`` reports both engines."""
    target = grpc_server("grpc-port", "--data-parallel-size", "2", "--inter-token-latency", "1ms")
    stub = target.stub
    for i in range(2):
        req = gen(rid=f"dp{i}", stream=False, max_tokens=3, ignore_eos=True)
        req.data_parallel_rank = 1
        assert kinds(stub.Generate(req, timeout=10)) == ["complete"]
    m = scrape(target.base)
    assert metric(m, "vllm:generation_tokens_total", engine="1") >= 6
    bad = gen(rid="dp9", stream=False, max_tokens=3)
    bad.data_parallel_rank = 5
    with pytest.raises(grpc.RpcError) as e:
        list(stub.Generate(bad, timeout=10))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details() == "data_parallel_rank 5 is out of range [0, 2)."
    before = [metric(scrape(target.base), "vllm:request_success_total", engine=r, finished_reason="length")
              for r in ("0", "1")]
    for i in range(4):
        list(stub.Generate(gen(rid=f"lb{i}", stream=False, max_tokens=2, ignore_eos=True), timeout=10))
    after = [metric(scrape(target.base), "vllm:request_success_total", engine=r, finished_reason="length")
             for r in ("0", "1")]
    assert [a - b for a, b in zip(after, before)] == [2, 2]
    # each choice of n > 1 is an engine request placed on its own (vLLM's children)
    out = list(stub.Generate(gen(rid="n4", stream=False, max_tokens=2, ignore_eos=True, n=4), timeout=10))
    assert len(out) == 4
    again = [metric(scrape(target.base), "vllm:request_success_total", engine=r, finished_reason="length")
             for r in ("0", "1")]
    assert [a - b for a, b in zip(again, after)] == [2, 2]
    loads = stub.GetLoads(pb.GetLoadsRequest(), timeout=5)
    assert loads.dp_rank_count == 2 and [load.dp_rank for load in loads.loads] == [0, 1]


def test_subscribe_kv_events_over_a_data_parallel_endpoint_streams_every_engine(grpc_server):
    target = grpc_server("grpc-port", "--data-parallel-size", "2", "--enable-kvcache", "--block-size", "8",
                         "--zmq-endpoint", "")
    stub = target.stub
    events = stub.SubscribeKvEvents(common_pb2.SubscribeKvEventsRequest(), timeout=15)
    got = []
    collect(events, got)
    ranks = set()
    for attempt in range(10):
        for rank in (0, 1):
            ids = list(range(1000 * (2 * attempt + rank + 1), 1000 * (2 * attempt + rank + 1) + 16))
            req = pb.GenerateRequest(request_id=f"k{attempt}{rank}", tokenized=pb.TokenizedInput(input_ids=ids),
                                     sampling_params=pb.SamplingParams(max_tokens=1))
            req.data_parallel_rank = rank
            list(stub.Generate(req, timeout=10))
        time.sleep(0.1)
        ranks = {b.dp_rank for b in got}
        if ranks == {0, 1}:
            break
    events.cancel()
    assert ranks == {0, 1}


def test_a_taken_grpc_port_is_one_line_and_exit_1(tmp_path):
    import socket
    port, gport = free_port(), free_port()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", gport))
        holder.listen(1)
        done = subprocess.run([sys.executable, str(ROOT / "app.py"), "--port", str(port), "--host", "127.0.0.1",
                               "--grpc-port", str(gport)], cwd=ROOT, env=_clean_env(None), capture_output=True,
                              text=True, timeout=60)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert f"cannot serve gRPC on 127.0.0.1:{gport}" in out and "Traceback" not in out
