"""What every test folder shares: the scripts of ``benchmarks/`` loaded as modules (their short
variants are tests; the scripts are not a package), and the torch tests' place.

The torch tests (``tests/gpu/`` and tests marked ``torch``) need the ``gpu`` extra, which the
``dev`` extra leaves out so the protocol library's tests need no multi-GB download. Where torch is
not importable they are not collected, and the run's summary says how many and what to install;
``ECP_REQUIRE_TORCH=1`` (set by ``.ci/run``) makes a missing torch an error instead.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType
from typing import Callable

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name: str) -> ModuleType:
    module_spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert module_spec is not None and module_spec.loader is not None, name
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


@pytest.fixture
def load_benchmark() -> Callable[[str], ModuleType]:
    """``load_benchmark("bench_codec")``: ``benchmarks/bench_codec.py`` as a fresh module."""
    return _load


TORCH_HINT = "pip install -e '.[dev,gpu]' (the CPU build of torch is enough)"


def _torch_missing() -> bool:
    return importlib.util.find_spec("torch") is None


#: tests/gpu needs torch in every module: not collected at all without it
collect_ignore = ["gpu"] if _torch_missing() else []
_left_out: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    if _torch_missing() and os.environ.get("ECP_REQUIRE_TORCH") == "1":
        raise pytest.UsageError(f"ECP_REQUIRE_TORCH=1 but torch is not installed: {TORCH_HINT}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not _torch_missing():
        return
    kept = [item for item in items if item.get_closest_marker("torch") is None]
    left = [item for item in items if item.get_closest_marker("torch") is not None]
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = kept
    _left_out.extend(item.nodeid for item in left)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if _torch_missing():
        terminalreporter.write_line(f"torch is not installed: tests/gpu/ and {len(_left_out)} test(s) marked "
                                    f"'torch' were not run; to run them: {TORCH_HINT}")
