"""What every test folder shares: the scripts of ``benchmarks/`` loaded as modules (their short
variants are tests; the scripts are not a package)."""

from __future__ import annotations

import importlib.util
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
