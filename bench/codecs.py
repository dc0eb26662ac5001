#!/usr/bin/env python3
"""The per-message codecs, compiled (``sluice._speedups``) and pure Python, side by side: µs per message.

Each case runs the compiled function and its pure-Python twin on the same input (128-byte bodies, the
properties a producer sends), best of ``--repeat`` rounds; one line per case, and a JSON line each with
``--json``.

    .venv/bin/python bench/codecs.py
"""

from __future__ import annotations

import argparse
import json
import sys
import timeit
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from sluice.client.message import Message  # noqa: E402
from sluice.client.message_id import MessageIdGenerator  # noqa: E402
from sluice.common import batch_codec, message_codec  # noqa: E402
from sluice.common.batch_codec import BatchItem, encode_batch  # noqa: E402
from sluice.common.speedups import speedups  # noqa: E402

BODY = b"x" * 128
PROPS = b"TAGS\x01orders\x02WAIT\x01true\x02UNIQ_KEY\x017F000001123400000000000000000001"


def per_message(fn: Callable[[], object], messages: int, repeat: int) -> float:
    number = max(1, 20_000 // messages)
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number / messages * 1e6


def cases() -> list[tuple[str, int, Callable[[], object], Callable[[], object]]]:
    record = message_codec.encode_record(topic=b"orders", body=BODY, properties=PROPS, born_host="10.0.0.7:51234",
                                         store_host="10.0.0.1:10911")
    pull = record * 32
    batch = encode_batch([BatchItem(BODY, {"TAGS": "orders", "UNIQ_KEY": f"7F00000112340000000000000000{i:04X}"})
                          for i in range(64)])
    ids = MessageIdGenerator()
    py_ids = MessageIdGenerator()
    py_ids._clock = None
    assert speedups is not None
    return [
        ("decode_records (pull body, 32 records)", 32, lambda: message_codec.c_decode_records(
            pull, message_codec._HOSTS), lambda: message_codec.py_decode_records(pull)),
        ("check_record (recovery, CRC)", 1, lambda: speedups.check_record(record, 0, len(record), True),
         lambda: message_codec.py_check_record(record, 0, len(record), True)),
        ("scan_batch (64-message batch body)", 64, lambda: batch_codec.c_scan_batch_columns(batch),
         lambda: batch_codec.py_scan_batch_columns(batch)),
        ("encode_batch_record", 1, lambda: speedups.encode_batch_record(BODY, PROPS, 0),
         lambda: batch_codec.py_encode_batch_record(BODY, PROPS, 0)),
        ("message id (UNIQ_KEY)", 1, ids.create, py_ids.create),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="also one JSON line per case")
    args = parser.parse_args()
    if speedups is None:
        print("sluice._speedups is not built (or SLUICE_NO_EXTENSIONS is set): nothing to compare", file=sys.stderr)
        return 1
    print(f"{'case':42} {'C µs/msg':>9} {'Python µs/msg':>14} {'ratio':>6}")
    for name, n, c, py in cases():
        tc, tp = per_message(c, n, args.repeat), per_message(py, n, args.repeat)
        print(f"{name:42} {tc:9.3f} {tp:14.3f} {tp / tc:5.1f}x")
        if args.json:
            print(json.dumps({"case": name, "c_us": round(tc, 3), "python_us": round(tp, 3)}))
    body = BODY
    msg = Message("orders", body)
    print(f"{'Message(topic, body) (Python, topic checked once)':42} "
          f"{per_message(lambda: Message('orders', body), 1, args.repeat):9.3f}")
    print(f"{'Message.wire_for_send (Python)':42} "
          f"{per_message(lambda: msg.wire_for_send('A' * 32, 4 << 20, None), 1, args.repeat):9.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
