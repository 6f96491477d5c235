"""
The C{kafkatwist} data source: what C{spark.dataSource.register} takes.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceStreamReader
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from kafkatwist_spark.options import (
    ConfigurationError,
    OptionError,
    oneLineErrors,
    parseSinkOptions,
    parseSourceOptions,
)
from kafkatwist_spark.reader import KafkaBatchReader, KafkaStreamReader, freezeWorkerHeap
from kafkatwist_spark.writer import (
    KafkaBatchWriter,
    KafkaStreamWriter,
    checkSinkSchema,
    recoverStreamJob,
)

__all__ = ["KafkaTwistDataSource", "kafkaSchema"]


def kafkaSchema(includeHeaders: bool = False) -> StructType:
    """
    The schema of Spark's Kafka source, field for field.
    """
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if includeHeaders:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    return StructType(fields)


class KafkaTwistDataSource(DataSource):
    """
    Read and write Kafka topics over the wire protocol, with the options and
    schema of Spark's C{format("kafka")}:

        spark.dataSource.register(KafkaTwistDataSource)
        df = (spark.read.format("kafkatwist")
              .option("kafka.bootstrap.servers", "host:9092")
              .option("subscribe", "events")
              .load())

    Options are validated as soon as Spark asks for the schema (at
    C{load()}); the checks that depend on whether the query is a batch or a
    stream run when Spark creates the reader (at the first action, or when
    the stream starts).
    """

    @classmethod
    def name(cls) -> str:
        return "kafkatwist"

    @oneLineErrors
    def schema(self) -> StructType:
        # Called in a Python worker of Spark's own (as reader() is): see
        # freezeWorkerHeap.
        freezeWorkerHeap()
        # Both modes' rules that hold either way: anything that would fail
        # as a batch *and* as a stream fails here, at load().
        config = self._sourceConfig(streaming=None)
        return kafkaSchema(config.includeHeaders)

    def _sourceConfig(self, streaming: bool | None):
        if streaming is not None:
            return parseSourceOptions(self.options, streaming=streaming)
        try:
            return parseSourceOptions(self.options, streaming=False)
        except OptionError as batchError:
            try:
                parseSourceOptions(self.options, streaming=True)
            except OptionError:
                raise batchError from None
            # Valid as a stream only (e.g. startingOffsets=latest): it is
            # one, or the batch reader will say what is wrong.
            return parseSourceOptions(self.options, streaming=True)

    def _checkSchema(self, schema: StructType, includeHeaders: bool) -> None:
        expected = kafkaSchema(includeHeaders)
        if schema is not None and [(f.name, f.dataType) for f in schema.fields] != [
            (f.name, f.dataType) for f in expected.fields
        ]:
            raise OptionError(
                "schema",
                "the kafkatwist source has a fixed schema and can not be read with a custom "
                f"one: expected {expected.simpleString()}, got {schema.simpleString()}",
            )

    @oneLineErrors
    def reader(self, schema: StructType) -> KafkaBatchReader:
        freezeWorkerHeap()
        config = self._sourceConfig(streaming=False)
        self._checkSchema(schema, config.includeHeaders)
        return KafkaBatchReader(config, schema)

    @oneLineErrors
    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        try:
            config = self._sourceConfig(streaming=True)
            self._checkSchema(schema, config.includeHeaders)
        except ConfigurationError as e:
            # pyspark's stream runner (4.3) calls the reader's stop() in a
            # finally around this call: an exception raised here reaches
            # Spark as "UnboundLocalError: ... 'reader'", the real one lost
            # (with the traceback hidden, nothing else is shown).  A reader
            # that raises at its first call gives Spark the real error.
            return _RefusedStreamReader(e)
        return KafkaStreamReader(config, schema)

    @oneLineErrors
    def writer(self, schema: StructType, overwrite: bool) -> KafkaBatchWriter:
        config = parseSinkOptions(self.options)
        if overwrite:
            raise OptionError(
                "mode",
                "save mode 'overwrite' is not allowed for kafkatwist: records can only be "
                "appended to a topic; use mode('append')",
            )
        return KafkaBatchWriter(config, checkSinkSchema(schema, config))

    @oneLineErrors
    def streamWriter(self, schema: StructType, overwrite: bool) -> KafkaStreamWriter:
        # Complete output mode asks for "overwrite"; a topic can only be
        # appended to, so each trigger's full result is appended, exactly as
        # Spark's Kafka sink does.
        config = parseSinkOptions(self.options)
        columns = checkSinkSchema(schema, config)
        return KafkaStreamWriter(config, columns, recoverStreamJob(config))


class _RefusedStreamReader(DataSourceStreamReader):
    """
    The stream reader of a query whose options are wrong for a stream: its
    first call raises the L{ConfigurationError} that refused it.
    """

    def __init__(self, error: ConfigurationError) -> None:
        self.error = error

    @oneLineErrors
    def initialOffset(self) -> dict:
        raise self.error

    @oneLineErrors
    def latestOffset(self) -> dict:
        raise self.error

    @oneLineErrors
    def partitions(self, start: dict, end: dict):
        raise self.error

    def stop(self) -> None:
        pass
