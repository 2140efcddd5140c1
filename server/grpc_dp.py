"""vLLM's gRPC ``VllmEngine`` service over the engines of a data-parallel endpoint
(:mod:`server.dp_api`): ``--grpc-port`` beside ``--data-parallel-size N``, one gRPC server in
front of N engines, as vLLM's gRPC server sits on its one ``AsyncLLM`` (smg-grpc-servicer's
``VllmEngineServicer``, whose DP client places each request).

Each engine has the servicer :func:`server.grpc_engine.make_servicer` builds for it;
:func:`make_dp_servicer` puts one in front of them:

* ``Generate`` and ``Embed`` go to the engine ``data_parallel_rank`` names (``Generate``'s
  field; out of range: ``INVALID_ARGUMENT`` with vLLM's ``data_parallel_rank N is out of range
  [0, N).``), else to the one the HTTP endpoint's balancer picks (the same balancer: the two
  APIs share the engines' counts), and so does each further choice of ``n`` > 1, as vLLM's
  children (:func:`generation.engine.admission.admit_spread`);
* ``Abort`` and ``FlushCache`` reach every engine; ``GetLoads`` reports one ``SchedulerLoad``
  per engine, as smg-grpc-servicer reports every rank it serves; ``SubscribeKvEvents`` streams
  every engine's batches (each carries its rank);
* the rest (health, model and server info, tokenizer, profiling) are rank 0's answers.
"""
from __future__ import annotations


def make_dp_servicer(api, lifecycle, make_servicer, pb_grpc, pb):
    """The servicer over ``api``'s engines (a :class:`server.dp_api.DataParallelAPI`)."""
    import grpc
    import gevent
    import gevent.queue

    servicers = [make_servicer(sim, lifecycle) for sim in api.sims]
    balancer = api.balancer
    size = len(servicers)
    first = servicers[0]

    def place(request, context) -> int:
        if request.HasField("data_parallel_rank"):
            rank = request.data_parallel_rank
            if not 0 <= rank < size:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"data_parallel_rank {rank} is out of range [0, {size}).")
            return balancer.take(rank)
        return balancer.choose()

    class DataParallelServicer(pb_grpc.VllmEngineServicer):
        def Generate(self, request, context):
            rank = place(request, context)
            ranks = [rank]

            def spread():           # each further choice of n > 1 on an engine of its own (vLLM's children)
                ranks.append(balancer.choose())
                return api.sims[ranks[-1]]
            try:
                yield from servicers[rank].Generate(request, context,
                                                    None if request.HasField("data_parallel_rank") else spread)
            finally:
                for r in ranks:
                    balancer.done(r)

        def Embed(self, request, context):
            rank = balancer.choose()
            try:
                return servicers[rank].Embed(request, context)
            finally:
                balancer.done(rank)

        def Abort(self, request, context):
            for s in servicers:
                s.Abort(request, context)
            return pb.AbortResponse()

        def FlushCache(self, request, context):
            answer = None
            for s in servicers:
                answer = s.FlushCache(request, context)
                if not answer.success:          # refused (requests in flight, a timeout): said as it is
                    return answer
            return answer

        def GetLoads(self, request, context):
            answers = [s.GetLoads(request, context) for s in servicers]
            loads = [load for a in answers for load in a.loads]
            return pb.GetLoadsResponse(timestamp=answers[0].timestamp, version=answers[0].version,
                                       dp_rank_count=len(loads), loads=loads)

        def SubscribeKvEvents(self, request, context):
            if api.sims[0].kv_cache is None or not api.sims[0].config.enable_kvcache:
                yield from first.SubscribeKvEvents(request, context)      # its UNIMPLEMENTED
                return
            q = gevent.queue.Queue()

            def pump(s):
                try:
                    for batch in s.SubscribeKvEvents(request, context):
                        q.put(batch)
                finally:
                    q.put(None)
            pumps = [gevent.spawn(pump, s) for s in servicers]
            try:
                ended = 0
                while ended < len(pumps):
                    batch = q.get()
                    if batch is None:
                        ended += 1
                    else:
                        yield batch
            finally:
                for p in pumps:
                    p.kill(block=False)

        def HealthCheck(self, request, context):
            return first.HealthCheck(request, context)

        def GetModelInfo(self, request, context):
            return first.GetModelInfo(request, context)

        def GetServerInfo(self, request, context):
            return first.GetServerInfo(request, context)

        def GetTokenizer(self, request, context):
            yield from first.GetTokenizer(request, context)

        def StartProfile(self, request, context):
            return first.StartProfile(request, context)

        def StopProfile(self, request, context):
            return first.StopProfile(request, context)

        # ---- for server.grpc_engine.stop_grpc ----------------------------------------------
        def in_flight(self) -> int:
            return sum(s.in_flight() for s in servicers)

        def abort_all(self) -> None:
            for s in servicers:
                s.abort_all()

    return DataParallelServicer()
