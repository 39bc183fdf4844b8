package verbs

// Sender is a queue pair a UD receiver accepts messages from: its
// address's GID and UDP port (the LID plays no part on RoCE), and its QPN.
type Sender struct {
	GID  GID
	Port uint16
	QPN  QPN
}

// Senders is the set of queue pairs a receiver accepts messages from,
// such as the response QPs a server named at Connect. It is small (a
// server's response QPs), so a linear scan is the fastest lookup and
// allocates nothing.
type Senders []Sender

// SenderOf returns the Sender of the QP at a with number q.
func SenderOf(a Address, q QPN) Sender { return Sender{GID: a.GID, Port: a.Port, QPN: q} }

// Match reports whether a UD receive completion came from one of s: its
// source QPN (from the packet's DETH) and source address (from the GRH,
// and on RoCEv2 over UDP the source port) must both be one of s's.
// Spoofing both takes a forged packet, so it is one check of two: the
// receiving QP's Q_Key is the other (spec/PROTOCOL.md, "Sessions").
func (s Senders) Match(wc *WC) bool {
	for i := range s {
		if s[i].QPN == wc.SrcQP && s[i].Port == wc.Src.Port && s[i].GID == wc.Src.GID {
			return true
		}
	}
	return false
}
