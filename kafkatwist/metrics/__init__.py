"""
Broker metrics: per-request statistics and their Prometheus rendering
(L{kafkatwist.metrics.stats}), served over HTTP (L{kafkatwist.server.http}).
"""
