"""The benchmarks (`python -m app.devkit.bench`): scripts that print tables and draw graphs;
speed goals live here, never in timed tests."""
