"""
Authentication and authorization: SASL mechanisms (PLAIN, SCRAM-SHA-256,
SCRAM-SHA-512) as sans-io server state machines, the SCRAM credential store,
Kafka's ACL model and the built-in authorizer.

Nothing here does network I/O; the network layer feeds tokens in and writes
what comes out.  The stores write their files from whichever handler thread
changes them (never a reactor thread).
"""
