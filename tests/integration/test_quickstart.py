"""The README's Python example, taken from README.md as written, runs against a real name server and broker.

The example finds the name server through ``SLUICE_NAMESRV`` (defaulting to ``make dev``'s 127.0.0.1:9876), so
the test points it at the ``cluster`` fixture without touching its text, and runs it as a user would: a
``python`` process, stopped by pressing Enter once it has printed what it consumed.
"""

from __future__ import annotations

import os
import queue
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
FENCE = re.compile(r"^(#+ [^\n]*)$|^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def python_blocks(markdown: str) -> dict[str, list[str]]:
    """The ```python blocks of a Markdown text, verbatim, by the heading they stand under."""
    blocks: dict[str, list[str]] = {}
    heading = ""
    for m in FENCE.finditer(markdown):
        if m.group(1):
            heading = m.group(1).lstrip("#").strip()
        elif m.group(2) == "python":
            blocks.setdefault(heading, []).append(m.group(3))
    return blocks


def test_every_readme_python_block_is_run_here():
    """A new Python block in the README needs a test here as well."""
    assert {h: len(b) for h, b in python_blocks(README.read_text()).items()} == {"Produce and consume": 1}


def test_readme_produce_and_consume_example(cluster, tmp_path):
    (code,) = python_blocks(README.read_text())["Produce and consume"]
    script = tmp_path / "quickstart.py"
    script.write_text(code)
    env = {**os.environ, "SLUICE_NAMESRV": cluster.namesrv_addr, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True)
    reader.start()
    seen: list[str] = []
    try:
        deadline = time.monotonic() + 30
        # The listener prints from the consumer's thread while the main thread prints its prompt: with unbuffered
        # output the prompt may land between the listener's words (print writes each separately). Without the
        # prompt, and with blanks folded, the listener's line reads whole.
        def consumed() -> bool:
            text = "".join(seen).replace("consuming; press Enter to stop", "")
            return "orders paid b'{\"id\": 42}'" in " ".join(text.split())

        while not consumed():
            remaining = deadline - time.monotonic()
            if remaining <= 0 or proc.poll() is not None:
                pytest.fail(f"the example did not consume its message; stdout:\n{''.join(seen)}\n"
                            f"stderr:\n{proc.stderr.read() if proc.poll() is not None else '(still running)'}")
            try:
                seen.append(lines.get(timeout=min(remaining, 0.5)))
            except queue.Empty:
                pass
        proc.stdin.write("\n")  # "press Enter to stop"
        proc.stdin.flush()
        assert proc.wait(30) == 0
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        for f in (proc.stdin, proc.stdout, proc.stderr):
            f.close()
    reader.join(5)
    assert re.fullmatch(r"SendStatus\.SEND_OK [0-9A-F]{32} orders@broker-a:\d+ 0\n", seen[0]), seen
    assert "consuming; press Enter to stop" in "".join(seen + list(lines.queue))
    assert err == "", err


def test_push_consumer_gets_only_the_subscribed_tags(cluster):
    """The example's subscription, checked beyond what it prints: "paid || refunded" gets those two tags only."""
    from sluice import ConsumeStatus, Message, Producer, PushConsumer

    got: list[bytes] = []
    done = threading.Event()

    with Producer("quickstart-producers", namesrv=cluster.namesrv_addr) as producer:
        result = producer.send(Message("tagged-orders", b"order-1", tags="paid", keys=["o-1"]))
        assert result.status.name == "SEND_OK" and result.queue.topic == "tagged-orders"

        consumer = PushConsumer("tagged-billing", namesrv=cluster.namesrv_addr, consume_from="first")
        consumer.subscribe("tagged-orders", "paid || refunded")

        @consumer.listener
        def handle(msgs):
            got.extend(m.body for m in msgs)
            if len(got) >= 2:
                done.set()
            return ConsumeStatus.CONSUME_SUCCESS

        consumer.start()
        try:
            producer.send(Message("tagged-orders", b"order-2", tags="refunded"))
            producer.send(Message("tagged-orders", b"ignored", tags="created"))
            assert done.wait(15)
        finally:
            consumer.shutdown()
    assert sorted(got) == [b"order-1", b"order-2"]
