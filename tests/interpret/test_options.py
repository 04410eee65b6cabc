"""`python -m jcaps.interpret --help` answers without importing JAX, and the names and defaults it
lists (`jcaps.interpret.options`) are those of the tables the explaining code runs."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys

import pytest

from jcaps import interpret
from jcaps.attribution import names
from jcaps.interpret import explain, options
from jcaps.interpret.explanations import EXPLANATIONS, TOKEN_REMOVALS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEAVY_PACKAGES = ("jax", "jaxlib", "flax", "optax", "orbax")


def help_and_imports(*command: str) -> tuple[str, set[str]]:
    """The standard output of `python -X importtime COMMAND --help` and the modules it imported."""
    result = subprocess.run([sys.executable, "-X", "importtime", *command, "--help"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    imported = {line.rsplit("|", 1)[1].strip() for line in result.stderr.splitlines()
                if line.startswith("import time:") and line.count("|") == 2}
    return result.stdout, imported


@pytest.mark.parametrize("command", [("-m", "jcaps.interpret"),
                                     ("-c", "from jcaps.command import main; main()", "interpret")])
def test_help_imports_no_jax(command):
    listing, imported = help_and_imports(*command)
    assert "--methods" in listing
    assert "jcaps.interpret.options" in imported  # the import times were read
    assert not {module for module in imported if module.split(".")[0] in HEAVY_PACKAGES}


def test_help_lists_every_method_and_the_defaults_of_options():
    listing, _ = help_and_imports("-m", "jcaps.interpret")
    flag_help = {m.group(1): m.group(2) for m in re.finditer(r"^  --(\w+): (.*)$", listing, re.MULTILINE)}
    listed = re.search(r"among (.*) and the models' own, (.*)\.", flag_help["methods"])
    assert listed is not None
    assert listed.group(1).split(", ") == list(interpret.METHODS)
    assert listed.group(2).split(", ") == list(explain.NATIVE_METHODS)
    defaults = dataclasses.asdict(explain.Options())
    for flag in ("ig_steps", "smoothgrad_samples", "shap_samples", "shapley_permutations", "lime_samples", "removal"):
        assert flag_help[flag].endswith(f"(default: '{defaults[flag]}')"), flag
    assert defaults["ig_chunk"] is None and "(default: the model's;" in flag_help["ig_chunk"]
    assert f"<{'|'.join(name for name, _ in TOKEN_REMOVALS)}>" in flag_help["removal"]


def test_the_names_read_without_jax_are_those_of_the_tables():
    assert names.METHOD_NAMES == tuple(interpret.METHODS)
    assert options.REMOVALS == tuple(name for name, _ in TOKEN_REMOVALS)
    assert {explanation.native for explanation in EXPLANATIONS.values()} - {None} == set(options.NATIVE_METHODS)
    assert explain.Options is options.Options
    assert set(options.SAMPLING_METHODS) <= set(interpret.METHODS)
    for method, option in options.METHOD_OPTIONS.values():
        assert option in interpret.METHODS[method].options, (method, option)


def test_a_table_that_differs_from_its_listed_names_stops_the_import():
    with pytest.raises(ImportError, match="lime, random but jcaps.attribution.names lists random, lime"):
        names.check_names("METHODS", ("lime", "random"), ("random", "lime"), "jcaps.attribution.names")


def test_the_copies_a_call_of_each_method_scale_with_the_rows():
    settings = options.Options(ig_chunk=2, occlusion_chunk=3, sampling_chunk=5)
    model_copies = {"ig_chunk": 7, "occlusion_chunk": 7, "sampling_chunk": 7}  # the settings win
    assert settings.of_method("integrated_gradients", 32, model_copies)["max_rows"] == 64
    assert settings.of_method("occlusion", 32)["max_rows"] == 96
    for name in options.SAMPLING_METHODS:
        assert settings.of_method(name, 32, model_copies)["max_rows"] == 160
    assert "max_rows" not in settings.of_method("gradient", 32)


def test_unset_copies_a_call_are_the_models_then_the_defaults():
    settings = options.Options()
    assert settings.of_method("integrated_gradients", 32, {"ig_chunk": 5})["max_rows"] == 160
    assert settings.of_method("occlusion", 32, {"ig_chunk": 5})["max_rows"] == 32 * 4
    assert settings.of_method("lime", 32)["max_rows"] == 32 * options.DEFAULT_COPIES_PER_CALL["sampling_chunk"]
    assert set(options.DEFAULT_COPIES_PER_CALL) == set(options.COPIES_PER_CALL)
    for explanation in EXPLANATIONS.values():
        assert set(dict(explanation.copies_per_call)) <= set(options.COPIES_PER_CALL)
        assert all(isinstance(copies, int) and copies >= 1 for _, copies in explanation.copies_per_call)
