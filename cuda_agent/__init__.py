"""cuda-agent: writes fast CUDA kernels for PyTorch reference programs by measuring them.

    import cuda_agent
    result = cuda_agent.tune("softmax.py", out="runs/softmax", budget=64)
"""

from typing import Any

from .settings import RunSettings
from .version import __version__


def tune(problem: Any, out: Any = None, **options: Any) -> Any:
    """Tune one problem file (see `cuda_agent.tuner.tune`; the options are `RunSettings` fields,
    or pass `settings=RunSettings(...)` whole): the
    CLI's default strategy ("default": the agents with the shipped policy; `strategy="random"`
    and the others by name), the CLI's store, a 30-minute time limit, a warning when it falls
    back to the simulator; no main guard needed in the calling script."""
    from .tuner import tune as _tune  # imported lazily: `import cuda_agent` stays light

    return _tune(problem, out=out, **options)


def tune_model(problem: Any, out: Any, **options: Any) -> Any:
    """Tune a whole model (`cuda_agent.regions.tune.tune_model`): its graph split into regions
    the templates cover, each tuned as a problem of its own, and regions left to torch; writes
    `out`/model_new.py (one drop-in module) and report.json (a line per region). `cuda-agent
    tune` takes this path where no one capture covers the file. Options as `tune`'s."""
    from .regions.tune import tune_model as _tune_model

    options.setdefault("store", _default_store())
    return _tune_model(problem, out, **options)


def _default_store() -> Any:
    from .store import default_store

    return default_store()


__all__ = ["RunSettings", "tune", "tune_model", "__version__"]
