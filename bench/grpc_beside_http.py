"""Do HTTP streams keep their timing while gRPC streams run on the same engine (issue 24)?

Starts one simulator with ``--grpc-port`` (fixed TTFT and ITL, no jitter), then measures
``--http`` concurrent streaming chat requests (client: ``bench/sse_probe.c`` when a C compiler
exists, else asyncio sockets) twice: alone, and with ``--grpc`` concurrent streamed
``Generate`` calls running beside them (a separate client process, grpcio threads).  Prints the
HTTP streams' ITL and TTFT p50 / p99 error in ms for both runs, and the gRPC streams' own ITL
p99 error (as the client sees it) and the server's own emission lag p99 (every stream), with
the machine's load average (figures from a busy machine are not comparable).

    python bench/grpc_beside_http.py [--http 100] [--grpc 200] [--ttft 0.2] [--itl 0.02] [--tokens 100]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from throughput import free_port, start_server  # noqa: E402
from timing_fidelity import _client, build_probe, histogram_quantile, lag_histogram, percentile, probe_streams  # noqa: E402


def grpc_streams(port: int, n: int, tokens: int, start_at: float, out) -> None:
    """``n`` concurrent streamed Generate calls; puts their per-chunk arrival times on ``out``."""
    import threading

    import grpc
    from smg_grpc_proto.generated import vllm_engine_pb2 as pb, vllm_engine_pb2_grpc as pbg
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    stub = pbg.VllmEngineStub(channel)
    grpc.channel_ready_future(channel).result(timeout=10)
    rows = []

    def one(i):
        times = []
        req = pb.GenerateRequest(request_id=f"g{i}", text="hello there", stream=True,
                                 sampling_params=pb.SamplingParams(max_tokens=tokens, ignore_eos=True))
        for r in stub.Generate(req, timeout=120):
            if r.WhichOneof("response") == "chunk":
                times.append(time.monotonic())
        rows.append(times)

    while time.monotonic() < start_at:
        time.sleep(0.005)
    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put(rows)


def itl_errors(streams, itl: float) -> list:
    return [abs((b - a) - itl) * 1000 for events in streams for a, b in zip(events[1:], events[2:])]


def measure_http(exe, host, port, n, body):
    if exe:
        return probe_streams(exe, host, port, n, body)
    return asyncio.run(_client(host, port, n, body))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--http", type=int, default=100, help="concurrent HTTP streams")
    ap.add_argument("--grpc", type=int, default=200, help="concurrent gRPC streams beside them")
    ap.add_argument("--ttft", type=float, default=0.2)
    ap.add_argument("--itl", type=float, default=0.02)
    ap.add_argument("--tokens", type=int, default=100)
    args = ap.parse_args()
    gport = free_port()
    n_all = args.http + args.grpc
    proc, base = start_server(["--grpc-port", str(gport), "--time-to-first-token", f"{args.ttft}s",
                               "--inter-token-latency", f"{args.itl}s", "--max-num-seqs", str(n_all),
                               "--disable-log-requests"])
    host, port = base.split("//")[1].split(":")
    port = int(port)
    body = json.dumps({"model": "test-model", "messages": [{"role": "user", "content": "hi"}],
                       "max_tokens": args.tokens, "ignore_eos": True, "stream": True}).encode()
    exe = build_probe()
    try:
        for label, with_grpc in (("HTTP alone", False), (f"HTTP + {args.grpc} gRPC streams", True)):
            q = mp.Queue()
            child = None
            lag_before = lag_histogram(base)
            if with_grpc:
                start_at = time.monotonic() + 1.5
                child = mp.Process(target=grpc_streams, args=(gport, args.grpc, args.tokens, start_at, q))
                child.start()
                while time.monotonic() < start_at + args.ttft + 0.3:     # the gRPC streams are emitting
                    time.sleep(0.01)
            rows = measure_http(exe, host, port, args.http, body)
            errs = itl_errors([ev for _, ev in rows], args.itl)
            ttft = [abs((ev[1] - t0) - args.ttft) * 1000 for t0, ev in rows if len(ev) > 1]
            line = (f"{label}: {args.http} HTTP streams ITL error p50 {percentile(errs, 0.5):.2f} ms "
                    f"p99 {percentile(errs, 0.99):.2f} ms, TTFT error p99 {percentile(ttft, 0.99):.1f} ms")
            if child is not None:
                grows = q.get(timeout=300)
                child.join()
                gerrs = itl_errors([[0.0] + r for r in grows], args.itl)
                line += (f"; gRPC streams ITL error p50 {percentile(gerrs, 0.5):.2f} ms "
                         f"p99 {percentile(gerrs, 0.99):.2f} ms ({sum(map(len, grows))} chunks)")
            lag = histogram_quantile(lag_before, lag_histogram(base), 0.99) * 1000
            line += f"; server token lag p99 <= {lag:g} ms (all streams)"
            print(f"{line}  [load {os.getloadavg()[0]:.2f}]", flush=True)
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    main()
