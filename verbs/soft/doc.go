// Package soft is seqd's userspace verbs provider: RoCEv2 over kernel UDP
// sockets, in pure Go. It registers itself as provider "soft".
//
// # Wire
//
// Every packet is a real RoCEv2 transport packet (BTH, the extension
// headers its opcode needs, payload, ICRC) carried in UDP, so tshark
// dissects it as RRoCE. The ICRC covers the IPv4 and UDP headers as the
// IBTA annex says; the provider cannot see the IPv4 header the kernel
// writes, so it computes it as Linux writes it for an unconnected socket
// with DF set: identification 0. (For a GSO send the kernel numbers the
// segments it cuts 0, 1, 2…; on loopback and veth no segment is ever cut,
// so what is covered is what is on the wire.)
//
// A device is an IPv4 address and one UDP socket per queue (option
// "queues"): queue i listens on port+i, or on an ephemeral port when the
// device's port is 0. Each QP is bound to one queue, round-robin. A QP's
// Address is its queue's IP and port.
//
// # Who moves packets
//
//   - Transmit happens on the thread that posts: PostSend encodes the chain
//     into the queue's transmit arena and rings the doorbell with one
//     sendmmsg, in which runs of equal-size packets to one destination
//     travel as one UDP GSO message (UDP_SEGMENT). If the kernel refuses GSO
//     (EIO), the queue falls back to one datagram per packet, logged once.
//   - Receive happens on whichever thread gets there first: CQ.Poll on an
//     empty CQ runs a non-blocking receive burst (recvmmsg with UDP_GRO,
//     super-packets split into their segments) on the queues of the CQ's
//     QPs, so a busy-polling worker moves its own packets with no thread
//     hand-off; and one progress goroutine per queue, while nobody polls,
//     waits for the socket to become readable, so that RC responders, ACKs
//     and blocked CQ.Wait callers make progress. The socket itself is never
//     in Go's netpoller, whose edge-triggered registration (input and
//     output) would wake a parked thread on every datagram received and
//     every one sent while the pollers move the packets themselves: the
//     goroutine waits on an epoll instance of the queue's own, in the
//     netpoller, that holds the socket for input only, and only while the
//     goroutine is the queue's receiver: when pollers come back, the
//     first datagram they take wakes it once and it takes the socket out.
//     A burst
//     holds the queue's receive lock; there are no per-packet goroutines.
//     Receive completions carry a lower bound on when their datagram
//     arrived as verbs.WC.Arrived, so time spent in the socket buffer
//     counts in a request's age: the start of the last read that found
//     the socket empty, while pollers keep reading it (at most one poll
//     early), and the kernel's receive time (SO_TIMESTAMPNS, moved onto
//     the monotonic clock with one clock read per burst) once that read
//     is older than 200 µs (a busy socket, an idle spell, a stall). The
//     kernel's times are delivered only then: a control message per
//     datagram costs about half a microsecond per serial round trip.
//     So a stamp is at most 400 µs early (verbs.DeviceAttr.ArrivedWithin;
//     0 if a socket refused SO_TIMESTAMPNS), short of a poller preempted
//     inside recvmmsg or a step of the wall clock.
//   - A UD send with a deadline (verbs.SendWR.Deadline) is checked
//     immediately before each sendmmsg, after any wait for room in the
//     socket buffer: one past it is dropped (tx_drop_deadline) and
//     completes with verbs.WCDeadlineErr. Such sends are never held by
//     HoldDoorbell.
//     Only CQs that arrivals can fill drive a socket: one that takes just
//     the send completions of UD and UC QPs, or the receive completions of
//     QPs created without RECVs, is polled without a system call.
//   - The data path's two system calls (sendmmsg, recvmmsg) are raw: the
//     socket is non-blocking, so neither can block, and skipping the
//     scheduler's hooks keeps a busy-polling thread's P from being handed
//     off mid-batch.
//   - The sequencer's packet, a header-only UD SEND_WITH_IMM, has a fast
//     path both ways: a chain to one AH is validated once and each packet
//     is written with its ICRC computed from its fields
//     (rocev2.UDImmICRC); a GRO run of them is received with its flow and
//     destination QP looked up once.
//   - The progress goroutine also runs RC retransmission timers and
//     releases packets held back by reorder injection.
//
// The steady-state data path allocates nothing: the arenas, message
// headers, control buffers, receive rings and completion rings are
// allocated when the device, QP or CQ is created.
//
// # Semantics
//
// UD: a packet that finds no posted RECV is dropped and counted, as on
// hardware; so is a wrong Q_Key. UC: WRITEs land after R_Key and bounds
// checks; a PSN gap drops the rest of the message. RC: PSNs, coalesced
// ACKs, NAKs (sequence error, RNR, remote access, invalid request),
// go-back-N retransmission on timeout, duplicate detection; each atomic
// runs exactly once, a replayed request gets the saved result. Send
// completions of UD and UC are generated once the doorbell's syscall
// returns; send queue slots are then free again.
//
// # Fault injection
//
// Options loss, dup and reorder (probabilities in [0,1]) and seed inject
// faults on transmit, for tests. They are off by default.
//
// # Options
//
//	queues=N      sockets (default 1)
//	loss=P dup=P reorder=P seed=N
//	gso=on|off    UDP GSO on transmit (default on)
//	gro=on|off    UDP GRO on receive (default on)
//	rcvbuf=BYTES sndbuf=BYTES  socket buffer sizes (default 4 MiB; past
//	              net.core.rmem_max and wmem_max only with CAP_NET_ADMIN)
//	max_qp=N      queue pairs per device (default 65536)
//	advertise=IP  with device 0.0.0.0:port (listen on every address, as in
//	              a container): the address peers reach the device at. It
//	              is the source address in every ICRC; each received
//	              datagram's destination comes from IP_PKTINFO.
//	tos=N         IPv4 TOS byte of every packet (DSCP<<2 | ECN; default 0)
//	nicwire=on    behave on the wire as an RDMA NIC (device IP:4791; needs
//	              CAP_NET_RAW): random source port per AH, real non-zero
//	              IPv4 IDs, for interoperability tests (nicwire.go)
//	xdp=DEV       receive through AF_XDP on interface DEV (root, or
//	              CAP_NET_ADMIN, CAP_BPF and CAP_NET_RAW; fails, naming
//	              the capability, without them): an XDP program steers
//	              the device's RoCEv2 packets to one AF_XDP socket per
//	              queue, on DEV's receive queue of the same index;
//	              transmit stays on the UDP socket (xdp_linux.go,
//	              docs/kernel-bypass.md); the binary must import
//	              verbs/soft/xdp, which holds the XDP program (seqd
//	              does; the client does not)
//	xdp_mode=auto|copy|zerocopy  how the AF_XDP sockets bind (default
//	              auto: zero-copy where the driver offers it)
//
// # Talking to RDMA NICs
//
// An Address with Port 0 means the RoCEv2 port, 4791, as on a NIC. A
// device on port 4791 with several queues binds every queue to 4791
// (SO_REUSEPORT) and attaches a classic BPF program that steers each
// datagram to queue DestQP mod queues, where CreateQP puts the QP; UDP GRO
// is off there (it would merge packets for different queues). To a peer
// on 4791 a GSO run holds one destination QP's packets.
//
// The ICRC covers the IPv4 Identification, which a UDP socket never
// sees. On transmit, a lone DF datagram leaves with ID 0 and the kernel
// (or NIC) numbers the segments it cuts from a GSO message 0, 1, 2...:
// segment k's ICRC is computed for ID k. On receive, a packet whose ICRC
// is not right for ID 0 has the ID recovered from the difference
// (rocev2.IDTerms; counted as rx_icrc_ip_id), which accepts segmented
// runs, rxe and NICs, at the price of a 2^-16 instead of 2^-32 chance
// of taking a corrupt packet (Ethernet's FCS stays in front).
package soft
