"""
The assembly of one broker process, above the network and the handler
plugins: the L{Broker<kafkatwist.server.broker.Broker>} container, the
handler registry and plugin discovery, what applies each dynamic broker
config, advertised-address warnings, systemd notification.
L{kafkatwist.service} builds and starts it.
"""
