"""``python -m ecp.reference.engine``: the same as ``ecp engine``."""

import argparse
import sys

from .commands import PARSER_TEXT, add_engine_arguments
from .main import run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ecp.reference.engine", **PARSER_TEXT)
    add_engine_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
