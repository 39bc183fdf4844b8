package worker

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/dataplane"
	"github.com/seqd/seqd/internal/ahcache"
	"github.com/seqd/seqd/verbs"
)

// PeerID is the identity on the wire of the client QP q at a, as a
// receiver on c.Device sees it (verbs.SenderFor): (IP, QPN), plus the UDP
// source port only where a has a port of its own and the device shows
// source ports. Every UD mode keys its peers by it.
func (c *Config) PeerID(a verbs.Address, q verbs.QPN) verbs.Sender {
	return verbs.SenderFor(a, q, c.Device.Attr().SourcePorts)
}

// PeerIDs checks the client QPs of an admission (CheckQPs) and returns
// each one's PeerID. Two QPs with the same identity on the wire are an
// error: the server could not tell their requests apart. Its errors wrap
// dataplane.ErrInvalidArgument.
func (c *Config) PeerIDs(qps []handshake.Endpoint) ([]verbs.Sender, error) {
	if err := CheckQPs(qps); err != nil {
		return nil, err
	}
	ids := make([]verbs.Sender, len(qps))
	for i, q := range qps {
		ids[i] = c.PeerID(q.Addr, q.QPN)
		for j, id := range ids[:i] {
			if id == ids[i] {
				return nil, fmt.Errorf("%w: qps[%d] and qps[%d] are one QP on the wire (%v QPN %v)",
					dataplane.ErrInvalidArgument, j, i, q.Addr, q.QPN)
			}
		}
	}
	return ids, nil
}

// Peer is what admission fixes about a client QP of a UD mode: the
// address and QPN it registered, its identity on the wire (PeerID), the
// address handle its answers go by, its session, that session's answer
// Q_Key and its window. A mode's peer type embeds it beside the fields
// its worker owns.
type Peer struct {
	Addr    verbs.Address
	QPN     verbs.QPN
	ID      verbs.Sender
	AH      verbs.AH
	Session uint64
	QKey    uint32 // the session's answer Q_Key
	Window  int
}

// Address addresses an answer to p: its address handle and QPN, with its
// session's answer Q_Key, which only the session's QPs accept.
func (p *Peer) Address(wr *verbs.SendWR) {
	wr.AH, wr.RemoteQPN, wr.RemoteQKey = p.AH, p.QPN, p.QKey
}

// AdmitPeers returns the Peers of a session's client QPs qps, whose
// identities are ids (Config.PeerIDs), each with an address handle taken
// from ahs. If one cannot be had, the handles taken are given back and
// the error wraps dataplane.ErrInvalidArgument. The caller holds the
// mutex that guards ahs.
func AdmitPeers(ahs *ahcache.Cache, qps []handshake.Endpoint, ids []verbs.Sender, session uint64, qkey uint32, window int, now time.Time) ([]Peer, error) {
	out := make([]Peer, len(qps))
	for i, q := range qps {
		ah, err := ahs.Get(q.Addr, now)
		if err != nil {
			for _, p := range out[:i] {
				ahs.Put(p.Addr, now)
			}
			return nil, fmt.Errorf("%w: address handle for %v: %v", dataplane.ErrInvalidArgument, q.Addr, err)
		}
		out[i] = Peer{Addr: q.Addr, QPN: q.QPN, ID: ids[i], AH: ah, Session: session, QKey: qkey, Window: window}
	}
	return out, nil
}

// PeerMap is one published version of a Peers table: the admitted client
// QPs of a worker by their identity on the wire (PeerID). It is never
// changed once published, so a worker that loaded it reads it without a
// lock, and a result cached with the map's address stays right while
// the map it loads is the same.
//
// It is peerShards maps, a peer in the one its key hashes to: publishing
// a change copies that one (about 1/256 of the peers) and the array of
// maps (2 KiB), not every peer. Copying them all, admission slowed as
// peers grew: 20,000 eRPC sessions were admitted at 740 a second, a
// whole table copied per Connect (bench-erpc.sh's sessions part).
type PeerMap[P any] struct {
	shards [peerShards]map[peerKey]*P
	n      int
}

// peerShards is how many maps a PeerMap is.
const (
	peerShardBits = 8
	peerShards    = 1 << peerShardBits
)

// peerKey is a verbs.Sender as a PeerMap holds it: 24 bytes without
// padding, which the map hashes and compares as plain memory (a Sender
// has two bytes of padding after its port, and is hashed field by
// field).
type peerKey struct {
	gid  verbs.GID
	qpn  verbs.QPN
	port uint32
}

func keyOf(s verbs.Sender) peerKey { return peerKey{s.GID, s.QPN, uint32(s.Port)} }

// shard is the index of the map that holds k: the QPN, the port and the
// address's last two bytes, Fibonacci-hashed (one multiply: it is on
// every request's path) to the top bits.
func (k *peerKey) shard() int {
	x := uint32(k.qpn) + k.port<<11 + uint32(k.gid[15])<<19 + uint32(k.gid[14])<<24
	return int((x * 0x9e3779b1) >> (32 - peerShardBits))
}

func (m *PeerMap[P]) get(k peerKey) *P { return m.shards[k.shard()][k] }

// Len is how many peers m holds.
func (m *PeerMap[P]) Len() int { return m.n }

// Lookup returns the peer a UD receive completion came from (nil: none):
// the one registered with the completion's source port, else the one
// registered without a port (a NIC-style sender, whose source port is
// chosen per address handle and no part of its identity). These are the
// two keys of verbs.SenderKeys, built here straight from the completion:
// building the Senders first and converting them cost as much as the
// lookup itself. The second lookup is made only when the first misses.
// It allocates nothing.
func (m *PeerMap[P]) Lookup(wc *verbs.WC) *P {
	k := peerKey{wc.Src.GID, wc.SrcQP, uint32(wc.Src.Port)}
	if p := m.get(k); p != nil {
		return p
	}
	k.port = 0
	return m.get(k)
}

// Get returns the peer registered with identity id (nil: none).
func (m *PeerMap[P]) Get(id verbs.Sender) *P { return m.get(keyOf(id)) }

// LastPeer is a batch's one-entry cache of Lookup: a client's requests
// arrive in runs (a GSO message, a window's burst), and a run looks its
// peer up once. The zero value is empty; it must not outlive the
// PeerMap it was filled from (one batch).
type LastPeer[P any] struct {
	src verbs.Address
	qpn verbs.QPN
	p   *P
	ok  bool
}

// Lookup is m.Lookup(wc), from the cache when wc has the last one's
// sender.
func (c *LastPeer[P]) Lookup(m *PeerMap[P], wc *verbs.WC) *P {
	if !c.ok || wc.SrcQP != c.qpn || wc.Src != c.src {
		c.src, c.qpn, c.p, c.ok = wc.Src, wc.SrcQP, m.Lookup(wc), true
	}
	return c.p
}

// Peers is a worker's table of admitted client QPs, copy-on-write: the
// worker loads the current PeerMap once per batch without a lock; the
// server changes it, holding its own mutex (one writer at a time), by
// publishing a modified copy. The zero value is an empty table.
type Peers[P any] struct {
	cur atomic.Pointer[PeerMap[P]]
}

// Load returns the current map, never nil. The caller must not change it.
func (t *Peers[P]) Load() *PeerMap[P] {
	if m := t.cur.Load(); m != nil {
		return m
	}
	return t.empty()
}

func (t *Peers[P]) empty() *PeerMap[P] {
	t.cur.CompareAndSwap(nil, &PeerMap[P]{})
	return t.cur.Load()
}

// Get returns the peer registered with identity id (nil: none).
func (t *Peers[P]) Get(id verbs.Sender) *P { return t.Load().Get(id) }

// Put publishes a copy of the table in which id is p. The caller holds
// the mutex that serialises the table's writers.
func (t *Peers[P]) Put(id verbs.Sender, p *P) {
	t.update(keyOf(id), p)
}

// Delete publishes a copy of the table without id, if id is p (a peer
// that replaced it stays). The caller holds the writers' mutex.
func (t *Peers[P]) Delete(id verbs.Sender, p *P) {
	if t.Get(id) != p {
		return
	}
	t.update(keyOf(id), nil)
}

// update publishes a copy of the table in which k is p, or without k
// when p is nil: the shard k is in is copied, the others shared.
func (t *Peers[P]) update(k peerKey, p *P) {
	old := t.Load()
	m := *old
	i := k.shard()
	sh := make(map[peerKey]*P, len(old.shards[i])+1)
	for key, v := range old.shards[i] {
		sh[key] = v
	}
	_, had := sh[k]
	switch {
	case p != nil:
		sh[k] = p
		if !had {
			m.n++
		}
	case had:
		delete(sh, k)
		m.n--
	}
	m.shards[i] = sh
	t.cur.Store(&m)
}
