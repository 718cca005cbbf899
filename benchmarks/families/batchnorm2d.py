"""nn.BatchNorm2d in training mode (as constructed): the problem files of its sizes.

Each file is generated: edit it here, then run `python -m cuda_agent.experiments.problem_files
--write` (tests/test_problem_files.py fails while a file differs from what this renders)."""

TEMPLATE = '''\
"""$doc"""
$imports


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm2d($channels)

    def forward(self, x):
        return self.bn(x)


def get_inputs():
    return [torch.randn($x)]


def get_init_inputs():
    return []
'''

DEFAULTS = {"imports": "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F"}
"""slot values a problem does not give: the imports most of the files were written with"""

PROBLEMS = {
    "benchmarks/realistic/norm_batchnorm2d_train.py": {
        "doc": ("nn.BatchNorm2d(64) in training mode (as constructed) on (32, 64, 512, 512) (2 "
                "GiB): batch\n"
                "statistics, running statistics updated."),
        "channels": 64,
        "x": "32, 64, 512, 512",
    },
    "benchmarks/realistic/norm_batchnorm2d_train_large.py": {
        "doc": ("nn.BatchNorm2d(32) in training mode on (128, 32, 1024, 1024): a 16 GiB "
                "activation map."),
        "channels": 32,
        "x": "128, 32, 1024, 1024",
    },
}
