"""The studies: what jcaps' models reach, trained and analysed, one folder each.

    studies/NAME/NAME.py       the study's command (`python -m studies.NAME.NAME ...`)
    studies/NAME/results/      the results files it wrote
    studies/NAME/README.md     its summary table, rendered from those files, and the command again

`training_runs` trains a study's runs; `tables` renders every results table of the pages (the
studies' and the speed suite's) from its file. Each study writes its provenance with
`recording`; the speed suite (`benchmarks/`) imports nothing from here.
"""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
