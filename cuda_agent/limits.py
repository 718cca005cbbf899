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

IMPORT_TIMEOUT_S = 120.0
"""the default bound on a problem file's import and capture (in a child process,
`problem_child.py`; a run's shorter --time-limit bounds it too)"""

IMPORT_MEMORY_FRACTION = 0.5
"""the default bound on the host memory a problem file's import and capture may take: this
share of the memory available when it starts"""

STAGE_PATIENCE = 8
"""measurements a stage of a program, other than the last, may go without improving the
program's best by `space.program.STAGE_GAIN` before it hands the rest of its share to the
stages after it: with an even split, a program whose optimum needs its second stage costs every
strategy at least half the budget, however early the first stage has settled (docs/journal.md:
space/program.py)"""
