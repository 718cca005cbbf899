"""A product of two random tensors (torch.matmul, torch.bmm): the problem files of its shapes.

Each file is generated: edit it here, then run `python -m cuda_agent.experiments.problem_files
--write` (tests/test_problem_files.py fails while a file differs from what this renders)."""

TEMPLATE = '''\
"""$doc"""
$imports


class Model(nn.Module):
    def forward(self, a, b):
        return torch.$op(a, b)


def get_inputs():
    return [torch.randn($a), torch.randn($b)]


def get_init_inputs():
    return []
'''

DEFAULTS = {"imports": "import torch\nimport torch.nn as nn"}
"""slot values a problem does not give: the imports most of the files were written with"""

PROBLEMS = {
    "benchmarks/problems/gemm_3d_tensor_matrix.py": {
        "doc": ("3-D tensor times matrix: (16 x 1024 x 2048) @ (2048 x 768), one GEMM of 16384 "
                "rows."),
        "op": "matmul",
        "a": "16, 1024, 2048",
        "b": "2048, 768",
    },
    "benchmarks/problems/gemm_4d_tensor_matrix.py": {
        "doc": ("4-D tensor times matrix (einsum \"bijl,lk->bijk\" as a matmul): (8 x 64 x 64 "
                "x 512) @ (512 x 768)."),
        "op": "matmul",
        "a": "8, 64, 64, 512",
        "b": "512, 768",
    },
    "benchmarks/problems/gemm_batched.py": {
        "doc": "Batched matrix product: 128 x (512 x 256) @ (256 x 512), torch.bmm.",
        "op": "bmm",
        "a": "128, 512, 256",
        "b": "128, 256, 512",
    },
    "benchmarks/problems/gemm_large_k.py": {
        "doc": "Small output, long K: (256 x 131072) @ (131072 x 256): split-K territory.",
        "op": "matmul",
        "a": "256, 131072",
        "b": "131072, 256",
    },
    "benchmarks/problems/gemm_odd.py": {
        "doc": "Odd-sized matrix product: (1001 x 1003) @ (1003 x 997), no size a multiple of 4.",
        "op": "matmul",
        "a": "1001, 1003",
        "b": "1003, 997",
    },
    "benchmarks/problems/gemm_rect.py": {
        "doc": "Rectangular matrix product: (2048 x 8192) @ (8192 x 4096), strict fp32.",
        "op": "matmul",
        "a": "2048, 8192",
        "b": "8192, 4096",
    },
    "benchmarks/problems/gemm_square.py": {
        "doc": "Square matrix product, 4096 x 4096 x 4096, strict fp32 (137 GFLOP).",
        "op": "matmul",
        "a": "4096, 4096",
        "b": "4096, 4096",
    },
    "benchmarks/problems/gemm_tall_skinny.py": {
        "doc": ("Tall-skinny product: (16384 x 16) @ (16 x 16384); K = 16, a 1 GB output "
                "written once."),
        "op": "matmul",
        "a": "16384, 16",
        "b": "16, 16384",
    },
    "benchmarks/validation/problems/val_bmm.py": {
        "doc": "Batched matmul, 48 products of 384 x 192 by 192 x 320: a held-out GEMM shape.",
        "op": "bmm",
        "a": "48, 384, 192",
        "b": "48, 192, 320",
    },
    "benchmarks/validation/problems/val_matmul_tall.py": {
        "doc": "A tall product, 16384 x 512 by 512 x 768: a held-out GEMM shape.",
        "op": "matmul",
        "a": "16384, 512",
        "b": "512, 768",
    },
}
