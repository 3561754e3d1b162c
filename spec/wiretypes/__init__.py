"""The wire types of every release, generated from its layout: one module per shipped layout.

``vllm_0_33`` is ``spec/layouts/vllm-0.33.json`` rendered by :mod:`ecp.spec.layout.codegen` with the
hand-written notes of :mod:`ecp.spec.overlay`: msgspec Structs in wire order and IntEnums, committed
so that a reader and a type checker can open them; ``current`` re-exports the module of the release
:mod:`ecp.spec`'s typed API is (``VLLM_RELEASE``, spec/version.py), which that API imports its
generated classes from. ``ecp spec types`` rewrites the modules of every
shipped layout (``ecp spec release add`` runs it); ``ecp spec types --check`` and
``tests/spec/test_wiretypes.py`` fail while one is stale.

:func:`load` gives the module of any layout: a shipped one's committed module, or, for a layout
from a file, a wheel or a checkout, the same source written to a cache folder
(``$ECP_CACHE_DIR/wiretypes`` or ``~/.cache/ecp/wiretypes``) and imported from there as
``ecp.spec.wiretypes.<name>_<digest>``, so it too can be opened.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import tempfile
from pathlib import Path
from types import ModuleType

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..layout.model import Layout

#: this package's folder: where the shipped layouts' modules are committed
HERE = Path(__file__).resolve().parent


def expected_modules() -> dict[str, str]:
    """File name -> source of the module of every shipped layout (what ``ecp spec types`` writes)."""
    from ..layout.codegen import module_name, render
    from ..layout.resolve import load_shipped, shipped_names
    from ..version import VLLM_RELEASE

    out = {f"{module_name(layout)}.py": render(layout, origin=f"spec/layouts/{name}.json")
           for name in shipped_names() for layout in [load_shipped(name)]}
    current = module_name(load_shipped(f"vllm-{VLLM_RELEASE}"))
    out["current.py"] = (
        f'"""The wire types of vLLM {VLLM_RELEASE}, the release ecp.spec\'s typed API is (``VLLM_RELEASE``,\n'
        'spec/version.py): written by ``ecp spec types``, do not edit."""\n\n'
        f"from .{current} import *  # noqa: F401,F403\n"
        f"from .{current} import __all__  # noqa: F401\n")
    return out


def write_modules(check: bool = False) -> list[str]:
    """Write the module of every shipped layout (``ecp spec types``) and remove generated modules no
    shipped layout has; with ``check``, write nothing. Returns what was (or, checking, would be)
    changed, one line per file."""
    expected = expected_modules()
    changes = []
    for file, source in expected.items():
        path = HERE / file
        if not path.is_file():
            changes.append(f"missing {path}")
        elif path.read_text(encoding="utf-8") != source:
            changes.append(f"differs from its layout: {path}")
        else:
            continue
        if not check:
            path.write_text(source, encoding="utf-8")
    for path in sorted(HERE.glob("*.py")):
        if path.name != "__init__.py" and path.name not in expected:
            changes.append(f"no shipped layout: {path}")
            if not check:
                path.unlink()
    return changes


def is_generated(cls: type) -> bool:
    """Whether ``cls`` is a generated wire type (of a shipped layout or one generated at run time)."""
    return cls.__module__.startswith(__name__ + ".")


def _shipped(layout: "Layout") -> ModuleType | None:
    from ..layout.codegen import module_name
    from ..layout.resolve import load_shipped, shipped_names

    if layout.name not in shipped_names() or load_shipped(layout.name) != layout:
        return None
    return importlib.import_module(f"{__name__}.{module_name(layout)}")


def _cache_root() -> Path:
    root = os.environ.get("ECP_CACHE_DIR")
    base = Path(root) if root else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ecp"
    return base / "wiretypes"


def _write(folder: Path, file: str, source: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / file
    if not path.is_file() or path.read_text(encoding="utf-8") != source:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(source, encoding="utf-8")
        tmp.replace(path)  # whole or not at all: peers of one run write it side by side
    return path


def load(layout: "Layout") -> ModuleType:
    """The module of ``layout``'s wire types (see the module docstring); raises
    :class:`~ecp.spec.layout.model.LayoutError` for a layout no Python module expresses."""
    from ..layout.codegen import layout_digest, module_name, render
    from ..layout.model import LayoutError

    shipped = _shipped(layout)
    if shipped is not None:
        return shipped
    source = render(layout)
    name = f"{module_name(layout)}_{layout_digest(layout)}"
    qualified = f"{__name__}.{name}"
    if qualified in sys.modules:
        return sys.modules[qualified]
    path = None
    for folder in (_cache_root(), Path(tempfile.gettempdir()) / f"ecp-wiretypes-{os.getuid()}"):
        try:
            path = _write(folder, f"{name}.py", source)
            break
        except OSError:
            continue  # a cache that cannot be written: the next place
    if path is None:
        raise LayoutError(f"{layout.name}: no folder to write its generated wire types to")
    spec = importlib.util.spec_from_file_location(qualified, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[qualified] = module  # (msgspec resolves the annotations through it)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[qualified]
        raise LayoutError(f"{layout.name}: its generated wire types ({path}) do not load: {exc}") from None
    return module
