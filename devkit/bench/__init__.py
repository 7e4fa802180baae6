"""The benchmarks (`python -m devkit.bench`): scripts that print tables and draw graphs;
speed goals live here, never in timed tests."""
