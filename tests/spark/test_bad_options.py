"""Bad options fail when the query starts, with a message that names the option."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.spark


def start_error(start) -> str:
    """The error a query reports when started (by start() itself, or by the stream right after)."""
    try:
        query = start()
    except Exception as exc:
        return str(exc)
    try:
        finished = query.awaitTermination(60)
    except Exception as exc:
        return str(exc)
    finally:
        query.stop()
    pytest.fail(f"the query did not fail (finished={finished})")


@pytest.mark.parametrize("options,option", [
    ({"topics": "orders"}, "namesrv"),
    ({"namesrv": "NS", "topics": "no_such_topic"}, "topics"),
    ({"namesrv": "NS", "topics": "TOPIC", "startingOffsets": '{"TOPIC": {"broker-a:0": '}, "startingOffsets"),
    ({"namesrv": "NS", "topics": "TOPIC", "subscribe": "TOPIC"}, "subscribe"),
    ({"namesrv": "NS", "topics": "TOPIC", "maxOffsetsPerTrigger": "-5"}, "maxOffsetsPerTrigger"),
])
def test_bad_streaming_read_options_fail_at_query_start_naming_the_option(
        spark, spark_cluster, topic_name, tmp_path, options, option):
    spark_cluster.create_topic(topic_name, 1)
    reader = spark.readStream.format("sluice")
    for k, v in options.items():
        reader = reader.option(k, v.replace("NS", spark_cluster.namesrv_addr).replace("TOPIC", topic_name))
    message = start_error(lambda: reader.load().writeStream.format("noop")
                          .option("checkpointLocation", str(tmp_path / "cp")).start())
    assert f"'{option}'" in message or f"'{option.lower()}'" in message, message


@pytest.mark.parametrize("options,option", [
    ({"topics": "TOPIC", "endingOffsets": "{oops"}, "endingOffsets"),
    ({"topics": "TOPIC", "maxOffsetsPerTrigger": "10"}, "maxOffsetsPerTrigger"),
])
def test_bad_batch_read_options_fail_naming_the_option(spark, spark_cluster, topic_name, options, option):
    spark_cluster.create_topic(topic_name, 1)
    reader = spark.read.format("sluice").option("namesrv", spark_cluster.namesrv_addr)
    for k, v in options.items():
        reader = reader.option(k, v.replace("TOPIC", topic_name))
    with pytest.raises(Exception, match=f"'{option}'"):
        reader.load().collect()


def test_bad_sink_options_fail_at_query_start_naming_the_option(spark, spark_cluster, topic_name, tmp_path):
    spark_cluster.create_topic(topic_name, 1)
    df = spark.readStream.format("rate").load().selectExpr("cast(value as string) as value")
    message = start_error(lambda: df.writeStream.format("sluice").option("topic", topic_name)
                          .option("checkpointLocation", str(tmp_path / "cp")).start())
    assert "'namesrv'" in message, message
    with pytest.raises(Exception, match="'value'"):
        spark.range(3).write.format("sluice").option("namesrv", spark_cluster.namesrv_addr) \
            .option("topic", topic_name).mode("append").save()
