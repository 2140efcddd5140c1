"""When an engine step ends against the frontend's sends: the engine's timeline may not run
far ahead of what the clients have received (the step engine and the replay alike)."""
from __future__ import annotations

STEP_LEAD = 0.005       # s: how far the engine's timeline may run ahead of the hub's work on the last step
STALL_LEAD = 0.1        # s: how far it may run ahead of the last step's actual sends (a starved process)


def step_end(modelled: float, emitted_at: float, lead: float = STEP_LEAD) -> float:
    """When an engine step ends (seconds, the caller's clock): at its modelled end (its start plus
    its step time), but not more than ``lead`` before ``emitted_at``, when the previous step's
    tokens were all out.

    A step runs while the previous step's outputs are sent (vLLM V1's engine core steps while its
    frontend streams the last outputs).  A frontend slower than the GPU holds the engine back
    instead of letting it run ahead of what the clients receive: the tokens' lag behind their
    step stays within ``lead`` plus one step's sending, and the step times (ITL, TPOT) are those
    the clients see.  Within ``lead`` the modelled timeline is kept, so that a short stall of the
    live server's process (a busy machine) is caught up rather than added to every later token.
    The live server passes when its hub handed the last step's chunks to the kernel; a replay
    with ``emission_cost`` models it."""
    emitted_at -= lead
    return emitted_at if emitted_at > modelled else modelled
