"""A wheel built from the sources is named sluice-mq, holds the compiled codecs with their stub and the typed
marker, and Sluice imported from it uses the codecs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sluice.common.speedups import speedups

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(speedups is None, reason="no compiled module here: no C compiler to build a wheel's")
def test_wheel_holds_the_compiled_module_and_uses_it(tmp_path):
    src = tmp_path / "src-copy"  # built from a copy: pip builds in the tree it is given
    shutil.copytree(ROOT / "src", src / "src", ignore=shutil.ignore_patterns("*.so", "__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    out = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out),
                    str(src)], check=True, timeout=240, capture_output=True)
    (wheel,) = out.glob("sluice_mq-*.whl")  # the distribution's name: "sluice" on PyPI is another project
    assert f"-cp{sys.version_info.major}{sys.version_info.minor}-" in wheel.name  # a binary wheel, not pure
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        assert [n for n in names if n.startswith("sluice/_speedups") and n.endswith(".so")]
        assert {"sluice/py.typed", "sluice/_speedups.pyi"} <= set(names)
        # The dashboard's pages and the files they load ship in it (no CDN).
        assert {"sluice/dashboard/templates/base.html", "sluice/dashboard/static/dashboard.js",
                "sluice/dashboard/static/dashboard.css"} <= set(names)
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        headers = z.read(metadata).decode().split("\n\n")[0].splitlines()
        assert {"Name: sluice-mq", "License-Expression: Apache-2.0", "Classifier: Typing :: Typed"} <= set(headers)
        z.extractall(tmp_path / "site")
    code = ("import sluice, sluice.common.message_codec as m; from sluice.common.speedups import speedups; "
            "print(sluice.__file__, speedups.__file__, m.decode_records is m._c_decode_records)")
    env = {k: v for k, v in os.environ.items() if k != "SLUICE_NO_EXTENSIONS"}
    env["PYTHONPATH"] = str(tmp_path / "site")
    res = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=60, check=True)
    pkg, ext, in_use = res.stdout.split()
    assert pkg.startswith(str(tmp_path / "site")) and ext.startswith(str(tmp_path / "site")) and in_use == "True"
