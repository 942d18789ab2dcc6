"""Writing a staged batch's files: one writer for views, continual tasks and collections.

Every file a batch stages goes through the table's own ``FileIO`` (so it
reaches wherever the catalog says the table lives, with the catalog's
credentials) and is compressed with the table's codecs
(``write.parquet.compression-codec``, ``write.delete.parquet.*``), and
comes back as the :class:`~airflow_provider_ct.core.staging.StagedFile` a
manifest lists. Files Spark wrote itself are described with :meth:`describe`.
"""

from __future__ import annotations

import posixpath
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_ct.core.deletes import write_position_deletes
from airflow_provider_ct.core.parquet import parquet_codec
from airflow_provider_ct.core.staging import StagedFile

if TYPE_CHECKING:
    from pyiceberg.table import Table


class BatchFiles:
    """The files of one batch attempt under ``folder`` (inside the table's location)."""

    def __init__(self, table: Table, folder: str) -> None:
        self.table = table
        self.folder = folder.rstrip("/")

    def _path(self, prefix: str) -> str:
        return posixpath.join(self.folder, f"{prefix}-{uuid.uuid4().hex}.parquet")

    def write_rows(self, data: pa.Table, *, prefix: str = "part") -> StagedFile:
        """``data`` as one new Parquet data file."""
        path = self._path(prefix)
        with self.table.io.new_output(path).create(overwrite=False) as out:
            pq.write_table(data, out, **parquet_codec(self.table.properties).arrow_kwargs())
        return StagedFile(path, data.num_rows, len(self.table.io.new_input(path)))

    def write_deletes(
        self, positions: Sequence[tuple[str, int]], *, prefix: str = "deletes"
    ) -> StagedFile:
        """A position-delete file retracting ``positions`` (``(data file, row)`` pairs)."""
        path = self._path(prefix)
        codec = parquet_codec(self.table.properties, deletes=True)
        size = write_position_deletes(self.table.io, path, positions, codec)
        return StagedFile(path, len(positions), size)

    def describe(self, path: str) -> StagedFile:
        """A Parquet file another writer (Spark) put into the batch's folder."""
        input_file = self.table.io.new_input(path)
        with input_file.open() as stream:
            rows = pq.read_metadata(stream).num_rows
        return StagedFile(path=path, record_count=rows, size_bytes=len(input_file))
