"""The HTTP surface as data: the route table, its clauses, its rendering and its schemas agree."""

from __future__ import annotations

import msgspec
import pytest

from ecp.spec import clauses, http
from ecp.spec.schema import render_schemas
from ecp.spec.tables import PROTOCOL_MD


def test_every_route_names_an_http_clause_and_a_source():
    for r in http.ROUTES:
        assert r.clause.startswith("ECP-HTTP-") and r.clause in clauses.CLAUSES, r.key
        assert r.source and r.statuses and r.request and r.response, r.key
        assert r.method in ("GET", "POST") and r.path.startswith("/"), r.key
    abort = [r for r in http.ROUTES if "abort" in r.path]
    assert abort and all(r.ids for r in abort)        # the id space of every abort form is stated


def test_every_http_clause_is_in_the_table_or_cross_cutting():
    governed = {r.clause for r in http.ROUTES}
    # error statuses, the error object, request ids and context length hold on every generation route
    cross_cutting = {"ECP-HTTP-2", "ECP-HTTP-3", "ECP-HTTP-6", "ECP-HTTP-8"}
    live = {c for c in clauses.CLAUSES if c.startswith("ECP-HTTP-")}
    assert live == governed | cross_cutting and not governed & cross_cutting


def test_the_table_is_rendered_into_protocol_md():
    text = PROTOCOL_MD.read_text(encoding="utf-8")
    block = text[text.index("<!-- http-routes -->"):text.index("<!-- /http-routes -->")]
    assert block.strip().endswith(http.render_routes().strip())
    for r in http.ROUTES:
        assert f"`{r.key}`" in block


def test_every_body_has_a_schema_file():
    names = set(render_schemas())
    assert {f"{n}.json" for n in http.schema_types()} <= names
    assert "http_error.json" in names and "http_abort_requests_request.json" in names


@pytest.mark.parametrize("body, ok", [
    ({"error": {"message": "m", "type": "NotFoundError", "param": "model", "code": 404}}, True),
    ({"error": {"message": "m", "type": "BadRequestError", "param": None, "code": 400}}, True),
    ({"detail": "Not Found"}, False),
    ({"error": "must provide abort_all=true or req_ids"}, False),
    ({"error": {"message": 3, "type": "x"}}, False),
])
def test_the_error_object(body, ok):
    try:
        msgspec.convert(body, http.ERROR_BODY)
    except msgspec.ValidationError:
        assert not ok
    else:
        assert ok


def test_route_lookup_ignores_the_query_and_knows_only_the_table():
    assert http.route("post", "/sleep?level=1").clause == "ECP-HTTP-9"
    assert http.route("GET", "/sleep") is None
    assert http.route("GET", "/version") is None


def test_uncited_routes_are_named_with_their_clause():
    used = ["GET /health", "POST /abort_requests", "GET /version"]
    assert http.uncited(used, ["ECP-HTTP-5", "ECP-ABORT-8"]) == [
        "GET /version (not in the HTTP route table)", "POST /abort_requests (ECP-HTTP-7)"]
    assert http.uncited(["GET /health"], ["ECP-HTTP-5"]) == []
