"""Sphinx configuration of jcaps' documentation: MyST Markdown pages, the API reference from the
docstrings (autodoc + autosummary, Google style through napoleon), equations through MathJax.

    sphinx-build -W --keep-going -b html docs OUT      # as .ci/run builds it
"""

from __future__ import annotations

import os
import shutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "docs", "_ext"))
# Importing jcaps needs no accelerator; the CPU keeps the build the same on every machine.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

project = "jcaps"
author = "the jcaps authors"
copyright = "the jcaps authors"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "markdown_docstrings",
    "command_help",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "pdoc", "README.md"]

myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3

# The API pages are generated anew on every build (docs/_api, not tracked), so that a module
# renamed or removed leaves no page behind.
shutil.rmtree(os.path.join(ROOT, "docs", "_api"), ignore_errors=True)
autosummary_generate = True
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
# Attributes: sections as :ivar: fields, so that a dataclass field is not described twice.
napoleon_use_ivar = True
# Returns: sections name each value, as Args: do.
napoleon_custom_sections = [("Returns", "params_style")]

html_theme = "furo"
html_title = "jcaps"
