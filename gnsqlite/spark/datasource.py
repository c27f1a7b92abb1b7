"""The ``nsq`` format: the :class:`NSQDataSource` Spark instantiates from options.

Options are validated when Spark builds the data source and again when it
asks for a reader or writer, so a bad option fails the query at start with
a :class:`~gnsqlite.errors.ConfigError` naming it. Nothing here connects.
The sink's and each source mode's modules are imported when first asked for:
the Python process Spark starts for a query's source imports this module
first, before the source subscribes, so what it does not need is left out.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from .arrow_rows import SCHEMA
from .options import parse_sink_options, parse_source_options, split_options

__all__ = ["NSQDataSource"]


class NSQDataSource(DataSource):
    """NSQ topics as a Spark streaming source and a batch/streaming sink (format ``nsq``)."""

    def __init__(self, options: Any) -> None:
        super().__init__(options)
        split_options(dict(options), None)  # unknown keys fail now, on either side

    @classmethod
    def name(cls) -> str:
        """The format name: ``spark.readStream.format("nsq")``."""
        return "nsq"

    def schema(self) -> str:
        """The source's columns: id, body, timestamp, attempts, topic, nsqd."""
        return SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """The streaming source (write-ahead-logged with ``walLocation``); validates the options."""
        options = parse_source_options(dict(self.options))
        if options.read_on == "executors":
            from .executor_source import NSQExecutorStreamReader

            return NSQExecutorStreamReader(options)
        if options.wal_location is not None:
            from .wal_source import NSQWalStreamReader

            return NSQWalStreamReader(options)
        from .source import NSQStreamReader

        return NSQStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """The batch sink; validates the writing options and the input columns."""
        from .sink import NSQWriter, check_sink_schema  # not imported by a source's process

        options = parse_sink_options(dict(self.options))
        check_sink_schema(schema, options)
        return NSQWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """The streaming sink; validates the writing options and the input columns."""
        from .sink import NSQStreamWriter, check_sink_schema

        options = parse_sink_options(dict(self.options))
        check_sink_schema(schema, options)
        return NSQStreamWriter(options)
