"""The checked-in JSON Schemas match the code, and every golden value validates against them."""

from __future__ import annotations

import jsonschema
import pytest

from ecp.spec import golden, schema
from ecp.spec.cli import main


def test_checked_in_schemas_match_the_code():
    rendered = schema.render_schemas()
    on_disk = {p.name: p.read_text(encoding="utf-8") for p in schema.SCHEMA_DIR.glob("*.json")}
    assert on_disk == rendered, "spec/schema is stale: run `ecp schema`"


def test_schema_check_command(tmp_path, capsys):
    assert main(["schema", "--out", str(tmp_path)]) == 0
    assert main(["schema", "--check", "--out", str(tmp_path)]) == 0
    (tmp_path / "add.json").write_text("{}\n")
    assert main(["schema", "--check", "--out", str(tmp_path)]) == 1
    assert "add.json" in capsys.readouterr().err
    assert main(["schema", "--check"]) == 0  # the checked-in copy


VALIDATED = [v for v in golden.load_vectors() if v.kind in schema.MESSAGE_TYPES]


@pytest.mark.parametrize("vector", VALIDATED, ids=lambda v: f"{v.source['file']}:{v.source['line']}")
def test_golden_value_validates(vector):
    jsonschema.Draft202012Validator(schema.load_schema(vector.kind)).validate(vector.value)


def test_schema_rejects_a_wrong_value():
    add = next(v for v in VALIDATED if v.kind == "add")
    bad = list(add.value)
    bad[0] = 42  # request_id must be a string
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(schema.load_schema("add")).validate(bad)
    outputs = next(v for v in VALIDATED if v.kind == "outputs")
    bad = list(outputs.value)
    bad[1] = [["r", [1], None, None, None, 9]]  # finish_reason out of range
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(schema.load_schema("outputs")).validate(bad)
