"""The engine keeps no record of requests it rejected or finished: memory stays flat over
tens of thousands of unique request ids (the long-running-engine property the fuzz campaign's
RSS figures rely on; see docs/reliability.md)."""

from __future__ import annotations

import gc
import time
import tracemalloc

from ecp.reference.engine.config import config_from_options
from ecp.reference.engine.core import EngineCore
from ecp.reference.engine.server import make_executor
from ecp.spec import EngineCoreRequest, FinishReason, SamplingParams


def _run(core: EngineCore, n: int, offset: int) -> int:
    finished = 0
    for i in range(offset, offset + n):
        if i % 2:
            core.reject(f"bad-{i}", 0, "invalid_request", "[ECP-FRAME-9] malformed msgpack")
        else:
            core.add_request(EngineCoreRequest(f"ok-{i}", [1, 2, 3, 4], None, SamplingParams(max_tokens=2),
                                               None, time.time(), None, None, None), 0)
            for _ in range(10):  # two tokens take two steps; bounded
                if not core.step():
                    break
        for ob in core.take_outbox():
            outs = getattr(ob.payload, "outputs", ())
            finished += sum(1 for o in outs if o.finish_reason in (FinishReason.LENGTH, FinishReason.ERROR))
    return finished


def test_rejected_and_finished_requests_leave_nothing_behind():
    cfg = config_from_options(max_model_len=512, num_gpu_blocks=512)
    core = EngineCore(cfg, make_executor(cfg), engine_index=0, num_clients=1)
    assert _run(core, 2000, 0) == 2000  # warm every cache and pool first
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        assert _run(core, 20_000, 10**6) == 20_000
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename") if s.size_diff > 0)
    # 20,000 unique ids kept anywhere would be >= 1 MiB (an id string alone is ~60 bytes)
    assert grown < 256 * 1024, [str(s) for s in after.compare_to(before, "lineno")[:5]]
    assert not core.scheduler.requests
