"""A linear layer then an activation (ReLU, GELU, Mish, SiLU): the problem files of its sizes.

Each file is generated: edit it here, then run `python -m cuda_agent.experiments.problem_files
--write` (tests/test_problem_files.py fails while a file differs from what this renders)."""

TEMPLATE = '''\
"""$doc"""
$imports


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear($args)

    def forward(self, x):
        return $act(self.fc(x))


def get_inputs():
    return [torch.randn($x)]


def get_init_inputs():
    return []
'''

DEFAULTS = {"imports": "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F"}
"""slot values a problem does not give: the imports most of the files were written with"""

PROBLEMS = {
    "benchmarks/problems/fused_linear_3d_relu.py": {
        "doc": ("Linear layer on a (batch, sequence, features) tensor, then ReLU: 32 x 512 x "
                "2048 -> 2048."),
        "args": "2048, 2048",
        "act": "torch.relu",
        "x": "32, 512, 2048",
    },
    "benchmarks/problems/fused_linear_gelu.py": {
        "doc": "Linear layer then exact GELU, 4096 x 4096 -> 8192.",
        "args": "4096, 8192",
        "act": "F.gelu",
        "x": "4096, 4096",
    },
    "benchmarks/problems/fused_linear_mish.py": {
        "doc": "Linear layer then Mish: x * tanh(softplus(x)).",
        "args": "4096, 4096",
        "act": "F.mish",
        "x": "4096, 4096",
    },
    "benchmarks/problems/fused_linear_relu.py": {
        "doc": "Linear layer then ReLU: relu(x @ W.T + b), 8192 x 4096 -> 4096.",
        "args": "4096, 4096",
        "act": "torch.relu",
        "x": "8192, 4096",
    },
    "benchmarks/realistic/fused_linear_gelu_wide.py": {
        "doc": "nn.Linear(4096, 4096) then GELU on a (65536, 4096) batch (1 GiB in).",
        "args": "4096, 4096",
        "act": "F.gelu",
        "x": "65536, 4096",
    },
    "benchmarks/validation/problems/val_linear_gelu.py": {
        "doc": ("Linear 1024 -> 3072 then GELU (a transformer MLP's first half): a held-out "
                "GEMM shape."),
        "imports": "import torch\nimport torch.nn as nn",
        "args": "1024, 3072",
        "act": "torch.nn.functional.gelu",
        "x": "2048, 1024",
    },
    "benchmarks/validation/problems/val_linear_small_batch.py": {
        "doc": ("Linear 4096 -> 4096 with SiLU on 192 rows (a decoder's small batch): a "
                "held-out GEMM shape,\n"
                "few output tiles for 132 SMs."),
        "imports": "import torch\nimport torch.nn as nn",
        "args": "4096, 4096",
        "act": "torch.nn.functional.silu",
        "x": "192, 4096",
    },
}
