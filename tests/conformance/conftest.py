"""The conformance-harness tests' path (``run_ecp``, the CLI in-process, is in tests/conftest.py)."""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# scripted_engine.py is imported by name through `--adapter scripted_engine:...`
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

