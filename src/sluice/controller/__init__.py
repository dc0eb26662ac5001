"""The controller: failover of broker groups (the master, epochs, the in-sync replica set), its state kept in etcd."""
