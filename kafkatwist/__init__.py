"""
kafkatwist: a broker that speaks the Apache Kafka wire protocol, on Twisted.
"""

__version__ = "0.1.0"
