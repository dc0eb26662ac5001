"""The recall handle read and written as RocketMQ's RecallMessageHandle.HandleV1 reads and writes it."""

from __future__ import annotations

import base64

import pytest

from sluice.common.recall_handle import RecallHandle, RecallHandleError


def _b64(raw: str, pad: bool = True) -> str:
    text = base64.urlsafe_b64encode(raw.encode()).decode()
    return text if pad else text.rstrip("=")


def test_a_handle_is_url_safe_base64_of_five_space_separated_fields() -> None:
    h = RecallHandle("orders", "broker-a", "1700000000001", "7F0000010001ABCDEF")
    assert base64.urlsafe_b64decode(h.encode()).decode() == "v1 orders broker-a 1700000000001 7F0000010001ABCDEF"
    assert RecallHandle.decode(h.encode()) == h


def test_a_handle_without_padding_reads_as_javas_url_decoder_reads_it() -> None:
    assert RecallHandle.decode(_b64("v1 t b 1 id", pad=False)) == RecallHandle("t", "b", "1", "id")


@pytest.mark.parametrize("raw", ["", "v2 t b 1 id", "v1 t b 1", "v1 t b 1 ", "v1 t b 1   ", "garbage"])
def test_what_java_refuses_is_refused(raw: str) -> None:
    with pytest.raises(RecallHandleError, match="recall handle is invalid"):
        RecallHandle.decode(_b64(raw) if raw != "garbage" else "!!!")


def test_fields_past_the_fifth_are_ignored_as_java_ignores_them() -> None:
    assert RecallHandle.decode(_b64("v1 t b 1 id extra")) == RecallHandle("t", "b", "1", "id")
