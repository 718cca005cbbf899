"""cuda-agent: writes fast CUDA kernels for PyTorch reference programs by measuring them.

    import cuda_agent
    result = cuda_agent.tune("softmax.py", out="runs/softmax", budget=64)
"""

from typing import Any

from .settings import RunSettings

__version__ = "0.1.0"


def tune(problem: Any, out: Any = None, **options: Any) -> Any:
    """Tune one problem file (see `cuda_agent.tuner.tune`; the options are `RunSettings` fields,
    or pass `settings=RunSettings(...)` whole): the
    CLI's default strategy ("default": the agents with the shipped policy; `strategy="random"`
    and the others by name), the CLI's store, a 30-minute time limit, a warning when it falls
    back to the simulator; no main guard needed in the calling script."""
    from .tuner import tune as _tune  # imported lazily: `import cuda_agent` stays light

    return _tune(problem, out=out, **options)


__all__ = ["RunSettings", "tune", "__version__"]
