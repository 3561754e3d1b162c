"""What every test folder shares: the torch tests' place and the browser's, and ``run_ecp``. (The scripts of
``benchmarks/``, ``campaigns/`` and ``lab/`` are imported by module name; pyproject.toml puts the
repository root on the tests' path.)

The torch tests (``tests/gpu/`` and tests marked ``torch``) need the ``gpu`` extra, which the
``dev`` extra leaves out so the protocol library's tests need no multi-GB download. Where torch is
not importable they are not collected, and the run's summary says how many and what to install;
``ECP_REQUIRE_TORCH=1`` (set by ``.ci/run``) makes a missing torch an error instead.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

TORCH_HINT = "pip install -e '.[dev,gpu]' (the CPU build of torch is enough)"
#: the browser tests drive the system's Chromium (Debian package chromium) with Playwright
CHROMIUM = Path("/usr/bin/chromium")
BROWSER_HINT = "apt-get install -y chromium (Debian's package; Playwright drives it, no browser download)"


def _torch_missing() -> bool:
    return importlib.util.find_spec("torch") is None


#: tests/gpu needs torch in every module: not collected at all without it
collect_ignore = ["gpu"] if _torch_missing() else []
#: marker -> (what is missing, or "" when it is there; the hint to install it; the variable that requires it)
_NEEDS = {
    "torch": ("torch" if _torch_missing() else "", TORCH_HINT, "ECP_REQUIRE_TORCH"),
    "browser": (f"{CHROMIUM}" if not CHROMIUM.exists() else "", BROWSER_HINT, "ECP_REQUIRE_BROWSER"),
}
_left_out: dict[str, list[str]] = {marker: [] for marker in _NEEDS}


def pytest_configure(config: pytest.Config) -> None:
    for marker, (missing, hint, variable) in _NEEDS.items():
        if missing and os.environ.get(variable) == "1":
            raise pytest.UsageError(f"{variable}=1 but {missing} is not installed: {hint}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for marker, (missing, _hint, _variable) in _NEEDS.items():
        if not missing:
            continue
        left = [item for item in items if item.get_closest_marker(marker) is not None]
        if left:
            config.hook.pytest_deselected(items=left)
            items[:] = [item for item in items if item.get_closest_marker(marker) is None]
        _left_out[marker].extend(item.nodeid for item in left)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    for marker, (missing, hint, _variable) in _NEEDS.items():
        if missing:
            where = "tests/gpu/ and " if marker == "torch" else ""
            terminalreporter.write_line(f"{missing} is not installed: {where}{len(_left_out[marker])} test(s) "
                                        f"marked '{marker}' were not run; to run them: {hint}")


@pytest.fixture
def run_ecp(capsys):
    """Run the ``ecp`` CLI in-process; return (exit code, stdout)."""
    from ecp.spec.cli import main

    def run(*argv: str) -> tuple[int, str]:
        code = main(list(argv))
        return code, capsys.readouterr().out

    return run
