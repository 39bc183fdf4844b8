package verbs

// GRHLen is the size of the Global Routing Header area at the start of
// every UD receive buffer. For RoCEv2 over IPv4 the IPv4 header sits in its
// last 20 bytes, as on hardware.
const GRHLen = 40

// SGE is a scatter/gather element: Length bytes at virtual address Addr of
// the memory region whose local key is LKey.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SendWR is a send work request. A slice of them passed to PostSend is one
// chain: one doorbell.
type SendWR struct {
	ID     uint64 // returned in the completion
	Opcode Opcode
	Flags  SendFlags
	// SG is the gather list. An empty list sends a header-only message.
	SG []SGE
	// Imm is the immediate data of SEND_WITH_IMM and RDMA_WRITE_WITH_IMM,
	// in host byte order (providers put it on the wire big endian).
	Imm uint32

	// UD only: the destination.
	AH         AH
	RemoteQPN  QPN
	RemoteQKey uint32

	// RDMA and atomics: the remote buffer.
	RemoteAddr uint64
	RKey       uint32

	// Atomics: the value to add (FETCH_AND_ADD) or compare (CMP_AND_SWP),
	// and the value to swap in. The original value lands in SG[0], which
	// must be 8 bytes; the remote address must be 8-byte aligned. Memory
	// holds the word in the order DeviceAttr.AtomicBigEndian gives.
	CompareAdd uint64
	Swap       uint64

	// Deadline, when not zero, is the latest Time (on the clock of Now)
	// at which the provider may hand the message to the wire: it checks
	// immediately before each transmit (a system call, a doorbell), after
	// any wait for room, and a UD send still unsent then is never sent.
	// It completes with WCDeadlineErr, signaled or not (a provider that
	// finds the deadline passed before it accepts the work request may
	// instead refuse it: PostSend then returns the work requests before
	// it as posted and an error wrapping ErrDeadline). What a deadline
	// leaves unbounded is only the time after that check: inside the
	// system call or the NIC, and on the wire. Senders that promise an
	// answer no later than a bound (spec.MaxResidence) set it.
	Deadline Time
}

// RecvWR is a receive work request.
type RecvWR struct {
	ID uint64
	SG []SGE
}

// WC is a work completion. Of a failed completion only ID, Status, QPN
// and VendorErr are meaningful (Opcode is undefined, as in libibverbs).
type WC struct {
	ID      uint64
	Status  WCStatus
	Opcode  WCOpcode
	Flags   WCFlags
	ByteLen uint32 // receive: bytes written, GRH included for UD
	Imm     uint32 // host byte order; valid with WCWithImm
	QPN     QPN    // the local queue pair
	SrcQP   QPN    // UD receive: the sender's queue pair
	// Src is the UD sender's address, ready for CreateAH.
	Src       Address
	PKeyIndex uint16
	VendorErr uint32
	// Arrived stamps a receive completion with when its message reached
	// this host, as the provider knows it (see each provider's doc), on
	// the clock of Now. Callers that must not act on a message older than
	// a bound compare Now().Sub(Arrived) with it. Zero for send
	// completions and flushed receives.
	Arrived Time
}

// Err returns nil for a successful completion, and an error naming the
// status otherwise.
func (wc *WC) Err() error {
	if wc.Status == WCSuccess {
		return nil
	}
	return &WCError{Status: wc.Status, ID: wc.ID}
}
