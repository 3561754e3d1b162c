"""The ``ecp`` console script.

Each part of the project contributes subcommands through a ``commands``
module with a ``register(subparsers)`` function. ``register`` only declares
arguments; heavy imports happen inside the handlers, so ``ecp --help`` stays
fast and works without optional extras installed.

Exit codes: 0 success, 1 the thing checked failed (conformance failures, a
frame that does not decode, a breaking spec diff), 2 usage or harness error
(including stdout closed by the reader before the output was written).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

COMMAND_MODULES = (
    "ecp.spec.commands",            # summary, decode, schema, spec layout/diff
    "ecp.reference.engine.commands",  # engine
    "ecp.reference.frontend.commands",  # serve, bench serve
    "ecp.conformance.commands",     # conformance engine|frontend|list
    "ecp.conformance.monitor.commands",  # monitor
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ecp",
        description="The vLLM 0.33 engine-core protocol: spec tools, reference peers, conformance suite.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            # That part (or its package) has no commands yet; any other missing module is a bug.
            if exc.name and (name == exc.name or name.startswith(exc.name + ".")):
                continue
            raise
        module.register(subparsers)
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
    except BrokenPipeError:
        # The reader went away (`ecp decode --file big | head`): stop quietly, without a
        # traceback, and keep the interpreter's final flush from raising again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
