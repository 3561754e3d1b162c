"""Engine-role case modules (run by `ecp conformance engine`, not by the project test suite)."""
