"""
The internal topics the coordinators keep their state in (Kafka's
C{Topic.INTERNAL_TOPICS}): Metadata marks them internal, clients may not
produce to or delete them, and the cluster never removes their logs as
strays.
"""

from kafkatwist.coordinator.formats import OFFSETS_TOPIC
from kafkatwist.coordinator.transaction.formats import TRANSACTION_STATE_TOPIC

__all__ = ["INTERNAL_TOPICS"]

INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})
