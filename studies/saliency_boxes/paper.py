"""The paper the study compares with: Ismail et al. 2019, Table 1, per variant one cell per box
of `TABLE_BOXES`. The study's table shows them beside jcaps'."""

TABLE_BOXES = ("earlier", "middle", "latter", "mixed", "three_earlier", "three_middle")
PAPER = {  # Ismail et al. 2019, Table 1: WJac / Euclidean / accuracy %
    "lstm": ("0.000 / 1.006 / 53.4", "0.000 / 1.003 / 98.6", "0.019 / 0.985 / 100", "0.000 / 1.003 / 49.1",
             "0.000 / 1.003 / 52.2", "0.000 / 1.004 / 51.8"),
    "lstm_self_attention": ("0.048 / 0.973 / 100", "0.048 / 0.963 / 100", "0.045 / 0.973 / 100",
                            "0.060 / 0.953 / 100", "0.025 / 0.985 / 100", "0.075 / 0.939 / 99.9"),
    "input_cell": ("0.103 / 0.914 / 100", "0.124 / 0.891 / 100", "0.110 / 0.903 / 100", "0.104 / 0.912 / 77.6",
                   "0.108 / 0.903 / 100", "0.106 / 0.905 / 100"),
}
