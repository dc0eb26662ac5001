"""etcd, where controller-mode broker groups keep their election state: an asyncio client over etcd's JSON gateway
(``etcd_client``) and a local etcd server for ``sluice dev`` and the tests (``etcd_process``). The election itself
lives in ``sluice.broker.replicas_manager``."""
