"""Every model takes `train` keyword-only, in `__call__` and in any public method that has it."""

import inspect

import pytest

from jcaps.train.families import MODELS


def _methods_with_train(module):
    for name, method in inspect.getmembers(module, inspect.isfunction):
        if (name == "__call__" or not name.startswith("_")) and "train" in inspect.signature(method).parameters:
            yield name, inspect.signature(method).parameters["train"]


@pytest.mark.parametrize("family", sorted(MODELS))
def test_call_takes_train_keyword_only(family):
    parameters = inspect.signature(MODELS[family].module.__call__).parameters
    assert "train" in parameters, f"{family}: __call__ has no train"
    assert parameters["train"].kind is inspect.Parameter.KEYWORD_ONLY, f"{family}: train is positional in __call__"


@pytest.mark.parametrize("family", sorted(MODELS))
def test_public_methods_take_train_keyword_only(family):
    positional = [
        name
        for name, train in _methods_with_train(MODELS[family].module)
        if train.kind is not inspect.Parameter.KEYWORD_ONLY
    ]
    assert not positional, f"{family}: train is positional in {positional}"
