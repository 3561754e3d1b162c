"""The ``ecp`` console script.

Subcommands are plugins: every installed distribution may declare entry points
in the ``ecp.commands`` group (``[project.entry-points."ecp.commands"]`` in its
``pyproject.toml``), each naming a ``register(subparsers)`` function. This
package's own parts (spec tools, reference engine and frontend, conformance
suite, monitor) register themselves that way, so ``ecp.spec`` imports nothing
of the packages built on it. ``register`` only declares arguments; heavy imports
happen inside the handlers, so ``ecp --help`` stays fast and works without
optional extras installed.

A plugin that cannot be loaded is reported on stderr (its name, its entry point
and the error) and left out; the other subcommands keep working.

Exit codes: 0 success, 1 the thing checked failed (conformance failures, a
frame that does not decode, a breaking spec diff), 2 usage or harness error
(including stdout closed by the reader before the output was written, or no
subcommand plugin installed).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import sys
from typing import Iterable

from .version import VLLM_RELEASE

ENTRY_POINT_GROUP = "ecp.commands"
DISTRIBUTION = "engine-core-protocol"


def version() -> str:
    """The installed distribution's version (``unknown`` when ``ecp`` runs from an uninstalled tree)."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def extra_providing(module: str, command: str = "") -> str | None:
    """The optional extra of this distribution that installs ``module`` (a top-level import name),
    from the installed metadata's ``Requires-Dist`` lines: the one named like ``command`` when
    several do, else the first in the metadata's order; None when no extra does (or the
    distribution's metadata is not installed). ``dev`` is never named: it is for the test suite."""
    import re

    try:
        requires = importlib.metadata.requires(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        return None
    wanted = re.sub(r"[-_.]+", "_", module).lower()
    extras = []
    for req in requires:
        m = re.match(r"\s*([A-Za-z0-9._-]+).*;\s*extra\s*==\s*['\"]([^'\"]+)['\"]", req)
        if m and re.sub(r"[-_.]+", "_", m.group(1)).lower() == wanted and m.group(2) != "dev":
            extras.append(m.group(2))
    if command in extras:
        return command
    return extras[0] if extras else None


def command_plugins() -> list[importlib.metadata.EntryPoint]:
    """The installed ``ecp.commands`` entry points, each name once, in name order."""
    seen: dict[str, importlib.metadata.EntryPoint] = {}
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        # The same distribution seen twice on sys.path (a stale build next to an editable
        # install) lists its entry points twice: the first one found wins, as for imports.
        seen.setdefault(ep.name, ep)
    return [seen[name] for name in sorted(seen)]


def build_parser(plugins: Iterable[importlib.metadata.EntryPoint] | None = None,
                 errors: list[str] | None = None) -> argparse.ArgumentParser:
    """The ``ecp`` parser with every plugin's subcommands registered.

    A plugin that fails to load or to register is left out; a one-line
    description of why is appended to ``errors`` (printed to stderr when
    ``errors`` is None).
    """
    parser = argparse.ArgumentParser(
        prog="ecp",
        description=f"The vLLM {VLLM_RELEASE} engine-core protocol: spec tools, reference peers, conformance suite.",
    )
    parser.add_argument("--version", action="version", version=f"ecp {version()} ({DISTRIBUTION})")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    problems: list[str] = []
    for ep in command_plugins() if plugins is None else plugins:
        try:
            register = ep.load()
            if not callable(register):
                raise TypeError(f"{ep.value} is not a register(subparsers) function")
            register(subparsers)
        except Exception as exc:  # noqa: BLE001 - any failure of a plugin is reported, not raised
            problems.append(f"ecp: the {ep.name!r} subcommands ({ep.value}) are unavailable: "
                            f"{type(exc).__name__}: {exc}")
    if not subparsers.choices and not problems:
        problems.append(f"ecp: no subcommands are installed (entry-point group {ENTRY_POINT_GROUP!r} "
                        "is empty); reinstall the package, e.g. pip install -e .")
    if errors is None:
        for line in problems:
            print(line, file=sys.stderr)
    else:
        errors.extend(problems)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except ModuleNotFoundError as exc:
        # a command whose optional extra is not installed: one line naming it, not a traceback
        command = next((a for a in (sys.argv[1:] if argv is None else argv) if not a.startswith("-")), "")
        extra = extra_providing((exc.name or "").split(".")[0], command)
        if extra is None:
            raise
        print(f"ecp {command}: needs the '{extra}' extra ({exc.name} is not installed): "
              f"pip install 'engine-core-protocol[{extra}]'", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (`ecp decode --file big | head`): stop quietly, without a
        # traceback, and keep the interpreter's final flush from raising again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
