"""What tests/conftest.py promises every test: nothing written outside the session's folders."""

from __future__ import annotations

import os
from pathlib import Path

import jax

from jcaps.train.config import compilation_cache_dir


def test_the_compilation_cache_is_the_sessions_not_the_users(tmp_path_factory):
    """`train.compilation_cache = "auto"`, every config's and command's default, resolves under
    the session's temporary folder, for the runs in this process and the commands it starts
    (which inherit XDG_CACHE_HOME); so does the cache JAX was pointed at, if a run here did."""
    session = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        session = session.parent  # the workers' folders share the session's
    cache = Path(compilation_cache_dir("auto"))
    assert cache.is_relative_to(session), cache
    assert not cache.is_relative_to(Path("~/.cache").expanduser())
    assert Path(os.environ["XDG_CACHE_HOME"]).is_relative_to(session)
    configured = jax.config.jax_compilation_cache_dir
    assert configured is None or Path(configured).is_relative_to(session), configured
