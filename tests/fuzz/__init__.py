"""
A protocol-aware fuzzer for the broker: seeds recorded from real clients and
generated from the schemas, mutated where parsers are fragile (lengths,
varints, counts, nulls, versions, record batches and their compressed
payloads), against a live broker process with an oracle that checks it
stays alive, keeps serving a real client, logs no unhandled traceback and
does not grow without bound.  C{python -m tests.fuzz --help}.
"""
