"""Softmax over the last dim, a module without arguments: the problem files of its sizes.

Each file is generated: edit it here, then run `python -m cuda_agent.experiments.problem_files
--write` (tests/test_problem_files.py fails while a file differs from what this renders)."""

TEMPLATE = '''\
"""$doc"""
$imports


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn($x)]


def get_init_inputs():
    return []
'''

DEFAULTS = {"imports": "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F"}
"""slot values a problem does not give: the imports most of the files were written with"""

PROBLEMS = {
    "benchmarks/realistic/softmax_large_rows.py": {
        "doc": "Softmax over the last dim of (16384, 262144): a 16 GiB input, rows of 1 MiB.",
        "x": "16384, 262144",
    },
    "tests/data/good/softmax_small.py": {
        "doc": "Tiny valid problem: softmax over the last dim of a (33, 257) tensor.",
        "imports": "import torch\nimport torch.nn as nn",
        "x": "33, 257",
    },
}
