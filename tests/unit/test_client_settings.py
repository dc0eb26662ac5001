"""Client keyword settings are checked like server config, and a ClientConfig given to a client is never changed."""

from __future__ import annotations

import pytest

from sluice import Producer, PullConsumer, PushConsumer
from sluice.client.aio import Producer as AioProducer
from sluice.common.config import ClientConfig
from sluice.common.config_loader import ConfigError, SettingError


@pytest.mark.parametrize(("settings", "message"), [
    ({"sned_msg_timeout": 1000}, "producer setting: unknown setting 'sned_msg_timeout' (did you mean "
                                 "'send_msg_timeout'?)"),
    ({"send_msg_timeout": 0}, "send_msg_timeout: an integer of at least 1 is allowed, got 0"),
    ({"send_msg_timeout": "3s"}, "send_msg_timeout: an integer of at least 1 is allowed, got '3s'"),
    ({"compress_level": 11}, "compress_level: an integer from 0 to 9 is allowed, got 11"),
    ({"send_latency_fault_enable": 1}, "send_latency_fault_enable: true or false is allowed, got 1"),
])
def test_a_bad_producer_setting_is_refused_naming_it(settings, message):
    with pytest.raises(SettingError) as e:
        AioProducer("p", "127.0.0.1:9876", **settings)
    assert message in str(e.value)
    assert isinstance(e.value, TypeError) and isinstance(e.value, ConfigError)  # as a bad keyword is, in Python


def test_consumers_check_their_settings_too():
    with pytest.raises(SettingError, match="pull_batch_size: an integer from 1 to 1024 is allowed, got 5000"):
        PushConsumer("g", namesrv="127.0.0.1:9876", pull_batch_size=5000)
    with pytest.raises(SettingError, match="unknown setting 'pull_batch'"):
        PullConsumer("g", namesrv="127.0.0.1:9876", pull_batch=10)


def test_a_config_shared_by_two_clients_is_changed_by_neither():
    shared = ClientConfig(send_msg_timeout=1234)
    a = Producer("a", namesrv="10.0.0.1:9876", config=shared, retry_times_when_send_failed=5)
    b = Producer("b", namesrv="10.0.0.2:9876", config=shared)
    try:
        assert shared.namesrv_addr == "127.0.0.1:9876" and shared.retry_times_when_send_failed == 2
        assert a.aio.config.namesrv_addr == "10.0.0.1:9876" and b.aio.config.namesrv_addr == "10.0.0.2:9876"
        assert a.aio.config.send_msg_timeout == b.aio.config.send_msg_timeout == 1234  # what it gave, it gives
        assert a.aio.config.retry_times_when_send_failed == 5 and b.aio.config.retry_times_when_send_failed == 2
        assert a.aio.config is not shared and a.aio.config.remoting is not shared.remoting
    finally:
        a.shutdown()
        b.shutdown()
