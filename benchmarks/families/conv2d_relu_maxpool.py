"""Conv2d, ReLU, then max pooling: the problem files of its sizes.

Each file is generated: edit it here, then run `python -m cuda_agent.experiments.problem_files
--write` (tests/test_problem_files.py fails while a file differs from what this renders)."""

TEMPLATE = '''\
"""$doc"""
$imports


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d($args)

    def forward(self, x):
        return F.max_pool2d(torch.relu(self.conv(x)), 2)


def get_inputs():
    return [torch.randn($x)]


def get_init_inputs():
    return []
'''

DEFAULTS = {"imports": "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F"}
"""slot values a problem does not give: the imports most of the files were written with"""

PROBLEMS = {
    "benchmarks/problems/fused_conv2d_relu_maxpool.py": {
        "doc": ("Conv2d, ReLU, then 2x2 max pooling: a convolution and a pooling window, two "
                "kernels."),
        "args": "64, 128, 3, padding=1",
        "x": "32, 64, 64, 64",
    },
    "benchmarks/validation/problems/val_conv2d_relu_maxpool.py": {
        "doc": ("Conv2d (32 -> 96 channels, 3x3), ReLU, 2x2 max pooling: a held-out shape of "
                "the conv+pool\n"
                "family, swept to check the simulator's ranking on configurations it was not "
                "fitted on."),
        "args": "32, 96, 3, padding=1",
        "x": "64, 32, 48, 48",
    },
    "benchmarks/validation/problems/val_conv2d_relu_maxpool_b.py": {
        "doc": ("Conv2d (64 -> 64 channels, 3x3), ReLU, 2x2 max pooling on 56x56 planes: a "
                "second held-out\n"
                "shape of the conv+pool family."),
        "args": "64, 64, 3, padding=1",
        "x": "32, 64, 56, 56",
    },
}
