"""
The Kafka wire protocol with no I/O: headers, message schemas (kio, Kafka's
own schemas generated), record batch headers, error codes.  Nothing in this
package imports Twisted.
"""
