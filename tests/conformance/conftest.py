"""Shared fixtures of the conformance-harness tests."""

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
# scripted_engine.py is imported by name through `--adapter scripted_engine:...`
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))


@pytest.fixture
def run_ecp(capsys):
    """Run the ``ecp`` CLI in-process; return (exit code, stdout)."""
    from ecp.spec.cli import main

    def run(*argv: str) -> tuple[int, str]:
        code = main(list(argv))
        return code, capsys.readouterr().out

    return run
