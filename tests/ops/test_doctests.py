"""The `Example:` blocks of the ops docstrings run as doctests, and every public op has one."""

import doctest
import importlib
import inspect
import pkgutil

import pytest

import jcaps.ops

MODULES = ["jcaps.ops"] + [f"jcaps.ops.{info.name}" for info in pkgutil.iter_modules(jcaps.ops.__path__)]


@pytest.mark.parametrize("module_name", MODULES)
def test_docstring_examples_pass(module_name):
    module = importlib.import_module(module_name)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in doctest.DocTestFinder().find(module):
        runner.run(test)
    results = runner.summarize(verbose=False)
    assert results.failed == 0, f"{results.failed} of {results.attempted} examples of {module_name} failed (above)"


@pytest.mark.parametrize("name", [name for name in jcaps.ops.__all__ if inspect.isfunction(getattr(jcaps.ops, name))])
def test_public_op_has_an_example(name):
    docstring = inspect.getdoc(getattr(jcaps.ops, name))
    assert "Example:" in docstring and ">>>" in docstring, f"jcaps.ops.{name} has no Example: block"
