"""Every command that names a vLLM release takes it through the one ``--vllm`` option
(:mod:`ecp.spec.profile.option`): the same forms, said the same way, in every help."""

from __future__ import annotations

import argparse

from ecp.spec.cli import build_parser
from ecp.spec.profile.option import FORMS


def _parsers(parser: argparse.ArgumentParser, path: str = "ecp"):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{path} {name}")


def test_every_release_option_is_the_shared_one():
    seen = {}
    for path, parser in _parsers(build_parser()):
        for action in parser._actions:
            # (--from-vllm names a vLLM source to read a layout from, not a release to speak)
            if any(opt.endswith("vllm") and not opt.startswith("--from-") for opt in action.option_strings):
                seen[f"{path} {action.option_strings[0]}"] = action
    # the commands the issue names: both roles, the engine, the server, the monitor, explore, replay, decode
    for command in ("conformance engine", "conformance frontend", "engine", "serve", "monitor",
                    "conformance explore engine", "conformance explore frontend", "conformance replay", "decode"):
        assert f"ecp {command} --vllm" in seen, sorted(seen)
    for name, action in seen.items():
        assert FORMS in action.help, (name, action.help)
        assert action.metavar in ("RELEASE|PATH", "RELEASE|PATH|auto"), (name, action.metavar)
        assert ("or auto (" in action.help) == action.metavar.endswith("|auto"), (name, action.help)
