"""LayerNorm over the last dim of a 2-D tensor, with non-trivial affine parameters: the
problem files of its sizes.

Each file is generated: edit it here, then run `python -m cuda_agent.experiments.problem_files
--write` (tests/test_problem_files.py fails while a file differs from what this renders)."""

TEMPLATE = '''\
"""$doc"""
$imports

batch_size = $batch_size
features = $features


class Model(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape)
        with torch.no_grad():  # non-trivial affine parameters, so dropping them is caught
            self.ln.weight.copy_(1.0 + 0.1 * torch.randn(normalized_shape))
            self.ln.bias.copy_(0.1 * torch.randn(normalized_shape))

    def forward(self, x):
        return self.ln(x)


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [(features,)]
'''

DEFAULTS = {"imports": "import torch\nimport torch.nn as nn"}
"""slot values a problem does not give: the imports most of the files were written with"""

PROBLEMS = {
    "benchmarks/problems/norm_layernorm.py": {
        "doc": ("LayerNorm over the last dim of a (65536, 4096) tensor, with "
                "elementwise-affine weight and bias."),
        "batch_size": 65536,
        "features": 4096,
    },
    "benchmarks/problems/norm_layernorm_odd.py": {
        "doc": "Odd: LayerNorm over the last dim of a (37, 1003) tensor, with weight and bias.",
        "batch_size": 37,
        "features": 1003,
    },
}
