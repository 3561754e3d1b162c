"""The reliability tests run short, seeded variants of the campaigns under ``benchmarks/``."""

import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))

# the frontend tests' in-process HTTP app helpers (tests/frontend/harness.py), imported as
# `frontend.harness`, the name pytest gives that module
TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))
