package verbs

// Sender is a queue pair a UD receiver accepts messages from: its
// address's GID, its QPN, and its UDP port where that is part of its
// identity.
//
// A sender's identity on the wire is (IP, QPN). The UDP source port is
// part of it only for a soft-provider device that gave its queues ports
// of their own (an Address with a Port other than 0 and 4791): an RDMA
// NIC, and a soft device on the RoCEv2 port, send from a source port
// chosen per address handle (mlx5: a random one in 0xC000-0xFFFF), which
// the receiver cannot know in advance, and a NIC receiver never sees the
// UDP header at all (WC.Src.Port is 0 on the ibv provider). Replies go to
// the address the peer registered, never to the source port a packet
// came from.
type Sender struct {
	GID  GID
	Port uint16 // 0: any source port (NIC-style)
	QPN  QPN
}

// SenderOf returns the Sender of the QP at a with number q: Port 0 and
// the RoCEv2 port both mean "any source port".
func SenderOf(a Address, q QPN) Sender {
	p := a.Port
	if p == RoCEv2Port {
		p = 0
	}
	return Sender{GID: a.GID, Port: p, QPN: q}
}

// SenderFor is SenderOf for a receiver that may not see source ports:
// where it does not (DeviceAttr.SourcePorts false: a NIC), the identity
// is (IP, QPN) alone, whatever port the address names.
func SenderFor(a Address, q QPN, sourcePorts bool) Sender {
	s := SenderOf(a, q)
	if !sourcePorts {
		s.Port = 0
	}
	return s
}

// SenderKeys returns the two Senders a UD receive completion may have
// come from, for looking a sender up in a map of registered Senders
// (SenderOf): first with its source port (a soft device with a port per
// queue), then without (a NIC-style sender). The second lookup is needed
// only when the first misses.
func SenderKeys(wc *WC) (exact, anyPort Sender) {
	exact = Sender{GID: wc.Src.GID, Port: wc.Src.Port, QPN: wc.SrcQP}
	anyPort = exact
	anyPort.Port = 0
	return exact, anyPort
}

// Senders is the set of queue pairs a receiver accepts messages from,
// such as the response QPs a server named at Connect. It is small (a
// server's response QPs), so a linear scan is the fastest lookup and
// allocates nothing.
type Senders []Sender

// Match reports whether a UD receive completion came from one of s: its
// source QPN (from the packet's DETH) and source address (from the GRH),
// and the UDP source port where s's entry has one and the completion
// shows one (a NIC receiver never does), must all be s's.
// Spoofing them takes a forged packet, so it is one check of two: the
// receiving QP's Q_Key is the other (spec/PROTOCOL.md, "Sessions").
func (s Senders) Match(wc *WC) bool {
	for i := range s {
		if s[i].QPN == wc.SrcQP && (s[i].Port == 0 || wc.Src.Port == 0 || s[i].Port == wc.Src.Port) && s[i].GID == wc.Src.GID {
			return true
		}
	}
	return false
}
