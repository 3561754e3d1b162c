"""The engine-role conformance suite passes with the torch executor on CPU.

The engines run in-process (``--adapter``, one torch thread: see conftest) so
torch is imported once; the same
suite against ``ecp engine ... --executor torch --device cpu`` as a subprocess
passes too (slower: see docs/gpu.md).
"""

from __future__ import annotations

import json

from .conftest import DEVICE


def torch_engines(handshake_address: str, engine_count: int):
    """``--adapter`` entry: reference engines on threads, running ``random:tiny``."""
    from ecp.reference.engine import launch

    return launch(handshake_address, engine_count, mode="thread", executor="torch", device=DEVICE,
                  model="random:tiny", dtype="float32", max_model_len=512, num_gpu_blocks=256)


def test_engine_role_suite_passes_with_the_torch_executor(tmp_path, capsys):
    from ecp.spec.cli import main

    report = tmp_path / "report.json"
    code = main(["conformance", "engine", "--adapter", f"{__name__}:torch_engines", "--quiet-window", "0.1",
                 "--json", str(report)])
    out = capsys.readouterr().out
    cases = json.loads(report.read_text())["cases"]
    not_passed = {c["id"]: c["outcome"] for c in cases if c["outcome"] != "PASS"}
    # ENG-ROB-8 signals the engine's process: in-process engines cannot be judged on it
    assert code == 0 and not_passed == {"ENG-ROB-8": "UNSUPPORTED"}, (not_passed, out[-3000:])
    assert len(cases) >= 40
