"""Mean squared error between two random tensors (F.mse_loss): the problem files of its sizes.

Each file is generated: edit it here, then run `python -m cuda_agent.experiments.problem_files
--write` (tests/test_problem_files.py fails while a file differs from what this renders)."""

TEMPLATE = '''\
"""$doc"""
$imports


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return F.mse_loss(predictions, targets)


def get_inputs():
    return [torch.randn($x), torch.randn($x)]


def get_init_inputs():
    return []
'''

DEFAULTS = {"imports": "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F"}
"""slot values a problem does not give: the imports most of the files were written with"""

PROBLEMS = {
    "benchmarks/realistic/loss_mse_large.py": {
        "doc": "Mean squared error between two (24576, 131072) tensors: 24 GiB read.",
        "x": "24576, 131072",
    },
    "benchmarks/realistic/loss_mse_pairs.py": {
        "doc": "Mean squared error between two (16384, 16384) tensors (2 GiB read).",
        "x": "16384, 16384",
    },
}
