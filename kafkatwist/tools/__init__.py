"""
Offline tools for operators, as C{python -m kafkatwist.tools COMMAND}:

  dump-log          print segments, indexes and snapshots (like kafka-dump-log.sh)
  check-data-dir    check a data directory without starting the broker
  describe-config   print the effective configuration (like kafka-configs.sh --describe --all)

None of them needs a running broker, and none writes to a data directory.
"""
