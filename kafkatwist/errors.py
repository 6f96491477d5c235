"""
Kafka error codes as exceptions, so storage and coordinator code can refuse
with the code a client understands.
"""

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "KafkaError"]


class KafkaError(Exception):
    """
    A failure that maps to one Kafka error code.

    @ivar code: the L{ErrorCode}.
    @ivar message: human text (sent back where the API has an error message).
    """

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        self.code = ErrorCode(code)
        self.message = message
        super().__init__(f"{self.code.name}: {message}" if message else self.code.name)
