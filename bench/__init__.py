"""`make bench`: the project's speed figures, measured against the simulated lab.

`python -m bench` (see docs/benchmarks.md) writes bench/results/<date>.json and the generated
results section of docs/benchmarks.md. `bench/gpu.sh` is the separate script for a real GPU machine.
"""
