"""How a CLI verb runs: the name server and credentials it uses, its event loop, its ``Admin``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from sluice.auth.credentials import Credentials, credentials_from_environment
from sluice.client.admin import DEFAULT_NAMESRV, Admin, AdminError

NAMESRV_ENV = "SLUICE_NAMESRV"
CREDENTIALS_FILE_ENV = "SLUICE_CREDENTIALS_FILE"


# == running ======================================================================================
def namesrv_of(args: argparse.Namespace) -> str:
    return args.namesrv or os.environ.get(NAMESRV_ENV) or DEFAULT_NAMESRV


def default_credentials_file() -> str:
    return os.environ.get(CREDENTIALS_FILE_ENV) or os.path.join(os.path.expanduser("~"), ".sluice", "credentials")


def cli_credentials() -> Credentials | None:
    """What the CLI signs its requests with (brokers with authentication on): $SLUICE_ACCESS_KEY and
    $SLUICE_SECRET_KEY, else the file $SLUICE_CREDENTIALS_FILE or ~/.sluice/credentials (TOML: ``access_key``
    and ``secret_key``; readable by its owner only), else none."""
    from_env = credentials_from_environment()
    if from_env is not None:
        return from_env
    path = default_credentials_file()
    if not os.path.exists(path):
        return None
    if sys.platform != "win32" and os.stat(path).st_mode & 0o077:
        raise AdminError(f"credentials file {path} is readable by others: chmod 600 it")
    import tomllib
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise AdminError(f"credentials file {path}: {exc}") from None
    ak, sk = data.get("access_key"), data.get("secret_key")
    if not isinstance(ak, str) or not isinstance(sk, str) or not ak or not sk:
        raise AdminError(f"credentials file {path}: needs access_key and secret_key, both non-empty strings")
    return Credentials(ak, sk)


def run(coro: Coroutine[Any, Any, int]) -> int:
    from sluice.cli.servers import _new_loop

    with asyncio.Runner(loop_factory=_new_loop) as runner:
        return runner.run(coro)


def command(fn: Callable[[Admin, argparse.Namespace], Coroutine[Any, Any, int]]) -> Callable[[argparse.Namespace],
                                                                                            int]:
    """A CLI handler: ``fn(admin, args)`` on a fresh event loop, the admin closed afterwards."""

    def handler(args: argparse.Namespace) -> int:
        if not logging.getLogger().handlers:
            # Warnings on stderr: they tell what the one-line error cannot (e.g. that the peer at the name
            # server's address speaks another protocol); the output on stdout stays clean.
            logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="sluice: %(levelname)s: %(message)s")

        async def main() -> int:
            async with Admin(namesrv_of(args), credentials=cli_credentials()) as admin:
                return await fn(admin, args)

        return run(main())

    handler.__name__ = fn.__name__
    return handler
