"""
The transaction coordinator: transactional ids and their transactions,
kept in C{__transaction_state} (see L{kafkatwist.coordinator.transaction.coordinator}).
"""
