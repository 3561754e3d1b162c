"""The case registry: ids, clauses, collection-time checks, coverage listing."""

import dataclasses

import pytest

from ecp.conformance.registry import (
    Case, RegistryError, check_implementations, load_all, load_role, validate_cases,
)
from ecp.spec import clauses

GOOD = Case("ENG-HS-1", "ECP-HS-1", "MUST", ("engine",), "HELLO first.", "hello-fields")


def test_engine_catalogue_is_valid_and_cites_known_clauses():
    cases = load_role("engine")
    assert len(cases) >= 40
    assert all(c.clause in clauses.CLAUSES for c in cases)
    assert all(c.id.startswith("ENG-") for c in cases)
    assert set(load_all()) >= {c.id for c in cases}


@pytest.mark.parametrize("change,problem", [
    ({"clause": "ECP-" + "HS-99"}, "unknown spec clause"),  # split: sources are scanned for cited ids
    ({"id": "ECP-HS-1"}, "case ids look like"),
    ({"id": "FE-HS-1"}, "starts with ENG-"),
    ({"level": "MUSTNT"}, "level must be"),
    ({"slug": "Hello Fields"}, "slug"),
    ({"requirement": "two\nlines"}, "one non-empty line"),
    ({"roles": ("frontend",)}, "roles"),
])
def test_validate_rejects_bad_entries(change, problem):
    with pytest.raises(RegistryError, match=problem):
        validate_cases([dataclasses.replace(GOOD, **change)], "engine")


def test_validate_rejects_duplicate_ids():
    with pytest.raises(RegistryError, match="duplicate case id"):
        validate_cases([GOOD, dataclasses.replace(GOOD, slug="other")], "engine")


def test_implementation_check():
    other = dataclasses.replace(GOOD, id="ENG-HS-2", slug="identity")
    check_implementations([GOOD, other], {"ENG-HS-1": ["t::a"], "ENG-HS-2": ["t::b"]})
    with pytest.raises(RegistryError, match="ENG-HS-2: catalogue entry without a test"):
        check_implementations([GOOD, other], {"ENG-HS-1": ["t::a"]})
    with pytest.raises(RegistryError, match="ENG-HS-9: test t::c cites a case id missing"):
        check_implementations([GOOD], {"ENG-HS-1": ["t::a"], "ENG-HS-9": ["t::c"]})
    with pytest.raises(RegistryError, match="more than one test"):
        check_implementations([GOOD], {"ENG-HS-1": ["t::a", "t::b"]})


def test_missing_case_implementation_is_a_harness_error(monkeypatch, capsys):
    from ecp.conformance import runner
    from ecp.spec.cli import main

    monkeypatch.setitem(runner.CASE_MODULES, "engine", ("handshake",))
    code = main(["conformance", "engine", "--adapter", "scripted_engine:start", "--case", "ENG-HS-1"])
    assert code == 2
    assert "catalogue entry without a test" in capsys.readouterr().err
