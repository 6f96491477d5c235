"""
Kafka error codes as exceptions, so storage and coordinator code can refuse
with the code a client understands.
"""

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "KafkaError", "recordValidationError"]


class KafkaError(Exception):
    """
    A failure that maps to one Kafka error code.

    @ivar code: the L{ErrorCode}.
    @ivar message: human text (sent back where the API has an error message).
    @ivar recordErrors: for a record batch refused because of some of its
        records (KIP-467): C{(index of the record in its batch, message)}
        for each, as Produce v8+ answers them.
    """

    def __init__(
        self, code: ErrorCode, message: str | None = None, recordErrors: tuple = ()
    ) -> None:
        self.code = ErrorCode(code)
        self.message = message
        self.recordErrors = tuple(recordErrors)
        super().__init__(f"{self.code.name}: {message}" if message else self.code.name)


def recordValidationError(recordErrors) -> KafkaError:
    """
    The refusal of a batch for some of its records, as Kafka's
    C{LogValidator} words it (C{RecordValidationException}).

    @param recordErrors: C{(code, index of the record in its batch,
        message)}, at least one; INVALID_TIMESTAMP wins over INVALID_RECORD.
    """
    errors = tuple((index, message) for _, index, message in recordErrors)
    if any(code == ErrorCode.invalid_timestamp for code, _, _ in recordErrors):
        return KafkaError(
            ErrorCode.invalid_timestamp,
            "One or more records have been rejected due to invalid timestamp",
            errors,
        )
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
    return KafkaError(
        ErrorCode.invalid_record,
        f"One or more records have been rejected due to {len(errors)} record errors in total, "
        f"and only showing the first three errors at most: [{shown}]",
        errors,
    )
