"""The benchmarks (`python -m app.bench`): scripts that print tables and draw graphs; speed goals
live here, never in timed tests."""
