"""`--precision auto` on a GPU: a default `tune()` of a convolution chain holds its kernels to
the precision a fresh process's torch gives the convolution (TF32, `cudnn.allow_tf32`), and a
matrix product's to strict fp32. The library route is measured right after the untuned default
and verified at TF32; the tensor-core kernels with one TF32 product per tile verify too; the
matched baselines coincide with the defaults (one measurement serves both). Times are printed;
the figures that count are the realistic suite's."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuda_agent.tuner import tune

pytestmark = pytest.mark.gpu

PROBLEMS = Path(__file__).resolve().parents[2] / "benchmarks" / "problems"


def _summary(r) -> str:  # noqa: ANN001
    b = r.baselines
    rows = [f"{t.index}:{t.template}{'*' if t.library else ''}="
            + (f"{t.measurement.time_ms:.4f}" if t.measurement.ok else t.measurement.error_kind)
            for t in r.trials]
    return (f"{r.problem.name} [{r.settings.precision}]: best {r.best.measurement.time_ms:.4f} ms"
            f" ({r.best.template}), eager {b.eager_ms}, compile {b.compile_ms}; " + " ".join(rows))


def test_a_default_tune_of_a_convolution_runs_it_on_tf32_and_verifies(tmp_path):
    r = tune(PROBLEMS / "fused_conv2d_relu_scale.py", out=tmp_path / "o", budget=10, batch=4,
             strategy="prior", store=str(tmp_path / "s.db"))
    print(_summary(r))
    assert r.settings.precision == "tf32:conv" and r.settings.precision_asked == "auto"
    assert r.best is not None and r.best.measurement.verified
    lib = [t for t in r.trials if t.library]
    assert r.trials[1].library and lib[0].measurement.ok, lib[0].measurement.error_msg
    tc = [t for t in r.trials if t.template == "gemm_tc" and t.measurement.ok]
    assert tc, "a tensor-core kernel with one TF32 product verified"
    assert r.space.render(tc[0].config).fact("mma") == "tf32"
    # the contract is torch's default for a convolution: the matched figures are the defaults'
    assert r.baselines.settings["same"] is True
    assert r.baselines.eager_matched_ms == r.baselines.eager_ms
    report = (tmp_path / "o" / "report.json").read_text()
    assert '"precision_asked": "auto"' in report and '"headline"' in report


def test_a_default_tune_of_a_matrix_product_stays_strict(tmp_path):
    r = tune(PROBLEMS / "fused_linear_relu.py", budget=6, batch=3, strategy="prior",
             store=str(tmp_path / "s.db"), baselines=False)
    print(_summary(r))
    assert r.settings.precision == "tf32:conv"
    assert r.best is not None and r.best.measurement.verified
    for t in r.trials:
        if t.template == "gemm_tc":
            assert r.space.render(t.config).fact("mma") == "tf32x3"
        if t.library:
            lib = next(la.library for la in r.space.render(t.config).launches if la.library)
            assert not lib.get("tf32")
