"""What the tests share, so that no test module imports another (tests/test_layers.py checks it).

Clusters
    inprocess         nodes of a cluster in this process: configs on free ports and formatted data directories
                      (plain, or every listener on SASL_SSL), a bounded wait, the active controller
    replicated        an RF=3 topic written and read through librdkafka, and the checks that its replicas agree
    processes         a cluster of real processes (`odradek cluster up`) on a block of ports (kill -9, SIGSTOP)
    faults            a process cluster behind a fault-injecting network, a load and its checker, and the fault
                      scenarios (cuts, kills, pauses, restarts, a partition move)
Clients, groups, transactions, security
    groups            consumer group members of each client library and the admin's views of their group
    txn_requests      transactional requests by hand (RawClient), an abort whose marker is awaited
    txn_markers       a transactional topic read back under read_committed
    authz             requests sent as a principal to a broker with the StandardAuthorizer
    security          round trips through a secured listener (bundled clients, librdkafka's first error)
    kafka_properties  a server.properties written for Apache Kafka
Unit-level fakes
    group_coordinator a group coordinator on a manual clock and an in-memory log
    txn_coordinator   a transaction coordinator on a manual clock and an in-memory log
    fake_broker       a fake broker on a loopback socket for the bundled client
    sasl              a broker connection driven without a socket
    crash             a write that raises after N calls, for recovery tests
    vectors           the golden protocol frames in tests/vectors/
"""
