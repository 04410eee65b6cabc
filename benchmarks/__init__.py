"""The speed suite: compile times, throughput and timings of jcaps against NumPy, PyTorch and
Captum, each script run as a module from the repository root (`python -m benchmarks.run_all`),
its results under benchmarks/results/. The studies are in `studies/`; what both write their
results with is `recording`.
"""
