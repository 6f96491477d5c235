"""
ApiVersions: derived from whatever handlers are registered.
"""

from kafkatwist.handler import Handler, HandlerPlugin
from kafkatwist.protocol.apis import API_VERSIONS, responseType
from kafkatwist.protocol.entities import NO_THROTTLE, make, nested
from kafkatwist.errors import ErrorCode


class ApiVersionsHandler(Handler):
    apiKey = API_VERSIONS
    minVersion = 0
    maxVersion = 3

    def handle(self, context, request):
        cls = responseType(self.apiKey, context.apiVersion)
        ApiVersion = nested(cls, "ApiVersion")
        keys = tuple(
            ApiVersion(api_key=key, min_version=lo, max_version=hi)
            for key, (lo, hi) in sorted(self.broker.supportedVersions().items())
        )
        return make(
            cls,
            error_code=ErrorCode.none,
            api_keys=keys,
            throttle_time=NO_THROTTLE,
            supported_features=(),
            finalized_features_epoch=-1,
            finalized_features=(),
            zk_migration_ready=False,
        )


apiVersions = HandlerPlugin("builtin.api_versions", API_VERSIONS, ApiVersionsHandler, priority=0)
