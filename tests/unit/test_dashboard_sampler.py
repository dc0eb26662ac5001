"""What the overview reads from a broker's runtime info: rates from its counters, and its alerts."""

from __future__ import annotations

from sluice.dashboard.sampler import BrokerSample

QUIET = {"brokerRole": "SYNC_MASTER", "msgPutTotalTodayNow": "1000", "msgGetTotalTodayNow": "400",
         "commitLogMinOffset": "0", "commitLogMaxOffset": "1048576", "commitLogDiskRatio": "0.40",
         "backPressure": "none", "haSlaveLagBytes": "1:0,2:0", "haInSyncSlaves": "1,2"}


def test_rates_come_from_the_counters_between_two_samples() -> None:
    first = BrokerSample.from_runtime("broker-a", "127.0.0.1:10911", 0, "c", QUIET, None)
    first.mono -= 2.0  # (two seconds ago)
    later = BrokerSample.from_runtime("broker-a", "127.0.0.1:10911", 0, "c",
                                      {**QUIET, "msgPutTotalTodayNow": "1200", "msgGetTotalTodayNow": "500"}, first)
    assert round(later.put_rate) == 100 and round(later.get_rate) == 50
    assert later.stored_bytes == 1048576 and later.alerts() == []


def test_a_full_disk_back_pressure_a_fence_and_a_slave_behind_or_out_of_sync_are_alerts() -> None:
    table = {**QUIET, "commitLogDiskRatio": "0.91", "backPressure": "slow disk", "fenced": "no quorum",
             "haSlaveLagBytes": f"1:{128 << 20},2:10", "haInSyncSlaves": "1"}
    alerts = BrokerSample.from_runtime("broker-a", "a:1", 0, "c", table, None).alerts()
    assert alerts == ["broker broker-a: its disk is 91% full", "broker broker-a is pushing back: slow disk",
                      "broker broker-a refuses writes: no quorum",
                      f"broker broker-a: slave 1 is {128 << 20:,} bytes behind",
                      "broker broker-a: slave 2 is out of sync"]


def test_a_broker_that_does_not_answer_is_one_alert() -> None:
    s = BrokerSample("broker-b", "b:1", 0, "c", 0.0, error="timed out")
    assert s.alerts() == ["broker broker-b (b:1) does not answer: timed out"]


def test_a_master_without_write_or_any_broker_without_read_permission_is_an_alert() -> None:
    read_only = BrokerSample.from_runtime("broker-a", "a:1", 0, "c", {**QUIET, "brokerPermission": "4"}, None)
    assert read_only.alerts() == ["broker broker-a is read-only by its permission (brokerPermission 4): producers "
                                  "send elsewhere"]
    slave = BrokerSample.from_runtime("broker-a", "a:2", 1, "c", {**QUIET, "brokerRole": "SLAVE",
                                                                   "brokerPermission": "4"}, None)
    assert slave.alerts() == []  # (a slave takes no writes anyway)
    no_reads = BrokerSample.from_runtime("broker-a", "a:1", 0, "c", {**QUIET, "brokerPermission": "2"}, None)
    assert no_reads.alerts() == ["broker broker-a serves no reads by its permission (brokerPermission 2): consumers "
                                 "read nothing of it"]
    assert BrokerSample.from_runtime("broker-a", "a:1", 0, "c", QUIET, None).alerts() == []  # (none said: 6)
