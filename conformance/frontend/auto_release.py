"""``ecp conformance frontend --vllm auto``: which release to judge the frontend as, from what it sends.

One case that makes the frontend send a request (:data:`PROBE_CASES`) runs first with engines of the
suite's own release; the run's release fingerprint (:mod:`ecp.conformance.release`: the ADDs' shapes,
the ``vllm_version`` its ``GET /version`` announces) names the releases the frontend fits, and the
newest of them is the one the suite then runs as. The caller prints :attr:`AutoRelease.sentence`
first: a reader must know which release a run judged and why.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ecp.spec.profile.fingerprint import Verdict

from ..release import UNDER_TEST

#: the case the pre-run uses: it sends a completion and checks the ADD decodes
PROBE_CASES = ["FE-REQ-1"]


@dataclass
class AutoRelease:
    release: str
    sentence: str


def pick(args: argparse.Namespace, role_config: dict[str, Any], target: str,
         run: Callable[..., int]) -> AutoRelease:
    """Run :data:`PROBE_CASES` against the frontend (its output kept out of the console) and pick the
    release its traffic fits; vLLM 0.33 when the traffic told nothing."""
    from .session import FrontendManager

    with tempfile.TemporaryDirectory(prefix="ecp-auto-") as tmp:
        report = Path(tmp) / "probe.json"
        probe_args = argparse.Namespace(**{**vars(args), "case": PROBE_CASES, "json_path": str(report),
                                           "expected_failures": None, "update_expected_failures": False,
                                           "junit_xml": None, "markdown": None, "html": None,
                                           "transcripts": None, "keep_workdir": False, "verbose": False})
        with contextlib.redirect_stdout(io.StringIO()):
            run(FrontendManager, probe_args, {**role_config, "vllm": UNDER_TEST}, target, UNDER_TEST)
        data = json.loads(report.read_text()).get("release", {}) if report.exists() else {}
    verdict = Verdict(list(data.get("fits", [])), dict(data.get("facts", {})))
    said = verdict.sentence(peer="frontend")
    if verdict.release is None or said is None:
        return AutoRelease(UNDER_TEST, f"--vllm auto: the frontend's traffic told no release apart; "
                                       f"judging it as vLLM {UNDER_TEST}")
    return AutoRelease(verdict.release, f"--vllm auto: {said}; judging it as vLLM {verdict.release}")
