"""
ApiVersions bodies, derived from the registered handlers.
"""

from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16


def unsupportedApiVersionsBody(supported: dict[int, tuple[int, int]]):
    """
    The answer to an ApiVersions request of a version we do not serve: error
    UNSUPPORTED_VERSION with our ranges, in the v0 layout (which every later
    layout starts with), so the client can pick a version and retry.
    """
    return ApiVersionsResponseV0(
        error_code=ErrorCode.unsupported_version,
        api_keys=tuple(
            ApiVersionV0(api_key=i16(key), min_version=i16(lo), max_version=i16(hi))
            for key, (lo, hi) in sorted(supported.items())
        ),
    )
