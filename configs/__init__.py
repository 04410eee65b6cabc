"""The shipped configs, one file per model and dataset; installed as the package `jcaps.configs`, so
that `jcaps train --config NAME[:ARG]` finds `NAME.py` here. Each is loaded from its file by
`--config`, never imported by name."""
