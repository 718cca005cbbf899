"""Optuna's TPE sampler behind ask/tell (`pip install cuda-agent[tuners]`).

Each slot is a categorical parameter. TPE proposes combinations freely; a proposal is mapped to
the nearest unmeasured valid configuration, which is what gets measured, and TPE is told the
measured configuration and its time (the free proposal itself is closed as pruned). So TPE
learns only from real measurements and never wastes one on an invalid combination.

"optuna_warm" is the same search warm-started like the agents: its first trials are the
analytic model's top picks (`prior_rank.WARM_PICKS`), put in with `study.enqueue_trial`, so TPE
measures them first and learns from them as from any trial (issue 34's fair comparison).
"""

from __future__ import annotations

import random

from ..errors import SettingsError
from ..runner.records import Measurement
from ..space.slots import Config
from ..space.space import Space
from .base import Strategy, nearest, register
from .prior_rank import WARM_PICKS, first_of_each_template, model_order, model_pick


@register("optuna")
class OptunaTPE(Strategy):
    adaptive = True

    def __init__(self, space, seed: int = 0, warm: int = 0, sim_constants=None,  # noqa: ANN001
                 **options) -> None:
        super().__init__(space, seed, **options)
        self.warm, self.constants = warm, sim_constants
        self.warm_started = bool(warm)  # (`warm` counts down to 0 at the first ask)
        self._order: list[Config] | None = None  # the model's ranking, for a warm start
        try:
            import optuna
        except ImportError:
            raise SettingsError("strategy optuna needs Optuna: pip install cuda-agent[tuners]") \
                from None
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.optuna = optuna
        self.study = optuna.create_study(direction="minimize",
                                         sampler=optuna.samplers.TPESampler(seed=seed))
        # each slot's values as they occur in the space ("-" included where a template lacks
        # the slot), so that every measured configuration is expressible to TPE
        occurring: dict[str, dict[str, object]] = {s.name: {} for s in space.slots}
        for cfg in space.configs:
            for k, v in cfg.items:
                occurring[k].setdefault(repr(v), v)
        self.dists: dict[str, optuna.distributions.BaseDistribution] = {
            k: optuna.distributions.CategoricalDistribution(list(vals))
            for k, vals in occurring.items()}
        self.values = occurring
        self.rng = random.Random(seed)

    def _model_order(self) -> list[Config]:
        if self._order is None:  # modelled once (the model's time is the strategy's)
            self._order = model_order(self.space, self.constants)
        return self._order

    def template_picks(self) -> list[Config] | None:
        # warm-started like the agents: the model's fastest of each template too
        return first_of_each_template(self.space, self._model_order()) if self.warm else None

    def stage_pick(self, space: Space) -> Config | None:
        return model_pick(space, self.constants) if self.warm_started else None

    def ask(self, n: int) -> list[Config]:
        if self.warm:  # at the first ask
            for cfg in self._model_order()[:self.warm]:
                self.study.enqueue_trial({k: repr(v) for k, v in cfg.items})
            self.warm = 0
        out: list[Config] = []
        for _ in range(n):
            trial = self.study.ask(self.dists)
            self.study.tell(trial, state=self.optuna.trial.TrialState.PRUNED)
            wish = {k: self.values[k][v] for k, v in trial.params.items()}
            near = nearest(self.space, wish, self.proposed | set(out), self.rng)
            if near is None:
                break
            out.append(near)
        self.proposed.update(out)
        return out

    def tell(self, results: list[tuple[Config, Measurement]]) -> None:
        for cfg, m in results:
            self.proposed.add(cfg)
            params = {k: repr(v) for k, v in cfg.items}
            ok = m.ok and m.time_ms is not None
            self.study.add_trial(self.optuna.trial.create_trial(
                params=params, distributions=self.dists, value=m.time_ms if ok else None,
                state=self.optuna.trial.TrialState.COMPLETE if ok else
                self.optuna.trial.TrialState.FAIL))


@register("optuna_warm")
class OptunaTPEWarm(OptunaTPE):
    """Optuna's TPE, its first trials the analytic model's top picks."""

    def __init__(self, space, seed: int = 0, **options) -> None:  # noqa: ANN001
        options.setdefault("warm", WARM_PICKS)
        super().__init__(space, seed, **options)
