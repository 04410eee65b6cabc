"""`python -m studies.icapsnet_global.train ...`: `jcaps train` with the study's model,
`icapsnet_short_study` (variants.py), in the model table."""

from jcaps import cli
from jcaps.train_command import main
from studies.icapsnet_global.variants import register

if __name__ == "__main__":
    register()
    cli.run(main)
