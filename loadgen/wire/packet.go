package wire

import (
	"encoding/binary"

	"github.com/seqd/seqd/spec"
	"github.com/seqd/seqd/verbs/rocev2"
)

// Packet lengths: a request and a confirmation are header-only; a full
// answer carries the 8-byte value.
const (
	reqLen  = rocev2.UDImmLen
	fullLen = rocev2.UDImmLen + spec.FullLen
	maxSegs = 64 // UDP GSO segments per message (UDP_MAX_SEGMENTS on older kernels)
)

// idTerms holds, for one packet length, what IPv4 ID k (k < maxSegs)
// XORs into an ICRC computed for ID 0: a GSO message's segment k leaves
// with ID k.
type idTerms struct {
	t    rocev2.IDTerms
	term [maxSegs]uint32
}

func newIDTerms(n int) *idTerms {
	x := &idTerms{}
	x.t.Set(n)
	for k := range x.term {
		x.term[k] = x.t.Term(uint16(k))
	}
	return x
}

var (
	reqIDs  = newIDTerms(reqLen)
	fullIDs = newIDTerms(fullLen)
)

// sender builds one flow's requests: everything but the PSN, the
// immediate and the ICRC is fixed for the flow.
type sender struct {
	prefix uint32 // the ICRC state after the flow's masked IPv4/UDP headers
	icrc   rocev2.UDImmICRC
	destQP uint32
	qkey   uint32
	srcQP  uint32
	psn    uint32
}

func newSender(f rocev2.Flow, destQP, qkey, srcQP uint32) sender {
	f.FlagsFrag = 0x4000 // DF, as Linux writes it for a socket with path-MTU discovery on
	return sender{prefix: f.Prefix(reqLen), destQP: destQP, qkey: qkey, srcQP: srcQP}
}

// put writes the request with immediate imm as segment k of a GSO
// message into b[:reqLen].
func (s *sender) put(b []byte, imm uint32, k int) {
	s.icrc.Put(b, s.prefix, s.destQP, s.psn, s.qkey, s.srcQP, imm)
	c := b[reqLen-rocev2.ICRCLen : reqLen]
	binary.LittleEndian.PutUint32(c, binary.LittleEndian.Uint32(c)^reqIDs.term[k])
	s.psn = (s.psn + 1) & 0xffffff
}

// answer is a parsed answer packet.
type answer struct {
	destQP, srcQP, qkey uint32
	imm                 uint32
	payload             []byte // a full answer's 8 bytes (aliasing the packet); nil for a confirmation
}

// parseAnswer decodes a Spec-S0 answer (a header-only or 8-byte UD
// SEND_WITH_IMM with the default P_Key, no pad, transport version 0),
// or reports false. It does not check the ICRC.
func parseAnswer(b []byte, a *answer) bool {
	if len(b) != reqLen && len(b) != fullLen {
		return false
	}
	if b[0] != byte(rocev2.UDSendOnlyWithImm) || b[1]&0x3f != 0 || binary.BigEndian.Uint16(b[2:])&0x7fff != 0x7fff {
		return false
	}
	a.destQP = binary.BigEndian.Uint32(b[4:]) & 0xffffff
	a.qkey = binary.BigEndian.Uint32(b[12:])
	a.srcQP = binary.BigEndian.Uint32(b[16:]) & 0xffffff
	a.imm = binary.BigEndian.Uint32(b[20:])
	a.payload = nil
	if len(b) == fullLen {
		a.payload = b[24 : 24+spec.FullLen]
	}
	return true
}

// receiver checks the ICRCs of one flow's answers.
type receiver struct {
	src    [4]byte
	port   uint16
	flow   rocev2.Flow
	pre    [3]uint32 // prefixes for reqLen, fullLen and erpcAnsLen
	icrc   rocev2.UDImmICRC
	eicrc  rocev2.Patcher // eRPC answers
	primed bool
}

// icrcOK reports whether answer b, segment k of a datagram from
// src:port, carries a valid ICRC: for IPv4 ID k (what the kernel numbers
// GSO segments), else for any ID (a sender that numbers otherwise).
func (r *receiver) icrcOK(b []byte, k int, src [4]byte, port uint16) bool {
	if !r.primed || src != r.src || port != r.port {
		r.flow.Src, r.flow.SrcPort, r.src, r.port = src, port, src, port
		r.flow.FlagsFrag = 0x4000
		r.pre = [3]uint32{r.flow.Prefix(reqLen), r.flow.Prefix(fullLen), r.flow.Prefix(erpcAnsLen)}
		r.primed = true
	}
	got := binary.LittleEndian.Uint32(b[len(b)-rocev2.ICRCLen:])
	var sum0 uint32
	ids := reqIDs
	switch len(b) {
	case reqLen:
		sum0 = r.icrc.ICRC(r.pre[0], b)
	case erpcAnsLen:
		sum0, ids = r.eicrc.ICRC(r.pre[2], b), erpcAnsIDs
	default:
		sum0, ids = rocev2.ICRCFrom(r.pre[1], b), fullIDs
	}
	if k < maxSegs && sum0^ids.term[k] == got {
		return true
	}
	_, ok := ids.t.Solve(sum0, got)
	return ok
}

// herdReqLen is a HERD request: a UC RDMA WRITE Only of one 8-byte slot.
const herdReqLen = rocev2.BTHLen + rocev2.RETHLen + spec.SlotLen + rocev2.ICRCLen

var herdIDs = newIDTerms(herdReqLen)

// herdSender builds one HERD flow's requests from a template: per
// request the PSN, the slot's address (RETH VA), its sequence number and
// the ICRC change.
type herdSender struct {
	prefix uint32
	tmpl   [herdReqLen]byte
	base   uint64 // the address of the flow's slot 0
	psn    uint32
}

func newHerdSender(f rocev2.Flow, destQP uint32, base uint64, rkey uint32) herdSender {
	f.FlagsFrag = 0x4000
	s := herdSender{prefix: f.Prefix(herdReqLen), base: base}
	p := rocev2.Packet{Opcode: rocev2.TransportUC | rocev2.OpWriteOnly, PKey: rocev2.DefaultPKey, DestQP: destQP,
		VA: base, RKey: rkey, DMALen: spec.SlotLen, Payload: make([]byte, spec.SlotLen)}
	spec.PutSlot(p.Payload, 1)
	if _, err := p.Encode(s.tmpl[:]); err != nil {
		panic(err) // a fixed, valid packet
	}
	return s
}

// put writes the request for position pos under seq as segment k of a
// GSO message into b[:herdReqLen].
func (s *herdSender) put(b []byte, pos int, seq spec.Seq, k int) {
	b = b[:herdReqLen]
	copy(b, s.tmpl[:])
	b[9], b[10], b[11] = byte(s.psn>>16), byte(s.psn>>8), byte(s.psn)
	binary.BigEndian.PutUint64(b[rocev2.BTHLen:], s.base+uint64(pos*spec.SlotLen))
	binary.BigEndian.PutUint32(b[rocev2.BTHLen+rocev2.RETHLen+spec.SlotSeqOff:], uint32(seq))
	binary.LittleEndian.PutUint32(b[herdReqLen-rocev2.ICRCLen:], rocev2.ICRCFrom(s.prefix, b)^herdIDs.term[k])
	s.psn = (s.psn + 1) & 0xffffff
}

// eRPC packets: UD SEND Only (BTH, DETH) carrying the eRPC header (a
// request) or the header and the first value (an answer).
const (
	erpcReqLen = rocev2.BTHLen + rocev2.DETHLen + spec.ERPCRequestLen + rocev2.ICRCLen
	erpcAnsLen = rocev2.BTHLen + rocev2.DETHLen + spec.ERPCAnswerLen + rocev2.ICRCLen
	erpcHdrOff = rocev2.BTHLen + rocev2.DETHLen
)

var (
	erpcReqIDs = newIDTerms(erpcReqLen)
	erpcAnsIDs = newIDTerms(erpcAnsLen)
)

// erpcSender builds one eRPC flow's requests from a template: per
// request the PSN, the slot, the request number and the ICRC.
type erpcSender struct {
	prefix uint32
	tmpl   [erpcReqLen]byte
	psn    uint32
	icrc   rocev2.Patcher // the ICRC, patched from the last request's
}

func newERPCSender(f rocev2.Flow, destQP, qkey, srcQP uint32, session uint64) erpcSender {
	f.FlagsFrag = 0x4000
	s := erpcSender{prefix: f.Prefix(erpcReqLen)}
	p := rocev2.Packet{Opcode: rocev2.UDSendOnly, PKey: rocev2.DefaultPKey, DestQP: destQP, QKey: qkey, SrcQP: srcQP,
		Payload: make([]byte, spec.ERPCRequestLen)}
	if err := spec.PutERPCHeader(p.Payload, spec.ERPCHeader{Op: spec.ERPCOpRequest, Count: 1, Session: session, ReqNum: 1}); err != nil {
		panic(err) // a fixed, valid header
	}
	if _, err := p.Encode(s.tmpl[:]); err != nil {
		panic(err) // a fixed, valid packet
	}
	return s
}

// put writes the request of slot under request number rn as segment k
// of a GSO message into b[:erpcReqLen].
func (s *erpcSender) put(b []byte, slot int, rn uint64, k int) {
	b = b[:erpcReqLen]
	copy(b, s.tmpl[:])
	b[9], b[10], b[11] = byte(s.psn>>16), byte(s.psn>>8), byte(s.psn)
	b[erpcHdrOff+2] = byte(slot)
	binary.BigEndian.PutUint64(b[erpcHdrOff+16:], rn)
	binary.LittleEndian.PutUint32(b[erpcReqLen-rocev2.ICRCLen:], s.icrc.ICRC(s.prefix, b)^erpcReqIDs.term[k])
	s.psn = (s.psn + 1) & 0xffffff
}

// parseERPCAnswer decodes an eRPC answer packet's transport headers
// (UD SEND Only, default P_Key, no pad, version 0) into a, with the
// eRPC payload in a.payload, or reports false. It checks neither the
// ICRC nor the eRPC header.
func parseERPCAnswer(b []byte, a *answer) bool {
	if len(b) != erpcAnsLen {
		return false
	}
	if b[0] != byte(rocev2.UDSendOnly) || b[1]&0x3f != 0 || binary.BigEndian.Uint16(b[2:])&0x7fff != 0x7fff {
		return false
	}
	a.destQP = binary.BigEndian.Uint32(b[4:]) & 0xffffff
	a.qkey = binary.BigEndian.Uint32(b[12:])
	a.srcQP = binary.BigEndian.Uint32(b[16:]) & 0xffffff
	a.imm = 0
	a.payload = b[erpcHdrOff : erpcHdrOff+spec.ERPCAnswerLen]
	return true
}
