"""`ecp ... | head` ends quietly when the reader closes the pipe."""

import os
import subprocess
import sys


def test_closed_stdout_pipe_is_not_a_traceback():
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is already gone, as after `head -1` read its line
    try:
        proc = subprocess.run([sys.executable, "-m", "ecp.spec.cli", "conformance", "list"],
                              stdout=write_end, stderr=subprocess.PIPE, timeout=60)
    finally:
        os.close(write_end)
    assert b"Traceback" not in proc.stderr and b"BrokenPipeError" not in proc.stderr, proc.stderr.decode()
    assert proc.returncode == 0
