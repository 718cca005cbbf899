"""Softmax or log-softmax of a 2-D tensor along the dim its constructor takes: the problem
files of its sizes.

Each file is generated: edit it here, then run `python -m cuda_agent.experiments.problem_files
--write` (tests/test_problem_files.py fails while a file differs from what this renders)."""

TEMPLATE = '''\
"""$doc"""
$imports

batch_size = $batch_size
dim = $dim


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.$fn(x, dim=self.dim)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [-1]
'''

DEFAULTS = {"imports": "import torch\nimport torch.nn as nn"}
"""slot values a problem does not give: the imports most of the files were written with"""

PROBLEMS = {
    "benchmarks/problems/softmax_log_softmax.py": {
        "doc": "Log-softmax over the last dim of a (16384, 16384) tensor.",
        "batch_size": 16384,
        "dim": 16384,
        "fn": "log_softmax",
    },
    "benchmarks/problems/softmax_long_rows.py": {
        "doc": "Softmax over the last dim with long rows: (4096, 65536).",
        "batch_size": 4096,
        "dim": 65536,
        "fn": "softmax",
    },
    "benchmarks/problems/softmax_short_rows.py": {
        "doc": "Softmax over the last dim with short rows: (262144, 1024).",
        "batch_size": 262144,
        "dim": 1024,
        "fn": "softmax",
    },
    "benchmarks/problems/softmax_tinyrows_odd.py": {
        "doc": "Odd: softmax over tiny rows of length 3: (1003, 3), dim=-1.",
        "batch_size": 1003,
        "dim": 3,
        "fn": "softmax",
    },
}
