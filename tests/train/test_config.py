"""The training config's settings that are parsed rather than read as they are."""

from __future__ import annotations

import re

import pytest

from jcaps.train.config import class_weight_power


@pytest.mark.parametrize(
    "setting, power",
    [("none", None), ("balanced", 1.0), ("sqrt_balanced", 0.5), ("balanced:0.25", 0.25), ("balanced:2", 2.0)],
)
def test_class_weight_settings_name_their_exponent(setting, power):
    assert class_weight_power(setting) == power


@pytest.mark.parametrize("setting", ["", "sqrt", "balanced:", "balanced:x", "balanced:0", "balanced:-1",
                                     "balanced:inf", "balanced:nan", "balanced: 0.5x"])
def test_a_bad_class_weight_setting_names_the_field_and_the_value(setting):
    with pytest.raises(ValueError, match=r"train\.class_weights must be .* not " + re.escape(repr(setting))):
        class_weight_power(setting)
