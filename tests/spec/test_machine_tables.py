"""The transition tables as data: typed keys (a key that names no state or event of its table
fails when the module holding it is imported) and the stated meaning of every unlisted pair."""

from __future__ import annotations

import importlib.util
import itertools
import sys

import pytest

from ecp.spec.machine import (
    HANDSHAKE, LIVENESS, REQUEST, TABLES, UTILITY, WAVE, HandshakeEvent, HandshakeState, LivenessEvent,
    RequestEvent, RequestStatus, Row, Table, TableError, WaveEvent, WaveState, render_table,
)


def _table(rows, **kw) -> Table:
    args = dict(area="demo", title="Demo", scope="per test", states=HandshakeState, events=HandshakeEvent,
                initial=HandshakeState.START, rows=rows, unlisted="illegal", unlisted_clause="ECP-HS-7",
                unlisted_why="every step has a row")
    args.update(kw)
    return Table(**args)


def _row(states, event, next=None, verdict="legal", **kw) -> Row:
    return Row(states, event, "engine", next, verdict, "ECP-HS-1", **kw)


def test_a_well_formed_table_is_accepted_and_steps_by_its_members():
    t = _table((_row((HandshakeState.START,), HandshakeEvent.ENGINE_HELLO, HandshakeState.HELLO),))
    assert t.step(HandshakeState.START, HandshakeEvent.ENGINE_HELLO).next is HandshakeState.HELLO
    unlisted = t.step(HandshakeState.HELLO, HandshakeEvent.ENGINE_HELLO)
    assert (unlisted.verdict, unlisted.clause) == ("illegal", "ECP-HS-7")


@pytest.mark.parametrize("row, names", [
    (_row(("START",), HandshakeEvent.ENGINE_HELLO), "'START'"),                       # a string, not a state
    (_row((RequestStatus.NONE,), HandshakeEvent.ENGINE_HELLO), "NONE"),               # another table's state
    (_row((HandshakeState.START,), "EngineHello"), "'EngineHello'"),                  # a string, not an event
    (_row((HandshakeState.START,), RequestEvent.ADD), "Add"),                         # another table's event
    (_row((HandshakeState.START,), HandshakeEvent.INIT, WaveState.RUNNING), "RUNNING"),  # a foreign next state
    (_row((HandshakeState.START,), HandshakeEvent.INIT, followed=HandshakeState.HELLO), "only an illegal row"),
])
def test_a_row_that_names_no_state_or_event_of_its_table_is_refused(row, names):
    with pytest.raises(TableError, match="the demo table") as info:
        _table((row,))
    assert names in str(info.value)


def test_two_rows_for_one_pair_and_an_unexplained_unlisted_are_refused():
    row = _row((HandshakeState.START,), HandshakeEvent.ENGINE_HELLO)
    with pytest.raises(TableError, match="two rows"):
        _table((row, row))
    with pytest.raises(TableError, match="unlisted"):
        _table((row,), unlisted_why="")
    with pytest.raises(TableError, match="initial"):
        _table((row,), initial="START")


def test_a_lookup_with_a_key_of_no_table_or_another_table_raises():
    for state, event in [("REGISTERNG", HandshakeEvent.INIT), (HandshakeState.START, "Init"),
                         (HandshakeState.START, RequestEvent.ADD), (RequestStatus.NONE, HandshakeEvent.INIT)]:
        with pytest.raises(TableError, match="handshake"):
            HANDSHAKE.step(state, event)


def _import(tmp_path, name: str, source: str):
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    return module


_MODULE = '''
from ecp.spec.machine.table import HandshakeEvent, HandshakeState, RequestStatus, Row, Table
T = Table(area="typo", title="Typo", scope="per engine", states=HandshakeState, events=HandshakeEvent,
          initial=HandshakeState.START, unlisted="illegal", unlisted_clause="ECP-HS-7", unlisted_why="as written",
          rows=(Row((HandshakeState.START,), HandshakeEvent.ENGINE_HELLO, "engine", {next}, "legal", "ECP-HS-1"),))
'''


def test_a_typo_in_a_table_key_fails_when_its_module_is_imported(tmp_path):
    good = _import(tmp_path, "table_ok", _MODULE.format(next="HandshakeState.HELLO"))
    assert good.T.step(HandshakeState.START, HandshakeEvent.ENGINE_HELLO).next is HandshakeState.HELLO
    with pytest.raises(AttributeError, match="HELO"):          # a misspelt state
        _import(tmp_path, "table_typo", _MODULE.format(next="HandshakeState.HELO"))
    with pytest.raises(TableError, match="typo table"):       # a state string where a state belongs
        _import(tmp_path, "table_string", _MODULE.format(next='"HELLO"'))
    with pytest.raises(TableError, match="typo table"):       # another table's state
        _import(tmp_path, "table_foreign", _MODULE.format(next="RequestStatus.RUNNING"))


def test_states_compare_equal_to_their_names_and_events_do_not():
    assert HandshakeState.READY == "READY" and f"{HandshakeState.READY}" == "READY"
    assert {"READY": 1}[HandshakeState.READY] == 1
    assert RequestEvent.ADD != "Add" and str(RequestEvent.ADD) == "Add" and RequestEvent.ADD is not WaveEvent.ADD


# ------------------------------------------------------------------ what an unlisted pair means
def _unlisted(table: Table) -> list[tuple]:
    listed = {(s, r.event) for r in table.rows for s in (table.states if r.states == ("*",) else r.states)}
    return [(s, e) for s, e in itertools.product(table.states, table.events) if (s, e) not in listed]


def test_every_table_states_what_an_unlisted_pair_means_and_renders_it():
    for area, table in TABLES.items():
        assert table.unlisted in ("ignore", "illegal") and table.unlisted_why, area
        text = render_table(area)
        assert table.unlisted_why in text and table.unlisted_clause in text, area
        for s, e in _unlisted(table):
            row = table.step(s, e)
            assert row.next is None and row.clause == table.unlisted_clause
            assert row.verdict == ("legal" if table.unlisted == "ignore" else "illegal"), (area, s, e)


def test_the_reasons_given_for_unlisted_pairs_hold():
    # utility: every pair has a row
    assert _unlisted(UTILITY) == []
    # waves: the only unlisted pair is an ADD to a running engine
    assert _unlisted(WAVE) == [(WaveState.RUNNING, WaveEvent.ADD)]
    # requests: every ADD and ABORT has a row in every state; only outputs are unlisted
    assert all(e.value.startswith("Output(") for _, e in _unlisted(REQUEST))
    # liveness: a dead engine's messages are illegal by the Outputs and Input rows every message passes
    assert {e for s, e in _unlisted(LIVENESS) if s == "DEAD"} <= {
        LivenessEvent.FOREIGN_ENGINE_INDEX, LivenessEvent.FOREIGN_CLIENT, LivenessEvent.NO_SUCH_CLIENT}
    for event in (LivenessEvent.OUTPUTS, LivenessEvent.INPUT):
        assert LIVENESS.step(LIVENESS.states.DEAD, event).verdict == "illegal"


def test_only_illegal_rows_name_where_they_are_followed_to():
    followed = [(t, s, r.event) for t in TABLES.values() for r in t.rows if r.followed is not None
                for s in r.states]
    assert len(followed) >= 6 and all(t.step(s, e).verdict == "illegal" for t, s, e in followed)
    assert "(followed: `READY`)" in render_table("handshake")
