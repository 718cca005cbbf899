"""Problem files: loading, checking on meta tensors, and one-line errors for malformed files."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from helpers import BAD, GOOD
from cuda_agent.errors import CudaAgentError, ProblemError, UnsupportedError
from cuda_agent.ir.planning import make_plan
from cuda_agent.problem import load_problem

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "problems"

# every malformed file, the error class and words its message must contain
BAD_FILES = {
    "forward_raises": (ProblemError, ["forward", "15"]),
    "fp64_input": (UnsupportedError, ["float64"]),
    "get_inputs_raises": (ProblemError, ["get_inputs", "broken on purpose"]),
    "model_not_module": (ProblemError, ["Model", "nn.Module"]),
    "no_get_inputs": (ProblemError, ["get_inputs"]),
    "no_model": (ProblemError, ["Model"]),
    "returns_float": (ProblemError, ["float", "tensor"]),
    "returns_list": (ProblemError, ["list", "tensor"]),
    "syntax_error": (ProblemError, ["syntax", "line 7"]),
    "two_outputs": (ProblemError, ["tuple"]),
    "unsupported_op": (UnsupportedError, ["roll"]),
}


def load_and_plan(path: Path):
    prob = load_problem(path)
    return prob, make_plan(prob.graph())


def test_every_bad_file_is_listed():
    assert {p.stem for p in BAD.glob("*.py")} == set(BAD_FILES)


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_bad_file_gives_one_line_error(name):
    cls, words = BAD_FILES[name]
    t0 = time.perf_counter()
    with pytest.raises(CudaAgentError) as info:
        load_and_plan(BAD / f"{name}.py")
    assert time.perf_counter() - t0 < 30
    assert isinstance(info.value, cls), (type(info.value), info.value)
    msg = str(info.value)
    assert "\n" not in msg and msg.strip() == msg and len(msg) < 400
    for w in words:
        assert w in msg, (w, msg)
    assert "Traceback" not in msg


@pytest.mark.parametrize("name", ["relu_small", "softmax_small", "sum_small"])
def test_good_files_load(name):
    prob, plan = load_and_plan(GOOD / f"{name}.py")
    assert prob.name == name and prob.path == GOOD / f"{name}.py"
    assert len(prob.source_hash) == 16 and "class Model" in prob.source
    assert plan.out_shape


def test_problem_helpers_on_cpu():
    prob = load_problem(GOOD / "softmax_small.py")
    x = prob.make_inputs("cpu")
    assert len(x) == 1 and x[0].shape == (33, 257) and x[0].device.type == "cpu"
    m = prob.make_model("cpu")
    assert m.training  # as the user holds it: Model(*get_init_inputs()) is in training mode
    torch.testing.assert_close(m(x[0]), torch.softmax(x[0], -1))
    assert prob.init_inputs() == []


def test_graph_is_cached():
    prob = load_problem(GOOD / "relu_small.py")
    assert prob.graph() is prob.graph()


# -- malformed files written on the fly ---------------------------------------------------------

@pytest.mark.parametrize("kw,cls,words", [
    (dict(expr="x", inputs="torch.randn(4, 8)"), UnsupportedError, ["input"]),
    (dict(expr="torch.relu(x)", inputs="", args="x=None"), ProblemError, ["no tensors"]),
    (dict(expr="torch.relu(x)", inputs="torch.randn(4, 8)", init_sig=", n",
          init_body="raise ValueError('n must be positive')", init_inputs="-1"),
     ProblemError, ["Model(*get_init_inputs())", "n must be positive"]),
    (dict(expr="torch.relu(x) @ x", inputs="torch.randn(4, 8)"), ProblemError, ["forward"]),
    (dict(expr="torch.roll(x, 1, 0) + 1", inputs="torch.randn(4, 8)"), UnsupportedError,
     ["roll"]),
    (dict(expr="torch.linalg.inv(x)", inputs="torch.randn(4, 4)"), UnsupportedError, ["inv"]),
    (dict(expr="x.sum(dim=(1, 3))", inputs="torch.randn(4, 5, 6, 7)"), UnsupportedError,
     ["non-adjacent"]),
    (dict(expr="torch.relu(x)", inputs="torch.randn(4, 8, dtype=torch.float64)"),
     UnsupportedError, ["float64"]),
])
def test_more_defects(make_problem, kw, cls, words):
    path = make_problem("defect", **kw)
    with pytest.raises(CudaAgentError) as info:
        load_and_plan(path)
    assert isinstance(info.value, cls), (type(info.value), info.value)
    msg = str(info.value)
    assert "\n" not in msg
    for w in words:
        assert w in msg, (w, msg)


def test_get_inputs_not_a_list(tmp_path):
    path = tmp_path / "notlist.py"
    path.write_text(
        "import torch\nimport torch.nn as nn\n\n"
        "class Model(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n\n"
        "def get_inputs():\n    return torch.randn(4, 8)\n")
    with pytest.raises(ProblemError, match="expected a list"):
        load_problem(path)


def test_get_init_inputs_is_optional(tmp_path):
    path = tmp_path / "noinit.py"
    path.write_text(
        "import torch\nimport torch.nn as nn\n\n"
        "class Model(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n\n"
        "def get_inputs():\n    return [torch.randn(4, 8)]\n")
    prob = load_problem(path)
    assert prob.init_inputs() == [] and make_plan(prob.graph()).family == "elementwise"


def test_get_init_inputs_not_callable(tmp_path):
    path = tmp_path / "initnc.py"
    path.write_text(
        "import torch\nimport torch.nn as nn\n\n"
        "class Model(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n\n"
        "def get_inputs():\n    return [torch.randn(4, 8)]\n\nget_init_inputs = [1]\n")
    with pytest.raises(ProblemError, match="get_init_inputs"):
        load_problem(path)


@pytest.mark.parametrize("kind", ["missing", "dir", "suffix"])
def test_path_errors(tmp_path, kind):
    if kind == "missing":
        path = tmp_path / "nope.py"
        word = "no such file"
    elif kind == "dir":
        path = tmp_path / "d.py"
        path.mkdir()
        word = "directory"
    else:
        path = tmp_path / "p.txt"
        path.write_text("x = 1\n")
        word = ".py"
    with pytest.raises(ProblemError, match=word):
        load_problem(path)


def test_same_stem_in_two_directories_are_distinct(tmp_path):
    from helpers import write_problem
    a = write_problem(tmp_path / "a", "p", "torch.relu(x)", "torch.randn(4, 8)")
    b = write_problem(tmp_path / "b", "p", "torch.sigmoid(x)", "torch.randn(4, 8)")
    pa, pb = load_problem(a), load_problem(b)
    assert pa.model_cls is not pb.model_cls and pa.source_hash != pb.source_hash
    assert [n.op for n in pa.graph().live()][-1] == "relu"
    assert [n.op for n in pb.graph().live()][-1] == "sigmoid"


def test_check_runs_on_meta_tensors(make_problem):
    """A problem of 64 GiB inputs loads in seconds: nothing is allocated."""
    path = make_problem("huge", "torch.softmax(x, dim=-1)", "torch.randn(131072, 131072)")
    t0 = time.perf_counter()
    prob, plan = load_and_plan(path)
    assert time.perf_counter() - t0 < 30
    assert plan.full_shape == (131072, 131072)


def test_benchmark_problems_load_on_meta():
    paths = sorted(BENCH.glob("*.py"))
    assert paths
    for p in paths:
        load_problem(p)  # checked on meta: never allocates the GBs these would take


@pytest.mark.parametrize("where", ["get_inputs", "import", "init"])
def test_multiline_user_exception_gives_one_line(tmp_path, where):
    head = "import torch\nimport torch.nn as nn\n"
    raise_ = "raise ValueError('first line\\nsecond line')"
    init = f"    def __init__(self):\n        super().__init__()\n        {raise_}\n" \
        if where == "init" else ""
    src = head + (raise_ + "\n" if where == "import" else "") + (
        "class Model(nn.Module):\n" + init +
        "    def forward(self, x):\n        return torch.relu(x)\n\n"
        "def get_inputs():\n    " + (raise_ if where == "get_inputs" else
                                     "return [torch.randn(4, 8)]") + "\n")
    path = tmp_path / f"multi_{where}.py"
    path.write_text(src)
    with pytest.raises(ProblemError) as info:
        load_problem(path)
    msg = str(info.value)
    assert "first line" in msg and "\n" not in msg


# -- plain words, and the file named ---------------------------------------------------------------

@pytest.mark.parametrize("expr,words", [
    ("torch.relu(x) if x.sum() > 0 else x * 2", ["an `if` on a tensor"]),
    ("x / x.max().item()", ["an `if` on a tensor"]),
    ("x[x > 0]", ["shape depends on tensor values"]),
    ("torch.nonzero(x).float()", ["shape depends on tensor values"]),
])
def test_data_dependent_control_flow_is_said_in_plain_words(make_problem, expr, words):
    """torch says `Tensor.item() cannot be called on meta tensors`; the user reads what their
    forward() does that cannot be captured, and where."""
    path = make_problem("branchy", expr, "torch.randn(4, 8)")
    line = path.read_text().splitlines().index(f"        return {expr}") + 1
    with pytest.raises(ProblemError) as info:
        load_problem(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}: line {line}: "), msg
    for w in ["data-dependent control flow", "cannot capture", *words]:
        assert w in msg, (w, msg)
    assert "meta tensors" not in msg and "\n" not in msg


@pytest.mark.parametrize("kw", [
    dict(expr="x * 2", inputs="torch.randint(0, 10, (4, 8))"),  # int64, not a loss's targets
    dict(expr="torch.roll(x, 1, 0) + 1", inputs="torch.randn(4, 8)"),  # an op not covered
    dict(expr="torch.relu(x)", inputs="torch.randn(4, 8, dtype=torch.float64)"),
])
def test_capture_errors_start_with_the_file(make_problem, kw):
    path = make_problem("refused", **kw)
    with pytest.raises(CudaAgentError) as info:
        load_and_plan(path)
    assert str(info.value).startswith(f"{path}: "), str(info.value)


def test_an_import_error_names_the_line(tmp_path):
    path = tmp_path / "raises_at_import.py"
    path.write_text("import torch\n\n\nCONST = 1 / 0\n")
    with pytest.raises(ProblemError, match=r"raises_at_import\.py: line 4: importing the file "
                                           r"raised ZeroDivisionError"):
        load_problem(path)


def test_a_problem_loaded_bounded_is_the_same_problem(tmp_path):
    """`load_problem_bounded` (a child process) gives the graph an in-process load captures."""
    from cuda_agent.problem_child import load_problem_bounded

    here = load_problem(GOOD / "softmax_small.py")
    there = load_problem_bounded(GOOD / "softmax_small.py")
    assert there._module is None  # the parent has not imported it
    assert there.graph().fingerprint() == here.graph().fingerprint()
    assert (there.name, there.path, there.source_hash) == (here.name, here.path,
                                                           here.source_hash)


def test_a_forked_loader_under_a_redirected_stderr_names_the_file_s_own_error():
    """A process whose sys.stderr is no file (a StringIO: `contextlib.redirect_stderr`, some
    notebooks) forks the loader: its fault handler used to need sys.stderr's file number, the
    child ended with exit 1 and the user read "ended the process" instead of the file's error."""
    import contextlib
    import io

    from cuda_agent.errors import ProblemError
    from cuda_agent.problem_child import ProblemLoader

    loader = ProblemLoader(fork=True)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            with pytest.raises(ProblemError, match="Model") as err:
                loader.load(BAD / "no_model.py")
        assert "ended the process" not in str(err.value)
    finally:
        loader.close()
