"""The name server's key/value configuration (``kvConfig.json``), written after every change, off the event loop.

File: ``{"configTable":{"<namespace>":{"<key>":"<value>"}}}``, replaced atomically (``.bak`` kept). A file
that exists but cannot be read is an error naming it; it is never silently reset to empty.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from sluice.common.config_manager import ConfigManager
from sluice.common.errors import StoreConfigError

log = logging.getLogger(__name__)

NAMESPACE_ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


class KVConfigManager(ConfigManager):
    def __init__(self, path: str) -> None:
        self._table: dict[str, dict[str, str]] = {}
        super().__init__(path)

    def decode(self, data: dict[str, Any]) -> None:
        """(``load``: a file that does not parse or holds another shape raises ``StoreConfigError`` naming it)"""
        table = data.get("configTable", {})
        if not isinstance(table, dict) or not all(
                isinstance(kv, dict) and all(isinstance(v, str) for v in kv.values()) for kv in table.values()):
            raise StoreConfigError(f"kv config file {self.path} is malformed: configTable must map namespaces to "
                                   f"objects of string values; refusing to start (previous version: {self.path}.bak)")
        self._table = {str(ns): dict(kv) for ns, kv in table.items()}
        log.info("loaded kv config %s: %d namespaces", self.path, len(self._table))

    def encode(self) -> dict[str, Any]:
        return {"configTable": {ns: dict(kv) for ns, kv in self._table.items()}}

    def put(self, namespace: str, key: str, value: str) -> None:
        with self._lock:
            kv = self._table.setdefault(namespace, {})
            old = kv.get(key)
            kv[key] = value
        if old != value:
            log.info("kv config put: %s/%s = %r (was %r)", namespace, key, value, old)
            self.persist()

    def get(self, namespace: str, key: str) -> str | None:
        return self._table.get(namespace, {}).get(key)

    def delete(self, namespace: str, key: str) -> bool:
        with self._lock:
            kv = self._table.get(namespace)
            if kv is None or key not in kv:
                return False
            del kv[key]
            if not kv:
                del self._table[namespace]
        log.info("kv config deleted: %s/%s", namespace, key)
        self.persist()
        return True

    def namespace(self, namespace: str) -> dict[str, str] | None:
        """A copy of one namespace's items, or None when it has none."""
        kv = self._table.get(namespace)
        return dict(kv) if kv else None

    def kv_list_json(self, namespace: str) -> bytes | None:
        """KVTable JSON (``{"table":{...}}``) of one namespace, or None when it has no items."""
        kv = self.namespace(namespace)
        if kv is None:
            return None
        return json.dumps({"table": kv}, separators=(",", ":"), sort_keys=True).encode("utf-8")
