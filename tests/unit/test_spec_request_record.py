"""``--per-request-spec-decode-metrics``' record (generation/engine/spec_decode.py:
:class:`RequestSpecMetrics`, vLLM 0.34's ``RequestSpecDecodeMetrics``): what ``observe`` keeps
and ``to_dict`` answers, and the scheduler's ``_verified`` observing each verify step of a
request only when the level asks for it."""
from __future__ import annotations

from generation.engine.scheduler import EngineRequest, Scheduler
from generation.engine.spec_decode import RequestSpecMetrics, SpecDecode


def test_the_record_answers_vllms_to_dict():
    rec = RequestSpecMetrics(3)
    for drafts, accepted in ((3, 2), (3, 0), (2, 2)):
        rec.observe(drafts, accepted)
    assert rec.to_dict() == {"mean_acceptance_length": 1 + 4 / 3, "draft_acceptance_rate": 0.5,
                             "acceptance_histogram": [1, 0, 2, 0], "num_spec_steps": 3,
                             "num_accepted_draft_tokens": 4, "num_draft_tokens": 8, "num_spec_tokens": 3}
    assert rec.per_step_accepted is None            # summary keeps no per-step lists


def test_detailed_adds_the_ordered_per_step_arrays():
    rec = RequestSpecMetrics(2, detailed=True)
    rec.observe(2, 1)
    rec.observe(1, 1)
    out = rec.to_dict()
    assert (out["acceptance_histogram"], out["per_step_accepted"], out["per_step_drafted"]) == ([0, 2, 0], [1, 1],
                                                                                                 [2, 1])
    assert list(out)[-2:] == ["per_step_accepted", "per_step_drafted"]
    out["per_step_accepted"].append(9)              # a copy: the record goes on unchanged
    assert rec.per_step_accepted == [1, 1]


def test_a_record_of_no_verify_step():
    # vLLM makes the record when the request arrives: a request that never decodes reports it too
    assert RequestSpecMetrics(3, detailed=True).to_dict() == {
        "mean_acceptance_length": 1.0, "draft_acceptance_rate": 0.0, "acceptance_histogram": [0, 0, 0, 0],
        "num_spec_steps": 0, "num_accepted_draft_tokens": 0, "num_draft_tokens": 0, "num_spec_tokens": 3}


class Draws:
    def __init__(self, *u):
        self.u = list(u)

    def random(self):
        return self.u.pop(0)


def sched(level, rates=(0.9, 0.5, 0.2), draws=(0.3, 0.95, 0.0), **kw) -> Scheduler:
    args = dict(num_gpu_blocks=1000, block_size=16, max_num_seqs=8, max_num_batched_tokens=2048, max_model_len=4096)
    s = Scheduler(**(args | kw))
    s.speculate(SpecDecode("ngram", len(rates), tuple(rates), "test"), Draws(*draws))
    s.spec_request_metrics = level
    return s


def run(s, *reqs, steps=4):
    for r in reqs:
        s.add(r, 0.0)
    for t in range(steps):
        s.complete(s.schedule(t), t + 0.01)


def test_the_scheduler_observes_each_verify_step_of_the_request():
    s = sched("detailed")
    r = EngineRequest(20, 10)
    run(s, r)                                       # the prefill, then u 0.3 (2), 0.95 (0), 0.0 (3)
    assert r.spec_metrics.to_dict() == {
        "mean_acceptance_length": 1 + 5 / 3, "draft_acceptance_rate": 5 / 9, "acceptance_histogram": [1, 0, 1, 1],
        "num_spec_steps": 3, "num_accepted_draft_tokens": 5, "num_draft_tokens": 9, "num_spec_tokens": 3,
        "per_step_accepted": [2, 0, 3], "per_step_drafted": [3, 3, 3]}
    assert s.spec_counts == [3, 9, 5]               # the engine's counts agree


def test_drafts_the_budget_cuts_are_the_ones_counted():
    s = sched("detailed", rates=(1.0, 1.0, 1.0), draws=(0.0,) * 4, max_num_batched_tokens=6)
    a, b = EngineRequest(4, 20), EngineRequest(2, 20)
    run(s, a, b, steps=2)                           # a takes 4 tokens, b what is left: 1 + 1 draft
    assert (a.spec_metrics.per_step_drafted, b.spec_metrics.per_step_drafted) == ([3], [1])
    assert b.spec_metrics.to_dict()["acceptance_histogram"] == [0, 1, 0, 0]


def test_summary_keeps_no_arrays_and_none_makes_no_record():
    s = sched("summary")
    r = EngineRequest(20, 10)
    run(s, r)
    assert r.spec_metrics.per_step_accepted is None and "per_step_accepted" not in r.spec_metrics.to_dict()
    s = sched(None)
    r = EngineRequest(20, 10)
    run(s, r)
    assert r.spec_metrics is None and s.spec_counts == [3, 9, 5]
