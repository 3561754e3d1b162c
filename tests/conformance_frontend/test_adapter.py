"""``ecp conformance frontend --adapter MODULE:FUNCTION``: what the harness asks of an in-process frontend.

The whole role against ``ecp.reference.frontend.in_thread:serve`` is test_every_frontend_release.py; here,
the edges: a handle that cannot hold its frontend makes the burst cases UNSUPPORTED (never a FAIL that
says nothing of the frontend), and ``in_thread.serve`` refuses what it cannot run in a thread.
"""

from __future__ import annotations

import json

import pytest

from ecp.reference.frontend.in_thread import parse, serve

from test_self_proof import SERVE_ARGS


class _Unfreezable:
    """``ecp serve`` in a thread behind a handle without ``frozen()``."""

    def __init__(self, argv: list[str]) -> None:
        self._serving = serve(argv)

    def alive(self) -> bool:
        return self._serving.alive()

    def stop(self) -> None:
        self._serving.stop()


def unfreezable(argv: list[str]) -> _Unfreezable:
    return _Unfreezable(argv)


def test_an_adapter_that_cannot_hold_its_frontend_leaves_the_bursts_unsupported(run_ecp, tmp_path):
    report = tmp_path / "r.json"
    code, stdout = run_ecp("conformance", "frontend", "--case", "FE-REQ-1", "--case", "FE-ABORT-1", "--json",
                           str(report), "--adapter", f"{__name__}:unfreezable", "--", *SERVE_ARGS)
    cases = {c["id"]: c for c in json.loads(report.read_text())["cases"]}
    assert cases["FE-REQ-1"]["outcome"] == "PASS", stdout[-2000:]
    assert cases["FE-ABORT-1"]["outcome"] == "UNSUPPORTED" and "frozen()" in cases["FE-ABORT-1"]["message"]
    assert code == 0


@pytest.mark.parametrize("argv, said", [
    (["--data-parallel-size", "2", "--port", "0"], "external engines only"),
    (["--data-parallel-size-local", "0", "--api-server-count", "2"], "one API server"),
    (["--data-parallel-size-local", "0", "--no-such-option"], "unrecognized arguments: --no-such-option"),
])
def test_in_thread_serve_refuses_what_a_thread_cannot_run(argv, said):
    with pytest.raises(ValueError, match=said):
        parse(argv)
