"""The benchmark scripts: thin programs over cuda_agent's public API that run the suites
(problems/, realistic/, conv_chains/), write results under results/ and data/, and regenerate
BENCHMARKS.md. A package so that they share code (sections.py, realistic_suite.py, ...) without
editing sys.path; run one from the checkout's root as ``python -m benchmarks.NAME [ARGS]``.
Not installed with cuda_agent (pyproject's package list): they read and write the checkout."""
