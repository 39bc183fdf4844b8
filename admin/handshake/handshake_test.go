package handshake

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/seqd/seqd/admin/adminpb"
	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs"
)

func ep(port uint16, qpn verbs.QPN) Endpoint {
	return Endpoint{Addr: verbs.Address{GID: verbs.GIDFromAddr(netip.MustParseAddr("192.0.2.7")), Port: port}, QPN: qpn}
}

// validGrant is a grant of mode's shape for n client QPs, every field
// the shape names filled and distinct.
func validGrant(f spec.ModeFacts, n int) Grant {
	s := f.Grant
	g := Grant{Mode: f.Name, Format: spec.FormatHybrid, Session: 11, Epoch: 12, Window: 16, QKey: 0x1111, AnswerQKey: 0x2222, High: 99}
	if s.RequestQPs {
		g.ServerQPs = []Endpoint{ep(1, 0x10), ep(1, 0x11)}
		for i := range n {
			g.Assignment = append(g.Assignment, uint32(i%2))
		}
	}
	if s.ConnQPs {
		for i := range n {
			g.ServerConnQPs = append(g.ServerConnQPs, ep(2, verbs.QPN(0x20+i)))
		}
	}
	for i := range s.ConnPSNs * n {
		g.ConnPSNs = append(g.ConnPSNs, verbs.PSN(0xabc000+i))
	}
	regions := s.Regions * n
	if s.SharedRegion {
		regions = 1
	}
	for i := range regions {
		g.RemoteAddr = append(g.RemoteAddr, 0x1000*uint64(i+1))
		g.RKey = append(g.RKey, uint32(0x77+i))
	}
	if s.AnswerQPs {
		g.AnswerQPs = []Endpoint{ep(3, 0x30), ep(3, verbs.MaxQPN)}
	}
	return g
}

func validAdmission(n int) Admission {
	a := Admission{Name: "c", Window: 16}
	for i := range n {
		a.QPs = append(a.QPs, ep(4, verbs.QPN(0x40+i)))
	}
	return a
}

// wire is m through protobuf's wire format, as the other end sees it.
func wire[M proto.Message](t testing.TB, m M) M {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	out := m.ProtoReflect().New().Interface().(M)
	if err := proto.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRoundTrip: every value decodes, through the wire format, to what
// was encoded: a grant of every mode's shape, an admission with and
// without connected QPs, a session reference.
func TestRoundTrip(t *testing.T) {
	const n = 3
	for _, f := range spec.ModeTable {
		req := wire(t, EncodeAdmission(validAdmission(n), f.Name))
		want := validGrant(f, n)
		got, err := DecodeGrant(req, wire(t, EncodeGrant(want)))
		if err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: decoded\n%+v\nencoded\n%+v", f.Name, got, want)
		}
	}
	for _, want := range []Admission{validAdmission(1), validAdmission(n)} {
		want.ConnQPs = append([]Endpoint(nil), want.QPs...)
		for i := range want.ConnQPs {
			want.ConnQPs[i].QPN += 0x100
		}
		for _, a := range []Admission{want, {Name: want.Name, Window: want.Window, QPs: want.QPs}} {
			got, err := DecodeAdmission(wire(t, EncodeAdmission(a, spec.ModeHERD)), spec.ModeHERD)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, a) {
				t.Errorf("admission decoded\n%+v\nencoded\n%+v", got, a)
			}
		}
	}
	r := SessionRef{ID: 5, Epoch: 6}
	d := wire(t, EncodeSessionRef(r, []byte("0123456789abcdef")))
	if got := DecodeSessionRef(d); got != r || string(d.GetSessionToken()) != "0123456789abcdef" {
		t.Errorf("session ref %+v (token %q), want %+v", got, d.GetSessionToken(), r)
	}
}

// TestEncodeGrantProtocolFields: the answer carries this end's protocol
// version, the mode and the format by name.
func TestEncodeGrantProtocolFields(t *testing.T) {
	f, _ := spec.Facts(spec.ModeFaSST)
	resp := EncodeGrant(validGrant(f, 1))
	if resp.GetProtocolVersion() != spec.ProtocolVersion || resp.GetMode() != spec.ModeFaSST || resp.GetFormat() != "hybrid" {
		t.Fatalf("version %d mode %q format %q", resp.GetProtocolVersion(), resp.GetMode(), resp.GetFormat())
	}
	req := EncodeAdmission(validAdmission(1), spec.ModeFaSST)
	if req.GetProtocolVersion() != spec.ProtocolVersion || req.GetMode() != spec.ModeFaSST {
		t.Fatalf("request version %d mode %q", req.GetProtocolVersion(), req.GetMode())
	}
}

// TestDecodeGrantRejects: each rule of DecodeGrant refuses the one
// answer that breaks it, with the kind of error it documents, and
// returns no grant.
func TestDecodeGrantRejects(t *testing.T) {
	const n = 2
	facts := func(m string) spec.ModeFacts { f, _ := spec.Facts(m); return f }
	type tc struct {
		name  string
		mode  string
		spoil func(req *adminpb.ConnectRequest, resp *adminpb.ConnectResponse)
		want  error
		why   string // in the error: the rule that refused it
	}
	cases := []tc{
		{"older version", spec.ModeSpecS0, func(_ *adminpb.ConnectRequest, r *adminpb.ConnectResponse) { r.ProtocolVersion-- }, ErrMismatch, `protocol version 1`},
		{"newer version", spec.ModeSpecS0, func(_ *adminpb.ConnectRequest, r *adminpb.ConnectResponse) { r.ProtocolVersion++ }, ErrMismatch, `protocol version 3`},
		{"another mode", spec.ModeSpecS0, func(_ *adminpb.ConnectRequest, r *adminpb.ConnectResponse) { r.Mode = spec.ModeFaSST }, ErrMismatch, `granted mode "fasst"`},
		{"unknown mode", spec.ModeSpecS0, func(q *adminpb.ConnectRequest, r *adminpb.ConnectResponse) { q.Mode, r.Mode = "", "nope" }, ErrMismatch, `"nope"`},
		{"no mode", spec.ModeSpecS0, func(_ *adminpb.ConnectRequest, r *adminpb.ConnectResponse) { r.Mode = "" }, ErrMismatch, `granted mode ""`},
		{"window above asked", spec.ModeSpecS0, func(q *adminpb.ConnectRequest, r *adminpb.ConnectResponse) { r.Window = q.Window + 1 }, ErrMalformed, `window 17 granted`},
		{"remote_addr without rkey", spec.ModeSpecS0, func(_ *adminpb.ConnectRequest, r *adminpb.ConnectResponse) { r.RemoteAddr = []uint64{1} }, ErrMalformed, `1 remote_addr, 0 rkey`},
		{"PSN above 24 bits", spec.ModeDaRPC, func(_ *adminpb.ConnectRequest, r *adminpb.ConnectResponse) { r.ConnPsns[1] = 1 << 24 }, ErrMalformed, `conn_psns[1]`},
		// spec-s0 and fasst: UD request QPs and assignments.
		{"no server_qps", spec.ModeSpecS0, func(_ *adminpb.ConnectRequest, r *adminpb.ConnectResponse) { r.ServerQps = nil }, ErrMalformed, `no server_qps`},
		{"short assignment", spec.ModeSpecS0, func(_ *adminpb.ConnectRequest, r *adminpb.ConnectResponse) { r.Assignment = r.Assignment[:1] }, ErrMalformed, `1 assignment, want 2`},
		{"assignment out of range", spec.ModeFaSST, func(_ *adminpb.ConnectRequest, r *adminpb.ConnectResponse) { r.Assignment[1] = 2 }, ErrMalformed, `assignment[1] = 2`},
		{"qkey 0", spec.ModeFaSST, func(_ *adminpb.ConnectRequest, r *adminpb.ConnectResponse) { r.Qkey = 0 }, ErrMalformed, `qkey 0`},
		{"no answer_qps", spec.ModeSpecS0, func(_ *adminpb.ConnectRequest, r *adminpb.ConnectResponse) { r.AnswerQps = nil }, ErrMalformed, `no answer_qps`},
		{"answer_qkey 0", spec.ModeHERD, func(_ *adminpb.ConnectRequest, r *adminpb.ConnectResponse) { r.AnswerQkey = 0 }, ErrMalformed, `answer_qkey 0`},
		{"window 0", spec.ModeRFP, func(_ *adminpb.ConnectRequest, r *adminpb.ConnectResponse) { r.Window = 0 }, ErrMalformed, `window 0`},
		// the connected modes: one server QP per client QP, PSNs, regions.
		{"server_conn_qps short", spec.ModeHERD, func(_ *adminpb.ConnectRequest, r *adminpb.ConnectResponse) { r.ServerConnQps = r.ServerConnQps[:1] }, ErrMalformed, `1 server_conn_qps, want 2`},
		{"conn_psns one per QP for two", spec.ModeRFP, func(_ *adminpb.ConnectRequest, r *adminpb.ConnectResponse) { r.ConnPsns = r.ConnPsns[:n] }, ErrMalformed, `2 conn_psns, want 4`},
		{"regions one per QP for two", spec.ModeRFP, func(_ *adminpb.ConnectRequest, r *adminpb.ConnectResponse) {
			r.RemoteAddr, r.Rkey = r.RemoteAddr[:n], r.Rkey[:n]
		}, ErrMalformed, `2 remote_addr, want 4`},
		{"shared region twice", spec.ModeAtomics, func(_ *adminpb.ConnectRequest, r *adminpb.ConnectResponse) {
			r.RemoteAddr, r.Rkey = append(r.RemoteAddr, 1), append(r.Rkey, 1)
		}, ErrMalformed, `2 remote_addr, want 1`},
		{"grant for fewer QPs than asked", spec.ModeAtomics, func(q *adminpb.ConnectRequest, _ *adminpb.ConnectResponse) {
			q.Qps = append(q.Qps, q.Qps[0])
		}, ErrMalformed, `2 server_conn_qps, want 3`},
	}
	// Every endpoint field, each way an endpoint is malformed.
	for _, field := range []struct {
		mode string
		eps  func(*adminpb.ConnectResponse) []*adminpb.Endpoint
	}{
		{spec.ModeSpecS0, (*adminpb.ConnectResponse).GetServerQps},
		{spec.ModeHERD, (*adminpb.ConnectResponse).GetServerConnQps},
		{spec.ModeHERD, (*adminpb.ConnectResponse).GetAnswerQps},
	} {
		for _, bad := range []struct {
			name string
			set  func(*adminpb.Endpoint)
			why  string
		}{
			{"short address", func(e *adminpb.Endpoint) { e.Address = e.Address[:19] }, "[1]: address is 19 bytes"},
			{"long address", func(e *adminpb.Endpoint) { e.Address = append(e.Address, 0) }, "[1]: address is 21 bytes"},
			{"QPN 0", func(e *adminpb.Endpoint) { e.Qpn = 0 }, "[1]: qpn 0 outside"},
			{"QPN above 24 bits", func(e *adminpb.Endpoint) { e.Qpn = uint32(verbs.MaxQPN) + 1 }, "[1]: qpn 16777216 outside"},
		} {
			cases = append(cases, tc{field.mode + " endpoint " + bad.name, field.mode,
				func(_ *adminpb.ConnectRequest, r *adminpb.ConnectResponse) { bad.set(field.eps(r)[1]) }, ErrMalformed, bad.why})
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := EncodeAdmission(validAdmission(n), c.mode)
			resp := EncodeGrant(validGrant(facts(c.mode), n))
			if _, err := DecodeGrant(req, resp); err != nil {
				t.Fatalf("the unspoilt answer: %v", err)
			}
			c.spoil(req, resp)
			g, err := DecodeGrant(req, resp)
			if !errors.Is(err, c.want) {
				t.Fatalf("DecodeGrant = %v, want %v", err, c.want)
			}
			if !strings.Contains(err.Error(), c.why) {
				t.Fatalf("DecodeGrant = %v, want it refused for %q", err, c.why)
			}
			if !reflect.DeepEqual(g, Grant{}) {
				t.Fatalf("a refused answer decoded to %+v", g)
			}
		})
	}
}

// TestDecodeGrantLenient: what DecodeGrant leaves to the reader: a
// format it does not know is the zero format (no prediction); a request
// without a window or mode takes the answer's.
func TestDecodeGrantLenient(t *testing.T) {
	f, _ := spec.Facts(spec.ModeSpecS0)
	req := EncodeAdmission(validAdmission(1), "")
	req.Window = 0
	resp := EncodeGrant(validGrant(f, 1))
	resp.Format = "sundial"
	g, err := DecodeGrant(req, resp)
	if err != nil || g.Format != 0 || g.Mode != spec.ModeSpecS0 || g.Window != 16 {
		t.Fatalf("DecodeGrant = %+v, %v", g, err)
	}
}

// TestDecodeAdmissionRejects: each rule of DecodeAdmission refuses the
// one request that breaks it.
func TestDecodeAdmissionRejects(t *testing.T) {
	for _, c := range []struct {
		name  string
		spoil func(*adminpb.ConnectRequest)
		want  error
	}{
		{"another mode", func(r *adminpb.ConnectRequest) { r.Mode = spec.ModeFaSST }, ErrMismatch},
		{"older version", func(r *adminpb.ConnectRequest) { r.ProtocolVersion-- }, ErrMismatch},
		{"no QPs", func(r *adminpb.ConnectRequest) { r.Qps, r.ConnQps = nil, nil }, ErrMalformed},
		{"conn_qps for some QPs", func(r *adminpb.ConnectRequest) { r.ConnQps = r.ConnQps[:1] }, ErrMalformed},
		{"QP twice", func(r *adminpb.ConnectRequest) { r.Qps[1] = r.Qps[0] }, ErrMalformed},
		{"short address", func(r *adminpb.ConnectRequest) { r.Qps[1].Address = nil }, ErrMalformed},
		{"QPN 0", func(r *adminpb.ConnectRequest) { r.ConnQps[1].Qpn = 0 }, ErrMalformed},
		{"QPN above 24 bits", func(r *adminpb.ConnectRequest) { r.ConnQps[0].Qpn = 1 << 24 }, ErrMalformed},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := validAdmission(2)
			a.ConnQPs = []Endpoint{ep(5, 1), ep(5, 2)}
			req := EncodeAdmission(a, spec.ModeHERD)
			if _, err := DecodeAdmission(req, spec.ModeHERD); err != nil {
				t.Fatalf("the unspoilt request: %v", err)
			}
			c.spoil(req)
			got, err := DecodeAdmission(req, spec.ModeHERD)
			if !errors.Is(err, c.want) {
				t.Fatalf("DecodeAdmission = %v, want %v", err, c.want)
			}
			if !reflect.DeepEqual(got, Admission{}) {
				t.Fatalf("a refused request decoded to %+v", got)
			}
		})
	}
	// A client above the server's version, and one naming no mode, are
	// admitted.
	req := EncodeAdmission(validAdmission(1), "")
	req.ProtocolVersion++
	if _, err := DecodeAdmission(req, spec.ModeHERD); err != nil {
		t.Fatalf("newer client, no mode: %v", err)
	}
}
