"""`python train.py ...` in a checkout: the same command as `jcaps train ...` (jcaps/train_command.py)."""

from jcaps import cli
from jcaps.train_command import main

if __name__ == "__main__":
    cli.run(main)
