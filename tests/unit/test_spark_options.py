"""Options of the Spark source and sink: typed, and every mistake names the option."""

from __future__ import annotations

import pytest

from sluice.spark.options import OptionError, check_sink_columns, parse_sink_options, parse_source_options

NS = {"namesrv": "127.0.0.1:9876"}


def test_source_defaults_are_latest_for_streams_and_earliest_to_latest_for_batches():
    s = parse_source_options({**NS, "topics": "orders"}, streaming=True)
    assert s.starting is not None and s.starting.kind == "latest" and s.ending is None
    assert s.fail_on_data_loss and not s.include_properties and s.max_offsets_per_trigger is None
    b = parse_source_options({**NS, "topics": "orders"}, streaming=False)
    assert b.starting is not None and b.starting.kind == "earliest"
    assert b.ending is not None and b.ending.kind == "latest"


def test_options_are_case_insensitive_and_typed():
    s = parse_source_options({"NameSrv": "h:1;h:2", "TOPICS": "b, a,a", "maxoffsetspertrigger": "500",
                              "minPartitions": "4", "FailOnDataLoss": "FALSE", "includeProperties": "true",
                              "pullBatchSize": "64", "consumerGroup": "cg"}, streaming=True)
    assert s.topics == ("a", "b") and s.max_offsets_per_trigger == 500 and s.min_partitions == 4
    assert not s.fail_on_data_loss and s.include_properties and s.pull_batch_size == 64
    assert s.consumer_group == "cg" and s.report_progress


@pytest.mark.parametrize("options,option", [
    ({"topics": "orders"}, "namesrv"),
    ({**NS, "topics": "orders", "namesrv": "nohost"}, "namesrv"),
    ({**NS}, "topics"),
    ({**NS, "topics": "a", "topicPattern": "a.*"}, "topicPattern"),
    ({**NS, "topicPattern": "(unclosed"}, "topicPattern"),
    ({**NS, "topics": "bad topic"}, "topics"),
    ({**NS, "topics": "orders", "startingOffsets": '{"orders": {'}, "startingOffsets"),
    ({**NS, "topics": "orders", "startingOffsets": '{"other": {"0": 1}}'}, "startingOffsets"),
    ({**NS, "topics": "orders", "startingOffsets": "earliest", "startingTimestamp": "5"}, "startingTimestamp"),
    ({**NS, "topics": "orders", "maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger"),
    ({**NS, "topics": "orders", "maxOffsetsPerTrigger": "many"}, "maxOffsetsPerTrigger"),
    ({**NS, "topics": "orders", "failOnDataLoss": "yes"}, "failOnDataLoss"),
    ({**NS, "topics": "orders", "endingOffsets": "latest"}, "endingOffsets"),
    ({**NS, "topics": "orders", "subscribe": "orders"}, "subscribe"),
])
def test_bad_source_options_fail_naming_the_option(options, option):
    with pytest.raises(OptionError, match=f"'{option.lower()}'|'{option}'"):
        parse_source_options(options, streaming=True)


@pytest.mark.parametrize("options,option", [
    ({**NS, "topics": "orders", "maxOffsetsPerTrigger": "10"}, "maxOffsetsPerTrigger"),
    ({**NS, "topics": "orders", "endingOffsets": "earliest"}, "endingOffsets"),
    ({**NS, "topics": "orders", "startingOffsets": "latest"}, "startingOffsets"),
    ({**NS, "topics": "orders", "startingTimestamp": "10", "endingTimestamp": "5"}, "endingTimestamp"),
])
def test_bad_batch_read_options_fail_naming_the_option(options, option):
    with pytest.raises(OptionError, match=f"'{option}'"):
        parse_source_options(options, streaming=False)


def test_sink_options_allow_what_spark_adds_and_refuse_the_rest():
    s = parse_sink_options({**NS, "topic": "out", "checkpointLocation": "/tmp/cp", "sinkId": "s-1"}, streaming=True)
    assert s.topic == "out" and s.sink_id == "s-1" and s.send_batch_size == 1000
    with pytest.raises(OptionError, match="'kafka.bootstrap.servers'"):
        parse_sink_options({**NS, "kafka.bootstrap.servers": "x"}, streaming=True)
    with pytest.raises(OptionError, match="'sinkId'"):
        parse_sink_options({**NS, "sinkId": "has space"}, streaming=False)
    with pytest.raises(OptionError, match="'namesrv'"):
        parse_sink_options({"topic": "out"}, streaming=False)


def test_sink_columns_need_a_value_a_topic_and_known_names_and_types():
    check_sink_columns({"value": "binary", "keys": "string", "properties": "map<string,string>"}, "out")
    check_sink_columns({"value": "string", "topic": "string"}, None)
    with pytest.raises(OptionError, match="'value'"):
        check_sink_columns({"keys": "string"}, "out")
    with pytest.raises(OptionError, match="'topic'"):
        check_sink_columns({"value": "binary"}, None)
    with pytest.raises(OptionError, match="'key'"):
        check_sink_columns({"value": "binary", "key": "string"}, "out")
    with pytest.raises(OptionError, match="column 'tags' must be of type string"):
        check_sink_columns({"value": "binary", "tags": "int"}, "out")


def test_credentials_and_tls_options_are_taken_together_and_the_secret_never_shows(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nnot checked here\n-----END CERTIFICATE-----\n")
    opts = parse_source_options({"namesrv": "h:1", "topics": "t", "accessKey": "ak", "secretKey": " s p ",
                                 "tlsCaFile": str(ca)}, streaming=False)
    assert opts.access.credentials == ("ak", " s p ") and opts.access.tls
    assert opts.access.tls_ca_pem == ca.read_text()  # read on the driver, carried to the executors
    assert " s p " not in repr(opts) and "credentials=" not in repr(opts.access)
    with pytest.raises(OptionError, match="'accessKey' and 'secretKey' are given together"):
        parse_sink_options({"namesrv": "h:1", "topic": "t", "accessKey": "ak"}, streaming=False)
    with pytest.raises(OptionError, match="option 'tlsCaFile': cannot read"):
        parse_sink_options({"namesrv": "h:1", "topic": "t", "tlsCaFile": str(tmp_path / "none.pem")},
                           streaming=False)
