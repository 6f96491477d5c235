"""
The base class of request handler plugins, at the path drop-in plugins
written before it moved import it from; it lives in
L{kafkatwist.plugins.handler}.
"""

from kafkatwist.plugins.handler import Handler, HandlerPlugin

__all__ = ["Handler", "HandlerPlugin"]
