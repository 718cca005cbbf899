"""A single convolution layer (nn.Conv1d/2d/3d, nn.ConvTranspose1d/2d/3d) on one input: the
problem files of its sizes, strides, paddings, dilations and groups.

Each file is generated: edit it here, then run `python -m cuda_agent.experiments.problem_files
--write` (tests/test_problem_files.py fails while a file differs from what this renders)."""

TEMPLATE = '''\
"""$doc"""
$imports


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.$layer($args)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn($x)]


def get_init_inputs():
    return []
'''

DEFAULTS = {"imports": "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F"}
"""slot values a problem does not give: the imports most of the files were written with"""

PROBLEMS = {
    "benchmarks/problems/conv1d_standard.py": {
        "doc": "1-D convolution, kernel 7, stride 1, 128 -> 256 channels over 4096 steps.",
        "layer": "Conv1d",
        "args": "128, 256, 7",
        "x": "32, 128, 4096",
    },
    "benchmarks/problems/conv2d_asymmetric.py": {
        "doc": "Asymmetric kernel (5 x 3) with asymmetric padding (2, 1).",
        "layer": "Conv2d",
        "args": "32, 64, (5, 3), padding=(2, 1)",
        "x": "16, 32, 128, 256",
    },
    "benchmarks/problems/conv2d_depthwise.py": {
        "doc": "Depthwise 2-D convolution 3x3 (groups = channels = 128), padding 1.",
        "layer": "Conv2d",
        "args": "128, 128, 3, padding=1, groups=128",
        "x": "16, 128, 128, 128",
    },
    "benchmarks/problems/conv2d_dilated.py": {
        "doc": "Dilated 2-D convolution (dilation 2, 'same' padding), no bias.",
        "layer": "Conv2d",
        "args": "64, 64, 3, padding='same', dilation=2, bias=False",
        "x": "16, 64, 128, 128",
    },
    "benchmarks/problems/conv2d_grouped.py": {
        "doc": "Grouped 2-D convolution: 8 groups, 128 -> 256 channels, 3x3.",
        "layer": "Conv2d",
        "args": "128, 256, 3, padding=1, groups=8",
        "x": "16, 128, 64, 64",
    },
    "benchmarks/problems/conv2d_odd.py": {
        "doc": "Odd-sized 2-D convolution: 3 -> 13 channels, 5x5 kernel, stride 2, on 37 x 41.",
        "layer": "Conv2d",
        "args": "3, 13, 5, stride=2, padding=1",
        "x": "3, 3, 37, 41",
    },
    "benchmarks/problems/conv2d_pointwise.py": {
        "doc": "Pointwise (1x1) convolution, 256 -> 512 channels: a GEMM per image.",
        "layer": "Conv2d",
        "args": "256, 512, 1",
        "x": "16, 256, 64, 64",
    },
    "benchmarks/problems/conv2d_standard.py": {
        "doc": ("2-D convolution 3x3, padding 1: 64 -> 128 channels on 16 x 64 x 128 x 128 "
                "(implicit GEMM)."),
        "layer": "Conv2d",
        "args": "64, 128, 3, padding=1",
        "x": "16, 64, 128, 128",
    },
    "benchmarks/problems/conv2d_strided.py": {
        "doc": "2-D convolution 3x3, stride 2, padding 1, 128 -> 256 channels.",
        "layer": "Conv2d",
        "args": "128, 256, 3, stride=2, padding=1",
        "x": "16, 128, 128, 128",
    },
    "benchmarks/problems/conv3d_standard.py": {
        "doc": "3-D convolution 3x3x3, padding 1, 32 -> 64 channels on 8 x 32 x 32 x 64 x 64.",
        "layer": "Conv3d",
        "args": "32, 64, 3, padding=1",
        "x": "8, 32, 32, 64, 64",
    },
    "benchmarks/problems/conv_transpose1d.py": {
        "doc": ("1-D transposed convolution, kernel 5, stride 2, padding 2, output_padding 1:\n"
                "128 -> 64 channels, length 1024 -> 2048."),
        "layer": "ConvTranspose1d",
        "args": "128, 64, 5, stride=2, padding=2, output_padding=1",
        "x": "32, 128, 1024",
    },
    "benchmarks/problems/conv_transpose2d_odd.py": {
        "doc": ("2-D transposed convolution, odd sizes: 3x3, stride 2, padding 1, "
                "output_padding 1,\n"
                "dilation 2, groups 2, 48 -> 36 channels, 63x47 -> 128x96."),
        "layer": "ConvTranspose2d",
        # the call's second line, aligned under its parenthesis
        "args": "48, 36, 3, stride=2, padding=1, output_padding=1,\n" + " " * 39
                + "groups=2, dilation=2",
        "x": "8, 48, 63, 47",
    },
    "benchmarks/problems/conv_transpose2d_standard.py": {
        "doc": ("2-D transposed convolution 4x4, stride 2, padding 1: 64 -> 32 channels, 64x64 "
                "-> 128x128."),
        "layer": "ConvTranspose2d",
        "args": "64, 32, 4, stride=2, padding=1",
        "x": "16, 64, 64, 64",
    },
    "benchmarks/problems/conv_transpose3d.py": {
        "doc": ("3-D transposed convolution 3x3x3, stride 2, padding 1, output_padding 1:\n"
                "32 -> 16 channels, 16x32x32 -> 32x64x64."),
        "layer": "ConvTranspose3d",
        "args": "32, 16, 3, stride=2, padding=1, output_padding=1",
        "x": "4, 32, 16, 32, 32",
    },
    "benchmarks/realistic/conv1d_dilated_strided.py": {
        "doc": "nn.Conv1d(32, 64, 3, stride 2, dilation 4) on (64, 32, 131072) signals (1 GiB).",
        "layer": "Conv1d",
        "args": "32, 64, 3, stride=2, dilation=4",
        "x": "64, 32, 131072",
    },
    "benchmarks/realistic/conv1d_large_signal.py": {
        "doc": "nn.Conv1d(32, 32, 3, padding 1) on (128, 32, 1048576) signals: a 16 GiB input.",
        "layer": "Conv1d",
        "args": "32, 32, 3, padding=1",
        "x": "128, 32, 1048576",
    },
    "benchmarks/realistic/conv2d_3x3_wide_images.py": {
        "doc": "nn.Conv2d(16, 32, 3, padding 1) on (64, 16, 512, 512) images (1 GiB).",
        "layer": "Conv2d",
        "args": "16, 32, 3, padding=1",
        "x": "64, 16, 512, 512",
    },
    "benchmarks/realistic/conv2d_depthwise_3x3.py": {
        "doc": ("Depthwise nn.Conv2d(128, 128, 3, padding 1, groups 128) on (32, 128, 256, "
                "256) (1 GiB)."),
        "layer": "Conv2d",
        "args": "128, 128, 3, padding=1, groups=128",
        "x": "32, 128, 256, 256",
    },
    "benchmarks/realistic/conv2d_dilated_d2.py": {
        "doc": "nn.Conv2d(32, 32, 3, padding 2, dilation 2) on (32, 32, 512, 512) (1 GiB).",
        "layer": "Conv2d",
        "args": "32, 32, 3, padding=2, dilation=2",
        "x": "32, 32, 512, 512",
    },
    "benchmarks/realistic/conv3d_3x3x3_volume.py": {
        "doc": "nn.Conv3d(16, 32, 3, padding 1) on (8, 16, 64, 256, 256) volumes (2 GiB).",
        "layer": "Conv3d",
        "args": "16, 32, 3, padding=1",
        "x": "8, 16, 64, 256, 256",
    },
    "benchmarks/realistic/conv3d_grouped_dilated.py": {
        "doc": ("nn.Conv3d(32, 32, 3, padding 2, dilation 2, groups 4) on (8, 32, 64, 128, "
                "128) volumes (1\n"
                "GiB)."),
        "layer": "Conv3d",
        "args": "32, 32, 3, padding=2, dilation=2, groups=4",
        "x": "8, 32, 64, 128, 128",
    },
    "benchmarks/realistic/conv_transpose2d_s2_upsample.py": {
        "doc": ("nn.ConvTranspose2d(64, 32, 4, stride 2, padding 1) on (64, 64, 256, 256) (1 "
                "GiB): out (64,\n"
                "32, 512, 512)."),
        "layer": "ConvTranspose2d",
        "args": "64, 32, 4, stride=2, padding=1",
        "x": "64, 64, 256, 256",
    },
    "benchmarks/realistic/conv_transpose3d_grouped.py": {
        "doc": ("nn.ConvTranspose3d(64, 32, 3, stride 2, padding 1, output_padding 1, groups "
                "4) on (32, 64,\n"
                "32, 64, 64) (1 GiB): out (32, 32, 64, 128, 128) (4 GiB)."),
        "layer": "ConvTranspose3d",
        "args": "64, 32, 3, stride=2, padding=1, output_padding=1, groups=4",
        "x": "32, 64, 32, 64, 64",
    },
    "benchmarks/realistic/conv_transpose3d_s2_volume.py": {
        "doc": ("nn.ConvTranspose3d(32, 16, 3, stride 2, padding 1, output_padding 1) on (16, "
                "32, 32, 128,\n"
                "128) (1 GiB): out (16, 16, 64, 256, 256) (4 GiB)."),
        "layer": "ConvTranspose3d",
        "args": "32, 16, 3, stride=2, padding=1, output_padding=1",
        "x": "16, 32, 32, 128, 128",
    },
    "benchmarks/validation/problems/val_conv1d.py": {
        "doc": ("Conv1d 128 -> 128 channels, kernel 5 (a sequence model's convolution): a "
                "held-out shape."),
        "imports": "import torch\nimport torch.nn as nn",
        "layer": "Conv1d",
        "args": "128, 128, 5, padding=2",
        "x": "32, 128, 2048",
    },
    "benchmarks/validation/problems/val_conv2d_pointwise.py": {
        "doc": ("Conv2d 1x1, 192 -> 384 channels (a pointwise projection): a held-out "
                "convolution shape."),
        "imports": "import torch\nimport torch.nn as nn",
        "layer": "Conv2d",
        "args": "192, 384, 1",
        "x": "32, 192, 28, 28",
    },
    "benchmarks/validation/problems/val_conv2d_s2.py": {
        "doc": ("Conv2d 96 -> 192 channels, 3x3, stride 2 (a downsampling stage): a held-out "
                "convolution\n"
                "shape."),
        "imports": "import torch\nimport torch.nn as nn",
        "layer": "Conv2d",
        "args": "96, 192, 3, stride=2, padding=1",
        "x": "32, 96, 56, 56",
    },
    "benchmarks/validation/problems/val_conv2d_wide.py": {
        "doc": "Conv2d 128 -> 256 channels, 3x3, on small planes: a held-out convolution shape.",
        "imports": "import torch\nimport torch.nn as nn",
        "layer": "Conv2d",
        "args": "128, 256, 3, padding=1",
        "x": "32, 128, 28, 28",
    },
}
