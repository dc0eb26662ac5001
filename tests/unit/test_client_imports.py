"""Importing the client API loads none of the broker's or Spark's heavy dependencies.

numpy serves only the broker's store, pyarrow / pyspark only ``sluice.spark``, aiohttp / jinja2 only the dashboard;
an application that just produces and consumes must not pay their import time (or memory). Each check runs in a
fresh interpreter, since this test process has long imported them.
"""

import subprocess
import sys

import pytest

HEAVY = ("numpy", "pyarrow", "pyspark", "aiohttp", "jinja2")

CLIENT_IMPORTS = [
    "import sluice",
    "import sluice.aio",
    "from sluice import ConsumeStatus, Message, Producer, PullConsumer, PushConsumer",
    "from sluice.aio import Producer, PullConsumer, PushConsumer",
    "import sluice.client.admin",
    "import sluice.cli.main, sluice.cli.admin_commands",
]


@pytest.mark.parametrize("statement", CLIENT_IMPORTS)
def test_client_import_loads_no_heavy_dependency(statement):
    code = f"import sys\n{statement}\nprint(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == [], f"{statement!r} imported {out.stdout.strip()}"


@pytest.mark.parametrize("module", ["sluice.store", "sluice.store.message_store", "sluice.remoting",
                                    "sluice.common.speedups", "sluice.namesrv"])
def test_importing_a_server_part_loads_no_client_module(module):
    code = f"import sys\nimport {module}\nprint(' '.join(m for m in sys.modules if m.startswith('sluice.client')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == [], f"import {module} loaded {out.stdout.strip()}"


def test_the_package_names_resolve_on_first_use():
    code = ("import sys, sluice\nassert 'sluice.client.producer' not in sys.modules\n"
            "from sluice import Producer, MessageQueue\nfrom sluice.aio import PushConsumer\n"
            "assert Producer.__module__ == 'sluice.client.producer' and 'Producer' in dir(sluice)\n"
            "try:\n    sluice.Nope\nexcept AttributeError as e:\n    print(e)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert "has no attribute 'Nope'" in out.stdout
