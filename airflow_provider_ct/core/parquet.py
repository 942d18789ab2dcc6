"""How to compress the Parquet files we stage: as the table's properties say.

Staged files become the table's own data and delete files, so they follow
the table's ``write.parquet.compression-codec`` / ``-level`` (and, for delete
files, ``write.delete.parquet.compression-codec`` / ``-level``, which fall back
to the data ones), as Iceberg's Spark writer and PyIceberg do. Iceberg's
default codec is zstd (since 1.4); pyarrow's and Spark's own default is
snappy. Before this module the write job staged snappy files, about twice
the bytes of Spark's ``MERGE`` for the same rows (bench/view_bench.py; the
measurement is in docs/views.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_ct.exceptions import ConfigurationError

DATA_CODEC = "write.parquet.compression-codec"
DATA_LEVEL = "write.parquet.compression-level"
DELETE_CODEC = "write.delete.parquet.compression-codec"
DELETE_LEVEL = "write.delete.parquet.compression-level"
#: Iceberg's default for ``write.parquet.compression-codec``.
DEFAULT_CODEC = "zstd"
#: Codecs Iceberg names that pyarrow and Spark write ("uncompressed" is pyarrow's "none").
CODECS = ("zstd", "snappy", "gzip", "lz4", "brotli", "uncompressed")


@dataclass(frozen=True)
class ParquetCodec:
    """One codec, spelled as Iceberg spells it, and its level (None: the codec's default)."""

    name: str
    level: int | None = None

    def arrow_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``pyarrow.parquet.write_table``."""
        name = "none" if self.name == "uncompressed" else self.name
        return {"compression": name, "compression_level": self.level}


def parquet_codec(properties: Mapping[str, str], *, deletes: bool = False) -> ParquetCodec:
    """The codec of a table's data files (``deletes``: of its delete files).

    Raises :class:`~airflow_provider_ct.exceptions.ConfigurationError` naming
    the property when the codec or the level is not one we can write.
    """
    codec_key, level_key = (DELETE_CODEC, DELETE_LEVEL) if deletes else (DATA_CODEC, DATA_LEVEL)
    codec = properties.get(codec_key)
    if codec is None:
        codec_key, codec = DATA_CODEC, properties.get(DATA_CODEC, DEFAULT_CODEC)
    level = properties.get(level_key)
    if level is None and level_key == DELETE_LEVEL:
        level_key, level = DATA_LEVEL, properties.get(DATA_LEVEL)
    name = codec.strip().lower()
    if name not in CODECS:
        raise ConfigurationError(
            f"table property {codec_key}={codec!r}: not a Parquet codec we can write "
            f"(one of {', '.join(CODECS)})"
        )
    if level is None or level == "":
        return ParquetCodec(name)
    try:
        return ParquetCodec(name, int(level))
    except ValueError:
        raise ConfigurationError(f"table property {level_key}={level!r}: not an integer") from None
