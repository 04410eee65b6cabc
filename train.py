"""`python train.py ...` in a checkout: the same command as `jcaps train ...` (jcaps/train_command.py)."""

if __name__ == "jcaps.train":
    # A script run beside a clone folder named jcaps imports that folder as the package (as a
    # namespace package, it resolves `jcaps.train` to this file): say so instead of failing later.
    import os

    raise ImportError(f"jcaps is imported from the checkout folder {os.path.dirname(os.path.abspath(__file__))}, "
                      "not the package inside it: run the script from another folder, or rename the checkout")

from jcaps import cli
from jcaps.train_command import main

if __name__ == "__main__":
    cli.run(main)
