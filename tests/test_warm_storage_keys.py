"""The warm driver's storage keys: set as Hadoop settings of each job's session, one set per driver.

``spark.hadoop.*`` only reaches Hadoop when the SparkContext starts, and the
warm driver's start settings are on its JVM's command line, so the S3 keys
come with each job and are set on its session under their Hadoop names
(``tests/test_objectstore_rest.py`` runs this against S3). Hadoop then
caches one filesystem per bucket with the first job's keys: a job with
other keys is refused and the driver retires.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_provider_ct.engine.server import Driver
from airflow_provider_ct.exceptions import ConfigurationError
from airflow_provider_ct.spark.conf import hadoop_session_conf


def test_spark_hadoop_settings_are_spelled_as_hadoop_names_for_a_session() -> None:
    conf = {
        "spark.hadoop.fs.s3a.secret.key": "s",
        "spark.hadoop.fs.s3a.access.key": "a",
        "spark.sql.catalog.ct.credential": "c",
    }
    assert hadoop_session_conf(conf) == {
        "fs.s3a.secret.key": "s",
        "fs.s3a.access.key": "a",
        "spark.sql.catalog.ct.credential": "c",
    }


def test_a_job_with_other_storage_keys_is_refused_and_the_driver_retires(tmp_path: Path) -> None:
    spark: Any = None  # the check never touches Spark
    driver = Driver(tmp_path, spark, {}, idle_timeout=60)
    first = {"fs.s3a.access.key": "a", "fs.s3a.secret.key": "s", "spark.sql.x.password": "p"}
    driver.check_storage_keys(first)
    driver.check_storage_keys({**first, "spark.sql.x.password": "other"})  # not storage keys
    assert driver.begin()
    driver.end()
    with pytest.raises(ConfigurationError, match="other keys") as err:
        driver.check_storage_keys({**first, "fs.s3a.secret.key": "rotated"})
    assert "rotated" not in str(err.value)
    assert not driver.begin()  # stopping: the client starts a fresh driver
