"""
The partition log: Kafka's segmented log on disk (L{LogManager}) and an
in-memory log with the same semantics (L{MemoryLogManager}).

Modules:

  - L{kafkatwist.log.records}: L{AppendInfo}, L{ReadInfo}, L{TopicInfo};
  - L{kafkatwist.log.config}: topic configs, validation, effective values;
  - L{kafkatwist.log.partition}: one partition's log over segments;
  - L{kafkatwist.log.segment}, L{kafkatwist.log.index}: segments and their
    offset and time indexes;
  - L{kafkatwist.log.filelog}, L{kafkatwist.log.manager}: on disk, with
    recovery, checkpoints and topic metadata;
  - L{kafkatwist.log.handles}, L{kafkatwist.log.region}: descriptor policy
    and the file regions reads hand out;
  - L{kafkatwist.log.memory}: in memory.
"""

from kafkatwist.log.config import ConfigEntry, ConfigSource, LogConfig
from kafkatwist.log.manager import LogManager
from kafkatwist.log.memory import MemoryLogManager
from kafkatwist.log.records import AppendInfo, ReadInfo, TopicInfo

__all__ = [
    "AppendInfo",
    "ConfigEntry",
    "ConfigSource",
    "LogConfig",
    "LogManager",
    "MemoryLogManager",
    "ReadInfo",
    "TopicInfo",
]
