"""Flags a test passes to a command that reads one of the test's own workdirs."""

from __future__ import annotations

import json
import os


def own_data_cache(workdir) -> str:
    """`--config.data.cache_dir=` the workdir's own `data.cache_dir`. The commands never take it
    from the workdir (a workdir is data, not a setting to trust); a test that trusts its own
    passes it, so the command finds the data prepared in training, and writes nothing outside
    the test's folders."""
    with open(os.path.join(workdir, "config.json"), encoding="utf-8") as f:
        return f"--config.data.cache_dir={json.load(f)['data']['cache_dir']}"
