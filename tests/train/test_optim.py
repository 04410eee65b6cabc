"""Learning-rate schedules: valid for any number of steps, including the 1-step state built to
load a workdir."""

import numpy as np
import pytest

from jcaps.train.config import base_config
from jcaps.train.optim import learning_rate_schedule


@pytest.mark.parametrize("kind", ["constant", "cosine", "linear", "warmup_cosine", "steps"])
@pytest.mark.parametrize("num_steps", [1, 2, 1000])
def test_every_schedule_is_defined_for_any_length(kind, num_steps):
    train = base_config().train
    train.schedule, train.learning_rate, train.warmup_fraction = kind, 1e-3, 0.05
    train.decay_boundaries = (0.5,)
    schedule = learning_rate_schedule(train, num_steps)
    values = np.array([float(schedule(step)) for step in range(num_steps + 1)])
    assert np.all(np.isfinite(values)) and np.all(values >= 0) and values.max() <= 1e-3 * (1 + 1e-6)


def test_warmup_cosine_rises_to_the_peak_then_decays():
    train = base_config().train
    train.schedule, train.learning_rate, train.warmup_fraction = "warmup_cosine", 3e-3, 0.1
    schedule = learning_rate_schedule(train, 100)
    assert float(schedule(0)) == 0.0
    assert float(schedule(10)) == pytest.approx(3e-3)
    assert float(schedule(55)) == pytest.approx(1.5e-3, rel=1e-3)
    assert float(schedule(100)) == pytest.approx(0.0, abs=1e-9)
