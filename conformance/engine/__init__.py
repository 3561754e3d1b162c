"""Engine role: the harness plays the frontend."""
