"""
ApiVersions: derived from whatever handlers are registered.
"""

from kafkatwist.plugins.handler import Handler, HandlerPlugin
from kafkatwist.protocol.apis import API_VERSIONS, responseType
from kafkatwist.protocol.codec import EncodedResponse, encodeBody
from kafkatwist.protocol.errorcounts import errorCounts
from kafkatwist.protocol.entities import NO_THROTTLE, make, nested
from kafkatwist.errors import ErrorCode


class ApiVersionsHandler(Handler):
    apiKey = API_VERSIONS
    minVersion = 0
    maxVersion = 3

    def __init__(self, broker, wrapped=None) -> None:
        super().__init__(broker, wrapped)
        self._encoded: dict[int, EncodedResponse] = {}

    def handle(self, context, request):
        # The answer depends only on the registry, fixed once built: encode
        # it once per version.
        encoded = self._encoded.get(context.apiVersion)
        if encoded is None:
            response = self.response(context.apiVersion)
            encoded = EncodedResponse([encodeBody(response)], errors=errorCounts(response))
            self._encoded[context.apiVersion] = encoded
        return encoded

    #: computed from the registry, in memory: answered on the Processor's
    #: thread, with no hand-off to a request handler thread
    handleOnNetworkThread = handle

    def response(self, version: int):
        cls = responseType(self.apiKey, version)
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
