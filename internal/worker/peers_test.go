package worker

import (
	"errors"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/seqd/seqd/admin/handshake"
	"github.com/seqd/seqd/dataplane"
	"github.com/seqd/seqd/internal/ahcache"
	"github.com/seqd/seqd/verbs"
)

// portsDev is a device that shows UDP source ports in its completions
// (the soft provider) or not (a NIC).
type portsDev struct{ queuesDev }

func (d portsDev) Attr() verbs.DeviceAttr { return verbs.DeviceAttr{SourcePorts: true} }

func ipAddr(s string, port uint16) verbs.Address {
	return verbs.Address{GID: verbs.GIDFromAddr(netip.MustParseAddr(s)), Port: port}
}

func TestPeerIDs(t *testing.T) {
	soft, nic := &Config{Device: portsDev{}}, &Config{Device: queuesDev{}}
	a5000, a5001 := ipAddr("10.0.0.1", 5000), ipAddr("10.0.0.1", 5001)
	a0, a4791 := ipAddr("10.0.0.1", 0), ipAddr("10.0.0.1", verbs.RoCEv2Port)
	for _, c := range []struct {
		name string
		cfg  *Config
		qps  []handshake.Endpoint
		ok   bool
	}{
		{"soft: two ports, one QPN", soft, []handshake.Endpoint{{Addr: a5000, QPN: 7}, {Addr: a5001, QPN: 7}}, true},
		{"soft: one port, two QPNs", soft, []handshake.Endpoint{{Addr: a5000, QPN: 7}, {Addr: a5000, QPN: 8}}, true},
		{"soft: the same QP twice", soft, []handshake.Endpoint{{Addr: a5000, QPN: 7}, {Addr: a5000, QPN: 7}}, false},
		{"4791 is port 0", soft, []handshake.Endpoint{{Addr: a0, QPN: 7}, {Addr: a4791, QPN: 7}}, false},
		{"NIC: ports are no part of it", nic, []handshake.Endpoint{{Addr: a5000, QPN: 7}, {Addr: a5001, QPN: 7}}, false},
		{"NIC: two QPNs", nic, []handshake.Endpoint{{Addr: a5000, QPN: 7}, {Addr: a5001, QPN: 8}}, true},
		{"no QPs", soft, nil, false},
		{"QPN of 25 bits", soft, []handshake.Endpoint{{Addr: a5000, QPN: 1 << 24}}, false},
	} {
		ids, err := c.cfg.PeerIDs(c.qps)
		if c.ok != (err == nil) || err != nil && !errors.Is(err, dataplane.ErrInvalidArgument) {
			t.Errorf("%s: PeerIDs = %v, %v", c.name, ids, err)
			continue
		}
		for i, id := range ids {
			if want := verbs.SenderFor(c.qps[i].Addr, c.qps[i].QPN, c.cfg.Device.Attr().SourcePorts); id != want {
				t.Errorf("%s: qps[%d] is %+v, want %+v", c.name, i, id, want)
			}
		}
	}
}

type testPeer struct{ name string }

// TestPeersLookup: a completion finds the peer registered with its
// source port, else the one registered without a port (a NIC-style
// sender), and no other.
func TestPeersLookup(t *testing.T) {
	var tab Peers[testPeer]
	soft := &testPeer{"soft"}        // a soft device's QP with a port of its own
	nic := &testPeer{"nic"}          // a NIC's QP: (IP, QPN) only
	shadowed := &testPeer{"nic, 10"} // port-blind, on the IP and QPN of a ported peer
	sIP, nIP := ipAddr("10.0.0.1", 5000), ipAddr("10.0.0.2", 0)
	tab.Put(verbs.SenderOf(sIP, 0x10), soft)
	tab.Put(verbs.SenderOf(nIP, 0x20), nic)
	tab.Put(verbs.SenderOf(ipAddr("10.0.0.1", 0), 0x10), shadowed)
	at := func(a verbs.Address, port uint16) verbs.Address { a.Port = port; return a }
	for _, c := range []struct {
		name string
		src  verbs.Address
		qpn  verbs.QPN
		want *testPeer
	}{
		{"its own port", sIP, 0x10, soft},
		{"another port of the soft peer's IP: the port-blind one", at(sIP, 5001), 0x10, shadowed},
		{"a NIC's random source port", at(nIP, 0xc123), 0x20, nic},
		{"a NIC seen by a NIC (no port)", at(nIP, 0), 0x20, nic},
		{"a NIC from 4791", at(nIP, verbs.RoCEv2Port), 0x20, nic},
		{"another QPN", at(nIP, 0xc123), 0x21, nil},
		{"another IP", ipAddr("10.0.0.3", 0xc123), 0x20, nil},
	} {
		wc := verbs.WC{Src: c.src, SrcQP: c.qpn}
		if got := tab.Load().Lookup(&wc); got != c.want {
			t.Errorf("%s: Lookup = %v, want %v", c.name, got, c.want)
		}
	}
	// Lookup agrees with verbs.SenderKeys' two lookups in a map of
	// Senders (the reference).
	ref := map[verbs.Sender]*testPeer{}
	for _, x := range []struct {
		a verbs.Address
		q verbs.QPN
		p *testPeer
	}{{sIP, 0x10, soft}, {nIP, 0x20, nic}, {ipAddr("10.0.0.1", 0), 0x10, shadowed}} {
		ref[verbs.SenderOf(x.a, x.q)] = x.p
	}
	for _, src := range []verbs.Address{sIP, at(sIP, 0), at(sIP, 5001), at(sIP, verbs.RoCEv2Port), nIP, at(nIP, 0xc000), at(nIP, 0xffff)} {
		for _, qpn := range []verbs.QPN{0x10, 0x20, 0x30} {
			wc := verbs.WC{Src: src, SrcQP: qpn}
			exact, anyPort := verbs.SenderKeys(&wc)
			want := ref[exact]
			if want == nil {
				want = ref[anyPort]
			}
			if got := tab.Load().Lookup(&wc); got != want {
				t.Errorf("from %v QPN %v: Lookup = %v, SenderKeys = %v", src, qpn, got, want)
			}
		}
	}
	var empty Peers[testPeer]
	if p := empty.Load().Lookup(&verbs.WC{Src: sIP, SrcQP: 0x10}); p != nil {
		t.Errorf("an empty table found %v", p)
	}
}

// TestPeersCopyOnWrite: a published map never changes; Delete removes
// only the peer it names (not one that replaced it).
func TestPeersCopyOnWrite(t *testing.T) {
	var tab Peers[testPeer]
	m0 := tab.Load()
	if m0 == nil || m0.Len() != 0 || tab.Load() != m0 {
		t.Fatalf("the zero table loads %v", m0)
	}
	id := verbs.SenderOf(ipAddr("10.0.0.1", 0), 1)
	a, b := &testPeer{"a"}, &testPeer{"b"}
	tab.Put(id, a)
	m1 := tab.Load()
	if m0.Len() != 0 || m1 == m0 || m1.Get(id) != a || tab.Get(id) != a {
		t.Fatalf("after Put: old has %d, new %v", m0.Len(), m1.Get(id))
	}
	tab.Put(id, b) // replaced
	tab.Delete(id, a)
	if tab.Get(id) != b || m1.Get(id) != a {
		t.Fatalf("Delete of a replaced peer: now %v, the old map %v", tab.Get(id), m1.Get(id))
	}
	tab.Delete(id, b)
	if tab.Get(id) != nil || tab.Load().Len() != 0 {
		t.Fatalf("after Delete: %d peers, id is %v", tab.Load().Len(), tab.Get(id))
	}
}

func TestPeersLookupAllocs(t *testing.T) {
	var tab Peers[testPeer]
	tab.Put(verbs.SenderOf(ipAddr("10.0.0.2", 0), 0x20), &testPeer{})
	wc := verbs.WC{Src: ipAddr("10.0.0.2", 0xc123), SrcQP: 0x20}
	if n := testing.AllocsPerRun(100, func() {
		if tab.Load().Lookup(&wc) == nil {
			t.Fatal("not found")
		}
	}); n != 0 {
		t.Errorf("Lookup allocates %v times", n)
	}
}

// BenchmarkPeersLookup: a soft sender found by its port, and a NIC-style
// sender found on the second lookup, in a table of 1,000 peers.
func BenchmarkPeersLookup(b *testing.B) {
	var tab Peers[testPeer]
	for i := range 1000 {
		tab.Put(verbs.SenderOf(ipAddr("10.0.0.1", uint16(5000+i)), verbs.QPN(i)), &testPeer{})
	}
	tab.Put(verbs.SenderOf(ipAddr("10.0.0.2", 0), 0x20), &testPeer{})
	for _, c := range []struct {
		name string
		wc   verbs.WC
	}{
		{"exact", verbs.WC{Src: ipAddr("10.0.0.1", 5500), SrcQP: 500}},
		{"any-port", verbs.WC{Src: ipAddr("10.0.0.2", 0xc123), SrcQP: 0x20}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			m := tab.Load()
			for range b.N {
				if m.Lookup(&c.wc) == nil {
					b.Fatal("not found")
				}
			}
		})
	}
}

// ahPD creates address handles, except for the address bad.
type ahPD struct {
	verbs.PD
	bad verbs.Address
}

type testAH struct{}

func (testAH) Close() error { return nil }

func (p ahPD) CreateAH(a verbs.AHAttr) (verbs.AH, error) {
	if a.Dest == p.bad {
		return nil, errConfig
	}
	return testAH{}, nil
}

// TestAdmitPeers: admitted peers carry what admission fixed and address
// their answers to the QP with the session's Q_Key; when one address has
// no handle, the handles taken for the others are given back.
func TestAdmitPeers(t *testing.T) {
	bad := ipAddr("10.0.0.9", 0)
	ahs := ahcache.New(ahPD{bad: bad}, time.Millisecond)
	qps := []handshake.Endpoint{{Addr: ipAddr("10.0.0.1", 5000), QPN: 1}, {Addr: ipAddr("10.0.0.2", 0), QPN: 2}}
	ids := []verbs.Sender{verbs.SenderOf(qps[0].Addr, 1), verbs.SenderOf(qps[1].Addr, 2)}
	now := time.Now()
	ps, err := AdmitPeers(ahs, qps, ids, 7, 0x1234, 16, now)
	if err != nil || len(ps) != 2 || ahs.Len() != 2 {
		t.Fatalf("AdmitPeers = %v, %v (%d handles)", ps, err, ahs.Len())
	}
	for i, p := range ps {
		if p.Addr != qps[i].Addr || p.QPN != qps[i].QPN || p.ID != ids[i] || p.AH == nil || p.Session != 7 || p.QKey != 0x1234 || p.Window != 16 {
			t.Errorf("peer %d: %+v", i, p)
		}
		var wr verbs.SendWR
		p.Address(&wr)
		if wr.AH != p.AH || wr.RemoteQPN != qps[i].QPN || wr.RemoteQKey != 0x1234 {
			t.Errorf("peer %d addresses %+v", i, wr)
		}
	}
	for _, p := range ps {
		ahs.Put(p.Addr, now)
	}
	qps = append(qps, handshake.Endpoint{Addr: bad, QPN: 3})
	ids = append(ids, verbs.SenderOf(bad, 3))
	if ps, err := AdmitPeers(ahs, qps, ids, 8, 1, 1, now); !errors.Is(err, dataplane.ErrInvalidArgument) || ps != nil {
		t.Fatalf("AdmitPeers with an address without a handle = %v, %v", ps, err)
	}
	if ahs.Reap(now.Add(time.Second)); ahs.Len() != 0 {
		t.Errorf("%d handles held after a failed admission", ahs.Len())
	}
}

// TestLastPeer: the cache answers as Lookup does, for a repeated sender
// and for a new one, unknown senders included.
func TestLastPeer(t *testing.T) {
	var tab Peers[testPeer]
	a, b := &testPeer{"a"}, &testPeer{"b"}
	aIP, bIP := ipAddr("10.0.0.1", 5000), ipAddr("10.0.0.2", 5000)
	tab.Put(verbs.SenderOf(aIP, 1), a)
	tab.Put(verbs.SenderOf(bIP, 1), b)
	m := tab.Load()
	var last LastPeer[testPeer]
	for i, c := range []struct {
		src  verbs.Address
		qpn  verbs.QPN
		want *testPeer
	}{{aIP, 1, a}, {aIP, 1, a}, {bIP, 1, b}, {bIP, 2, nil}, {bIP, 2, nil}, {aIP, 1, a}, {ipAddr("10.0.0.1", 5001), 1, nil}} {
		wc := verbs.WC{Src: c.src, SrcQP: c.qpn}
		if got := last.Lookup(m, &wc); got != c.want || got != m.Lookup(&wc) {
			t.Errorf("completion %d from %v QPN %v: %v, want %v", i, c.src, c.qpn, got, c.want)
		}
	}
}

// TestPeersShardedCopy: a change copies only the shard it is in: a table
// of 20,000 peers stays right through puts, replacements and deletes,
// and the maps of the other shards are shared with the version before.
func TestPeersShardedCopy(t *testing.T) {
	var tab Peers[testPeer]
	const n = 20000
	ps := make([]testPeer, n)
	id := func(i int) verbs.Sender {
		return verbs.SenderOf(ipAddr("10.1.0.1", uint16(40000+i%16)), verbs.QPN(0x100+i))
	}
	for i := range n {
		tab.Put(id(i), &ps[i])
	}
	before := tab.Load()
	if before.Len() != n {
		t.Fatalf("%d peers, want %d", before.Len(), n)
	}
	k := keyOf(id(7))
	tab.Delete(id(7), &ps[7])
	after := tab.Load()
	shared := 0
	for i := range peerShards {
		if len(before.shards[i]) > 0 && reflect.ValueOf(before.shards[i]).UnsafePointer() == reflect.ValueOf(after.shards[i]).UnsafePointer() {
			shared++
		}
	}
	if shared < peerShards-1 || after.Len() != n-1 || after.Get(id(7)) != nil || before.Get(id(7)) != &ps[7] {
		t.Fatalf("delete: %d shards shared (want %d), %d peers; shard %d", shared, peerShards-1, after.Len(), k.shard())
	}
	for i := range n {
		want := &ps[i]
		if i == 7 {
			want = nil
		}
		if got := after.Get(id(i)); got != want {
			t.Fatalf("peer %d: %v, want %v", i, got, want)
		}
	}
}
