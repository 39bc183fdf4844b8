package verbs

// Counter names that providers implementing Counters use for the events
// every provider sees. A provider may add its own names.
const (
	CounterRxPackets       = "rx_packets"
	CounterTxPackets       = "tx_packets"
	CounterRxSyscalls      = "rx_syscalls"
	CounterTxSyscalls      = "tx_syscalls"
	CounterDropNoRecv      = "rx_drop_no_recv"     // UD/UC SEND with no RECV posted
	CounterDropBadQKey     = "rx_drop_bad_qkey"    // UD Q_Key mismatch
	CounterDropBadPKey     = "rx_drop_bad_pkey"    // P_Key mismatch
	CounterDropBadICRC     = "rx_drop_bad_icrc"    // invariant CRC mismatch
	CounterDropUnknownQPN  = "rx_drop_unknown_qpn" // no such destination QP
	CounterDropMalformed   = "rx_drop_malformed"   // truncated or inconsistent headers
	CounterDropBadOpcode   = "rx_drop_bad_opcode"  // opcode invalid for the QP type or state
	CounterDropRKey        = "rx_drop_rkey"        // R_Key or bounds violation
	CounterDropPSN         = "rx_drop_psn"         // out-of-sequence UC/RC packet
	CounterDropLength      = "rx_drop_length"      // receive buffer too small
	CounterDropDeadline    = "tx_drop_deadline"    // sends not transmitted: SendWR.Deadline passed
	CounterRCRetransmits   = "rc_retransmits"      // RC requester retransmissions
	CounterRCDuplicates    = "rc_duplicates"       // RC responder duplicate requests
	CounterRCNaks          = "rc_naks"             // NAKs sent
	CounterInjectedLoss    = "fault_dropped"       // packets dropped by fault injection
	CounterInjectedDup     = "fault_duplicated"    // packets duplicated by fault injection
	CounterInjectedReorder = "fault_reordered"     // packets delayed by fault injection
	CounterAtomicRefused   = "rc_atomic_refused"   // remote atomics an AtomicPolicy refused
	// CounterProviderCrossings counts data-path calls into the driver
	// (posts and polls): cgo calls on the ibv provider.
	CounterProviderCrossings = "provider_crossings"
)
