"""
Kafka's SocketServer on Twisted.

  acceptor.Acceptor      main reactor: accept, quotas, round-robin hand-off
  processor.Processor    a thread with its own EPollReactor; owns connections
  connection.KafkaConnection
                         framing, mute/unmute, response ordering, idle expiry
  transport              PLAINTEXT (direct writes, sendfile) vs SSL layers
  channel.RequestChannel bounded request queue + MemoryPool
  handlers.HandlerPool   threads that run request handler plugins
  server.SocketServer    builds and stops all of the above
"""
