"""The HA frames (sans-IO) and the epochs that say where two logs stop agreeing."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from sluice.store.ha.epoch_file import EpochEntry, EpochFile, consistent_point
from sluice.store.ha.ha_protocol import (
    Handshake,
    HAProtocolError,
    HAVersionError,
    MasterReader,
    Refuse,
    Report,
    SlaveReader,
    Transfer,
    Welcome,
    encode_handshake,
    encode_refuse,
    encode_report,
    encode_transfer_header,
    encode_welcome,
)

E = EpochEntry


def test_logs_of_one_term_agree_up_to_the_shorter_one() -> None:
    assert consistent_point([E(1, 0)], 100, [E(1, 0)], 500) == 100
    assert consistent_point([E(1, 0)], 700, [E(1, 0)], 500) == 500


def test_an_old_master_agrees_only_up_to_where_the_new_master_began_its_term() -> None:
    # The old master wrote to 300 in epoch 2; the new one took over at 150 (epoch 3) and wrote on.
    old = [E(1, 0), E(2, 100)]
    new = [E(1, 0), E(2, 100), E(3, 150)]
    assert consistent_point(old, 300, new, 900) == 150


def test_a_term_the_master_never_had_is_cut_entirely() -> None:
    # The slave was master for epoch 2 alone (from 100); the master went from epoch 1 to 3 at 150.
    assert consistent_point([E(1, 0), E(2, 100)], 300, [E(1, 0), E(3, 150)], 400) == 100


def test_logs_that_share_no_term_do_not_agree() -> None:
    assert consistent_point([E(4, 0)], 10, [E(1, 0)], 10) == -1
    assert consistent_point([], 10, [E(1, 0)], 10) == -1
    assert consistent_point([E(1, 0)], 10, [E(1, 5)], 10) == -1  # same number, another start: not the same term


def test_the_epoch_file_survives_a_restart_and_refuses_to_go_back(tmp_path: Path) -> None:
    f = EpochFile(str(tmp_path / "epochs")).load()
    assert f.last_epoch == 0
    f.append(1, 0)
    f.append(3, 100)
    with pytest.raises(ValueError):
        f.append(2, 200)
    with pytest.raises(ValueError):
        f.append(4, 50)
    again = EpochFile(str(tmp_path / "epochs")).load()
    assert again.entries == [E(1, 0), E(3, 100)]
    again.truncate_to(99)
    assert EpochFile(str(tmp_path / "epochs")).load().entries == [E(1, 0)]


def test_a_damaged_epoch_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "epochs").write_text("[[2, 0], [1, 5]]")
    with pytest.raises(ValueError, match="epochs"):
        EpochFile(str(tmp_path / "epochs")).load()


def test_frames_cut_from_bytes_arriving_one_at_a_time() -> None:
    to_master = encode_handshake(Handshake(2, 4096, [E(1, 0), E(2, 100)])) + encode_report(5000)
    reader = MasterReader()
    got = [f for b in to_master for f in reader.feed(bytes([b]))]
    assert got == [Handshake(2, 4096, [E(1, 0), E(2, 100)]), Report(5000)]
    to_slave = (encode_welcome(Welcome(2, 900, -1, 0, [E(1, 0)])) + encode_transfer_header(2, 0, 0, 3) + b"abc"
                + encode_transfer_header(2, 3, 3, 0) + encode_refuse("go away"))
    sr = SlaveReader(1 << 20)
    got2 = [f for b in to_slave for f in sr.feed(bytes([b]))]
    assert got2 == [Welcome(2, 900, -1, 0, [E(1, 0)]), Transfer(2, 0, 0, b"abc"), Transfer(2, 3, 3, b""),
                    Refuse("go away")]


@pytest.mark.parametrize("frame", [
    b"\x09" + bytes(16),  # unknown type
    struct.pack(">bqqi", 4, 1, 0, 1 << 20),  # a handshake with too many epochs
    b"\x02" + (-5).to_bytes(8, "big", signed=True),  # a negative report
])
def test_hostile_bytes_to_a_master_are_refused(frame: bytes) -> None:
    with pytest.raises(HAProtocolError):
        MasterReader().feed(frame)


def test_a_transfer_over_the_bound_is_refused_before_its_bytes_arrive() -> None:
    with pytest.raises(HAProtocolError):
        SlaveReader(1024).feed(encode_transfer_header(1, 0, 0, 4096))


def test_a_slave_of_the_first_protocol_version_is_refused_with_why() -> None:
    old_handshake = struct.pack(">bqqi", 1, 2, 4096, 0)  # type 1: its transfers would lack the confirm offset
    with pytest.raises(HAVersionError, match="upgrade"):
        MasterReader().feed(old_handshake)
