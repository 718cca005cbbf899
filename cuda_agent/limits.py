"""The default bounds of a tuning run (a light module: the CLI's --help states them without
importing torch)."""

TIME_LIMIT_S = 1800.0
"""the default bound on a run's search (30 minutes): then the best found so far is kept"""

COMPILE_TIMEOUT_S = 120.0
"""the default bound on one candidate's compile: past it the compile is stopped and the
candidate recorded as a `compile_timeout`"""

BASELINE_TIMEOUT_S = 300.0
"""seconds one baseline (torch eager, torch.compile and its compilation) may take on the GPU
before it is stopped and reported as not measured"""
