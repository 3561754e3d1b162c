"""`--attach`: the harness cannot restart the engine, so it must reuse a healthy one and stop at a dead one."""

from ecp.reference.engine import launch

FAST = ["--quiet-window", "0.2", "--startup-timeout", "20", "--case-timeout", "5"]


def _attached(run_ecp, address, *args, **engine_options):
    handle = launch(address, 1, 0, mode="thread", log_level="ERROR", **engine_options)
    try:
        return run_ecp("conformance", "engine", "--attach", address, *FAST, *args)
    finally:
        handle.stop(5.0)


def test_a_case_that_only_marks_the_engine_dirty_does_not_crash_the_rest(run_ecp, tmp_path):
    # ENG-UTIL-4 sleeps and wakes the engine and asks for a fresh one afterwards, as a precaution
    code, stdout = _attached(run_ecp, f"ipc://{tmp_path}/hs", "--case", "ENG-UTIL-*")
    assert code == 0, stdout
    assert "CRASH" not in stdout and "7 PASS" in stdout, stdout


def test_an_engine_that_died_ends_the_attached_run_at_once(run_ecp, tmp_path):
    code, stdout = _attached(run_ecp, f"ipc://{tmp_path}/hs", "--case", "ENG-ROB-1", "--case", "ENG-ROB-2",
                             bugs=["crash-on-bad-frame"])
    assert code == 1, stdout
    # it announced its death: fail-closed is a FAIL of the case's clause, not a silent crash
    assert "FAIL ENG-ROB-1" in stdout and "fail-closed: the engine sent ENGINE_CORE_DEAD" in stdout, stdout
    assert "CRASH ENG-ROB-2" in stdout and "the attached engine is gone" in stdout, stdout
