"""The scheduler's waiting queue under ``--scheduling-policy priority``
(:class:`~generation.engine.scheduler.Scheduler`; vLLM's ``PriorityRequestQueue``,
``vllm/v1/core/sched/request_queue.py``), and the order it keeps."""
from __future__ import annotations

from bisect import insort


def priority_key(req):
    """A request's place under the priority policy: ``(priority, arrival)``, lower first (the
    preempted request is the running one with the largest)."""
    return req.priority, req.arrival


class PriorityQueue(list):
    """The waiting queue of the priority policy: the deque operations the scheduler uses, kept
    in (priority, arrival) order; a request put back (``appendleft``) takes its place by key, as
    vLLM's ``PriorityRequestQueue.prepend_request``."""

    def append(self, req) -> None:
        insort(self, req, key=priority_key)

    appendleft = append

    def popleft(self):
        return self.pop(0)

    def extendleft(self, reqs) -> None:
        for r in reqs:
            self.append(r)
