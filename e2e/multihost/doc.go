// Package multihost runs seqd and its clients on different "hosts":
// Linux network namespaces joined by a bridge, each with its own address
// in 198.51.100.0/24 (internal/netnstest). The tests run the real
// binaries (seqd, seqctl, loadgen, etcd) and rigclient, a client host
// holding many sessions of the client library, each on its own host, and
// verify every timestamp handed out. They need root and skip without it.
//
// The hosts share this machine's cores. Client hosts run at nice 10
// (SEQD_RIG_CLIENT_NICE; 0 for none), so that, as on machines of their
// own, their load does not take the servers' CPU.
//
// SEQD_RIG_PROFILE=DIR writes CPU profiles there, from the HA storm's
// kill on: each surviving seqd's 3 s (-pprof; go tool pprof seqd
// DIR/failover-s2.pprof) and each client host's until it stops. SEQD_RIG_LOGS=DIR keeps
// every process's log; SEQD_RIG_CLIENT_DEBUG=1 turns the clients' debug log on.
package multihost
