"""gRPC ``Generate`` / ``Embed`` while vLLM's engine refuses new work (``/pause`` with mode
``abort`` or ``wait``; ``--max-num-queued-reqs``), in-process: vLLM 0.34's ``AsyncLLM.generate``
re-raises the engine's ``RetryableRequestError`` (``EngineCore._reject_add_while_paused``) and
the admission's ``QueueOverflowError``, neither a ``ValueError``, so the servicer
(``smg_grpc_servicer/vllm/servicer.py``: ``except ValueError`` -> ``INVALID_ARGUMENT``, ``except
Exception`` -> ``INTERNAL`` with ``str(e)``) answers ``INTERNAL`` with the message; the simulator
answered ``INVALID_ARGUMENT``."""
from __future__ import annotations

import pytest

pytest.importorskip("grpc")
pytest.importorskip("smg_grpc_proto")

import grpc  # noqa: E402

from server import grpc_engine  # noqa: E402

DEV = {"VLLM_SERVER_DEV_MODE": "1"}
PAUSED = "Generation is paused. Please retry after it resumes."


class Aborted(Exception):
    pass


class Context:
    """The part of ``grpc.ServicerContext`` Generate uses before it admits the request."""

    def abort(self, code, details):
        raise Aborted(code, details)

    def add_callback(self, fn):
        return True

    def is_active(self):
        return True


def generate(sim, rid="g1"):
    _, pb, _ = grpc_engine._pb()
    req = pb.GenerateRequest(request_id=rid, tokenized=pb.TokenizedInput(input_ids=[1, 2, 3]),
                             sampling_params=pb.SamplingParams(max_tokens=2), stream=False)
    with pytest.raises(Aborted) as e:
        list(grpc_engine.make_servicer(sim).Generate(req, Context()))
    return e.value.args


@pytest.mark.parametrize("mode", ["abort", "wait"])
def test_generate_while_paused_is_internal_with_vllms_message(app_client, mode):
    api = app_client(env=DEV)
    assert api.post(f"/pause?mode={mode}").status_code == 200
    try:
        assert generate(api.sim) == (grpc.StatusCode.INTERNAL, PAUSED)
    finally:
        assert api.post("/resume").status_code == 200


def test_generate_over_the_queue_limit_is_internal(app_client):
    api = app_client("--max-num-queued-reqs", "0", env=DEV)
    code, details = generate(api.sim)
    assert code == grpc.StatusCode.INTERNAL
    assert details == ("The engine is currently busy and cannot accept new requests. Please try again later or on "
                       "a different instance.")


def test_a_keep_pause_freezes_a_grpc_stream_of_the_default_model(app_client):
    """``/pause?mode=keep`` (vLLM's PAUSED_ALL: no step) stops a streamed ``Generate`` where it
    is until ``/resume``, then it goes on to its end (generation.engine.freeze)."""
    import gevent
    api = app_client("--time-to-first-token", "20ms", "--inter-token-latency", "20ms", env=DEV)
    _, pb, _ = grpc_engine._pb()
    req = pb.GenerateRequest(request_id="k1", tokenized=pb.TokenizedInput(input_ids=[1, 2, 3]),
                             sampling_params=pb.SamplingParams(max_tokens=40, ignore_eos=True), stream=True)
    out: list = []
    job = gevent.spawn(lambda: out.extend(grpc_engine.make_servicer(api.sim).Generate(req, Context())))
    deadline = gevent.get_hub().loop.now() + 5
    while len(out) < 5 and gevent.get_hub().loop.now() < deadline:
        gevent.sleep(0.01)
    assert api.post("/pause?mode=keep").status_code == 200
    try:
        gevent.sleep(0.1)                   # what was on its way
        frozen = len(out)
        gevent.sleep(0.5)
        assert len(out) == frozen and not job.ready()
    finally:
        assert api.post("/resume").status_code == 200
    job.join(10)
    tokens = sum(len(r.chunk.token_ids) for r in out if r.WhichOneof("response") == "chunk")
    assert tokens == 40 and out[-1].complete.finish_reason == "length"
