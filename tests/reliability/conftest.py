"""The reliability tests run short, seeded variants of the campaigns under ``campaigns/`` (imported
by module name: ``from campaigns.soak import soak``)."""

import sys
from pathlib import Path

# the frontend tests' in-process HTTP app helpers (tests/frontend/harness.py), imported as
# `frontend.harness`, the name pytest gives that module
TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))
