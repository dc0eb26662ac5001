"""Replication of the commit log from a master to its slaves (RocketMQ's HA service): the frames
(``ha_protocol``), the epochs that tell where two logs stop agreeing (``epoch_file``), the master's side
(``ha_service``) and the slave's (``ha_client``)."""
