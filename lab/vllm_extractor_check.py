"""The extractor against real vLLM code, read at run time (never in CI: it needs a vLLM release).

    python -m lab.vllm_extractor_check [PATH ...] [--peer ~/.cache/vllm-peer-0.33] [--layout NAME]

Each PATH is a vLLM wheel, an unpacked wheel (a ``site-packages`` holding ``vllm/``) or a source
checkout. Without PATH, the peer directory ``../shared/peers/vllm/SETUP.sh`` made (``--peer``,
default ``$VLLM_PEER`` or ``~/.cache/vllm-peer-0.33``) gives both its downloaded wheel
(``dl/vllm-*.whl``) and its installed ``site-packages``.

Each tree is extracted statically (``ecp spec layout --from-vllm``) and compared with the shipped
layout of its release (``--layout`` overrides which) by ``ecp spec diff --strict``: no finding
and no extraction warning the shipped layout lacks. A wheel whose sha256 is the one the shipped
layout records must also give that layout exactly, line numbers included (``ecp spec layout
--check``). Exit status: 0 when every tree agrees, 1 when one differs, 2 when a path is not a
vLLM tree or names no shipped release.

The suite checks the same extractor on ``tests/diff/fixtures/engine-tree`` (a tree written for the
tests, reproducing the 0.33 layout); this script is what ties that tree's shapes to real releases.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from ecp.spec.cli import main as ecp_main
from ecp.spec.layout.model import LayoutError, encode_layout
from ecp.spec.layout.resolve import load_shipped, shipped_names
from ecp.spec.layout.vllm import extract


def _peer_trees(peer: Path) -> list[Path]:
    wheels = sorted((peer / "dl").glob("vllm-*.whl"))
    site = sorted((peer / "venv" / "lib").glob("python3*/site-packages"))
    return wheels[:1] + [s for s in site if (s / "vllm" / "__init__.py").is_file()][:1]


def check(path: Path, layout_name: str | None, out_dir: Path) -> int:
    started = time.perf_counter()
    try:
        result = extract(path)
    except LayoutError as exc:
        print(f"{path}: {exc}", file=sys.stderr)
        return 2
    seconds = time.perf_counter() - started
    name = layout_name or result.layout.name
    if name not in shipped_names():
        print(f"{path}: {name} is not a shipped release (--layout names one)", file=sys.stderr)
        return 2
    out = out_dir / f"{path.name}.json"
    out.write_bytes(encode_layout(result.layout))
    prov = result.layout.provenance
    print(f"{path}: {prov.tree if prov else '?'}, vLLM {result.layout.vllm_version}, {len(result.files)} modules "
          f"read, {len(result.warnings)} warnings, {seconds:.2f} s; ecp spec diff --strict {name} {out}")
    code = ecp_main(["spec", "diff", "--strict", name, str(out)])
    shipped = load_shipped(name).provenance
    if prov is not None and prov.sha256 and shipped is not None and prov.sha256 == shipped.sha256:
        print(f"{path}: the wheel the shipped {name} was extracted from; ecp spec layout --check")
        shipped_file = Path(__file__).resolve().parents[1] / "spec" / "layouts" / f"{name}.json"
        code = max(code, ecp_main(["spec", "layout", "--from-vllm", str(path), "--out", str(shipped_file),
                                   "--check"]))
    return code


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*", type=Path, help="vLLM wheels, unpacked wheels or checkouts")
    ap.add_argument("--peer", type=Path, default=Path(os.environ.get("VLLM_PEER", "~/.cache/vllm-peer-0.33")),
                    help="a peer directory made by ../shared/peers/vllm/SETUP.sh (used without PATH)")
    ap.add_argument("--layout", help="the shipped layout to compare with (default: the tree's release)")
    args = ap.parse_args(argv)
    paths = args.paths or _peer_trees(args.peer.expanduser())
    if not paths:
        print(f"no PATH given and no wheel or site-packages with vllm/ under {args.peer}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="ecp-extractor-check-") as tmp:
        codes = [check(path.expanduser(), args.layout, Path(tmp)) for path in paths]
    code = max(codes)
    print({0: "every tree gives its shipped layout", 1: "a tree differs from its shipped layout (above)"}.get(
        code, "a path could not be checked (above)"))
    return code


if __name__ == "__main__":
    sys.exit(main())
