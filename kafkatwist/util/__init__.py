"""
The low level every other package may use, and that uses none of them
(only L{kafkatwist.interfaces} and L{kafkatwist.errors}): clocks,
serial executors, timer and owner threads, the purgatory of delayed
operations, atomic file writes, the data directory lock, start-up errors,
log throttling, CPU affinity.
"""
