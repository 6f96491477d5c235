"""
The cluster's control plane on ZooKeeper (C{zookeeper.connect}): broker
registration, the controller, and the metadata cache brokers answer from.
Absent without C{zookeeper.connect}: one broker is then the whole cluster.
"""
