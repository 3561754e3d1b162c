"""The one Jinja2 environment of every HTML page ecp writes: the run's report (``--html``,
:mod:`.report`) and the interop results site (``ecp interop site``, :mod:`.interop.site`).

Both render from ``templates/`` beside this module and share what a reader should recognise from one
page to the other: the outcome colours (``_outcomes.css.j2``, from :data:`COLOURS`) and how a case's
reason, expected-failure entry and transcript read (``_case.html.j2``). The site's own pages are in
``templates/site/``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

TEMPLATES = Path(__file__).parent / "templates"

#: outcome -> background colour, on every page
COLOURS = {"PASS": "#cfc", "FAIL": "#fcc", "TIMEOUT": "#fdb", "CRASH": "#f99", "UNSUPPORTED": "#eee",
           "XFAIL": "#eef", "XPASS": "#fcf", "ERROR": "#f66"}


def environment() -> Any:
    """The environment (autoescaped; an undefined name is an error, never an empty string)."""
    import jinja2  # the report's and the site's only need: imported when a page is written

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.globals["colours"] = COLOURS
    return env
