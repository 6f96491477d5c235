"""
Client quotas (Kafka's C{ClientQuotaManager}): the quotas set with
AlterClientQuotas (L{kafkatwist.quota.store}), the byte rates and handler
time measured over sampled windows (L{kafkatwist.quota.rate}), and the
throttle a client over its quota gets (L{kafkatwist.quota.manager}).
"""
