"""What the speed suite (`benchmarks/`) and the studies (`studies/`) write their results with:
the run's provenance (`provenance`), the results file (`results`) and the timers (`timing`).
Both import it; it imports neither, and `jcaps` imports none of the three.
"""
