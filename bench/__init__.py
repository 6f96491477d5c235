"""kafkatwist benchmarks: C{python -m bench [SUITE] [ARGS]} (see C{bench/__main__.py})."""
