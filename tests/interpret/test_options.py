"""`python -m jcaps.interpret --help` answers without importing JAX, and the names and defaults it
lists (`jcaps.interpret.options`) are those of the tables the explaining code runs."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from jcaps import interpret
from jcaps.attribution.methods import COPIES_PER_CALL, Flag
from jcaps.interpret import explain, options
from jcaps.interpret.hooks import MODEL_HOOKS, TOKEN_REMOVALS

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
    defaults = explain.Options().settings()
    for flag in ("ig_steps", "smoothgrad_samples", "shap_samples", "shapley_permutations", "lime_samples", "removal"):
        assert flag_help[flag].endswith(f"(default: '{defaults[flag]}')"), flag
    assert defaults["ig_chunk"] is None and "(default: the model's;" in flag_help["ig_chunk"]
    assert f"<{'|'.join(name for name, _ in TOKEN_REMOVALS)}>" in flag_help["removal"]


def test_the_names_read_without_jax_are_those_of_the_tables():
    assert options.REMOVALS == tuple(name for name, _ in TOKEN_REMOVALS)
    assert {explanation.native for explanation in MODEL_HOOKS.values()} - {None} == set(options.NATIVE_METHODS)
    assert explain.Options is options.Options


def test_a_table_that_differs_from_its_listed_names_stops_the_import():
    with pytest.raises(ImportError, match="lime, random but jcaps.interpret.options lists random, lime"):
        options.check_names("REMOVALS", ("lime", "random"), ("random", "lime"), "jcaps.interpret.options")


def test_the_settings_are_the_flags_of_the_table_with_their_methods_defaults():
    flags = options.method_flags()
    assert flags["ig_steps"].methods == ("integrated_gradients",) and flags["ig_steps"].default == 50
    assert flags["sampling_chunk"].methods == ("kernel_shap", "shapley_sampling", "lime")
    settings = options.Options(ig_steps=8, lime_samples=16).settings()
    assert settings["ig_steps"] == 8 and settings["lime_samples"] == 16 and settings["shap_samples"] == 256
    assert set(settings) == set(flags) | {"removal", "k1", "k2"}
    assert options.Options(ig_steps=8).ig_steps == 8 and options.Options().ig_chunk is None
    assert options.Options(ig_steps=8) == options.Options(ig_steps=8) != options.Options()
    assert hash(options.Options(ig_steps=8)) == hash(options.Options(ig_steps=8))  # a static argument of jit
    with pytest.raises(TypeError, match="no method has a setting 'ig_step'"):
        options.Options(ig_step=8)


def test_a_flag_two_methods_declare_differently_is_refused():
    table = {"integrated_gradients": interpret.METHODS["integrated_gradients"],
             "other": interpret.Method(function=interpret.random, flags={"ig_chunk": Flag(COPIES_PER_CALL, "else")})}
    with pytest.raises(ValueError, match="flag 'ig_chunk': other declares it otherwise than integrated_gradients"):
        options.method_flags(table)


def test_a_flag_of_no_option_of_its_method_is_refused():
    with pytest.raises(ValueError, match="flags: 'n' sets 'n_steps', which is not an option of random"):
        interpret.Method(function=interpret.random, flags={"n": Flag("n_steps", "steps")})


def test_the_copies_a_call_of_each_method_scale_with_the_rows():
    settings = options.Options(ig_chunk=2, occlusion_chunk=3, sampling_chunk=5)
    model_copies = {name: 7 for name in interpret.METHODS}  # the settings win
    assert settings.of_method("integrated_gradients", 32, model_copies)["max_rows"] == 64
    assert settings.of_method("occlusion", 32)["max_rows"] == 96
    for name, method in interpret.METHODS.items():
        if method.sampling:
            assert settings.of_method(name, 32, model_copies)["max_rows"] == 160
    assert "max_rows" not in settings.of_method("gradient", 32)


def test_unset_copies_a_call_are_the_models_then_the_methods():
    settings = options.Options()
    assert settings.of_method("integrated_gradients", 32, {"integrated_gradients": 5})["max_rows"] == 160
    assert settings.of_method("occlusion", 32, {"integrated_gradients": 5})["max_rows"] == 32 * 4
    assert settings.of_method("lime", 32)["max_rows"] == 32 * interpret.METHODS["lime"].copies_per_call
    for explanation in MODEL_HOOKS.values():
        assert set(dict(explanation.copies_per_call)) <= {
            name for name, method in interpret.METHODS.items() if method.copies_per_call is not None}
        assert all(isinstance(copies, int) and copies >= 1 for _, copies in explanation.copies_per_call)
