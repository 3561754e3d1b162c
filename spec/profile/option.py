"""``--vllm``: the one command-line option that names a release, for every command that takes one.

Every command spells what a release may be the same way (a shipped release, a layout file, a vLLM
checkout or wheel, and for some ``auto``) and resolves it with :func:`~.resolve.resolve_profile`;
the help says, per command, what the release decides there.
"""

from __future__ import annotations

import argparse

from ..version import VLLM_RELEASE

#: what ``--vllm`` takes, in every command's help
FORMS = "a shipped release (`ecp spec release list`), a layout file, a vLLM checkout or wheel"


def add_release_option(parser: argparse.ArgumentParser | argparse._ArgumentGroup, subject: str, *,
                       effect: str = "", auto: str | None = None, default: str | None = VLLM_RELEASE,
                       flag: str = "--vllm", dest: str | None = None) -> None:
    """Add ``flag`` (``--vllm``) to ``parser``: ``subject`` says whose release it is ("the vLLM release the
    harness speaks and judges"), ``effect`` what it decides in this command, ``auto`` (when the command
    accepts ``auto``) what ``auto`` picks. ``default`` None leaves the option unset unless given."""
    forms = FORMS + (f", or auto ({auto})" if auto else "")
    text = f"{subject}: {forms}." + (f" {effect}" if effect else "")
    if default is not None:
        text += " (default %(default)s)"
    kwargs = {"dest": dest} if dest else {}
    parser.add_argument(flag, default=default, metavar="RELEASE|PATH|auto" if auto else "RELEASE|PATH",
                        help=text, **kwargs)
