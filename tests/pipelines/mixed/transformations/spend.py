"""Silver and gold in Python, with SDP's decorators."""

from pyspark import pipelines as dp
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

spark = SparkSession.active()


@dp.materialized_view(comment="spend per customer and region")
def customer_spend() -> DataFrame:
    # spark.sql: maintained as this SQL (incrementally: an aggregate over a join).
    return spark.sql(
        """
        SELECT e.customer_id, c.region, SUM(e.amount) AS spend, COUNT(*) AS n
        FROM events AS e JOIN customers AS c ON e.customer_id = c.customer_id
        GROUP BY e.customer_id, c.region
        """
    )


@dp.temporary_view
def big_spenders() -> DataFrame:
    return spark.read.table("customer_spend").filter(F.col("spend") > 100)


@dp.materialized_view(name="region_big")
def region_big_spenders() -> DataFrame:
    # DataFrame calls: recomputed in full each tick.
    return (
        spark.read.table("big_spenders")
        .groupBy("region")
        .agg(F.count("*").alias("customers"), F.sum("spend").alias("spend"))
    )


@dp.table
def large_events() -> DataFrame:
    # readStream: a streaming table (each new raw row processed once).
    return spark.readStream.table("raw_events").where("amount >= 50").select("event_id", "amount")
