package spec

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// RFP (mode rfp): the remote fetching paradigm (Su et al., EuroSys '17).
// The client RDMA-WRITEs a request slot into server memory, the server
// CPU writes the answer into a response record in its own memory, and
// the client fetches the record with RDMA READ, up to R times, then asks
// the server to SEND it (PROTOCOL.md, "RFP").

// RFPVersion is the version byte of every RFP request slot and record.
const RFPVersion = 1

// Layout of one RFP request slot: RFPSlotLen bytes in the server's request
// block, written by the client with one inlined RC RDMA WRITE.
//
//	 0        1        2                                                 8
//	+--------+--------+-------------------------------------------------+
//	|version | opcode |        seq (big endian, 48 bits)                |
//	+--------+--------+-------------------------------------------------+
//
// As in HERD the sequence number is last (a WRITE lands in increasing
// address order) and the slot is one aligned 8-byte word; zero is an
// empty slot. The sequence number is 48 bits, not HERD's 24: a stale
// response record stays readable in server memory, so a client must
// never expect the same sequence number twice on one slot (2^48 WRITEs
// at one per 100 ns take 325 days).
//
// Layout of one RFP response record: RFPRecordLen bytes, written by the
// server into its response block (the client READs it) and carried by a
// fallback SEND.
//
//	 0                8                16               24               32
//	+----------------+----------------+----------------+----------------+
//	|      head      |     value      |     check      |      tail      |
//	+----------------+----------------+----------------+----------------+
//
// head and tail are the same 8 bytes: version, 0, seq (48 bits, big
// endian). value is big endian. check is big endian
// Mix64(Mix64(value) XOR head XOR Mix64(2^32 + tag)), tag being the
// session's answer tag (Grant.AnswerQKey, 31 random bits): for any two
// of (value, head, tag) fixed it is injective in the third, and every
// input bit flips about half of its bits. The server stores value,
// check, tail and head, in this order, each with one aligned 8-byte
// store; a record is accepted only when head and tail carry the expected
// seq and check matches (PROTOCOL.md, "RFP: torn reads").
const (
	RFPSlotLen   = 8
	RFPRecordLen = 32
	// RFPSeqBits is the width of an RFP sequence number; they run
	// 1..RFPSeqMask and wrap to 1 (0 means "empty").
	RFPSeqBits = 48
	RFPSeqMask = 1<<RFPSeqBits - 1
	// RFPMaxWindow is the most slots one client QP gets.
	RFPMaxWindow = 256
	// RFPDefaultReads is R, how many READs a client issues for one
	// request before it asks for a server reply: the paper's choice
	// (R=5; its measured fetch counts above 1 are rare and never above
	// 9).
	RFPDefaultReads = 5
	// RFPMaxReads bounds the knob.
	RFPMaxReads = 64
)

// RFP slot opcodes.
const (
	// RFPOpFetch asks for one value, written into the slot's response
	// record; the client READs it.
	RFPOpFetch = 1
	// RFPOpReply asks for the answer to the slot's seq by SEND as well:
	// the client READ R times without finding it. A seq already
	// answered gets its record again, without a new claim.
	RFPOpReply = 2
)

// Errors of the RFP decoders.
var (
	// ErrRFPNotReady: the record holds another seq (or none): not yet
	// written, or stale.
	ErrRFPNotReady = errors.New("spec: rfp record not ready")
	// ErrRFPTorn: the record's head names the expected seq but its tail
	// or check disagree: a READ raced the server's write, or the record
	// is forged.
	ErrRFPTorn = errors.New("spec: rfp record torn")
)

// RFPSeq is an RFP slot sequence number: 1..RFPSeqMask, never 0.
type RFPSeq uint64

// Valid reports whether s is a usable sequence number.
func (s RFPSeq) Valid() bool { return s != 0 && s <= RFPSeqMask }

// Next returns the sequence number after s, skipping 0.
func (s RFPSeq) Next() RFPSeq {
	n := (s + 1) & RFPSeqMask
	if n == 0 {
		n = 1
	}
	return n
}

// After reports whether s is newer than o in 48-bit serial arithmetic.
func (s RFPSeq) After(o RFPSeq) bool {
	d := (s - o) & RFPSeqMask
	return d != 0 && d < 1<<(RFPSeqBits-1)
}

func (s RFPSeq) String() string { return fmt.Sprintf("seq:%d", uint64(s)) }

// RFPSlot is a decoded RFP request slot.
type RFPSlot struct {
	Version, Opcode uint8
	Seq             RFPSeq
}

// PutRFPSlot encodes a request with opcode op and sequence number s into
// b, which must hold RFPSlotLen bytes.
func PutRFPSlot(b []byte, op uint8, s RFPSeq) error {
	if len(b) < RFPSlotLen {
		return fmt.Errorf("%w: slot buffer of %d bytes, want %d", ErrBadLength, len(b), RFPSlotLen)
	}
	if op != RFPOpFetch && op != RFPOpReply {
		return fmt.Errorf("%w: %d", ErrBadOpcode, op)
	}
	if !s.Valid() {
		return fmt.Errorf("%w: %d", ErrBadSeq, uint64(s))
	}
	binary.BigEndian.PutUint64(b, uint64(s))
	b[0], b[1] = RFPVersion, op
	return nil
}

// DecodeRFPSlot decodes the bytes of one slot (untrusted). An all-zero
// slot is ErrEmptySlot.
func DecodeRFPSlot(b []byte) (RFPSlot, error) {
	if len(b) != RFPSlotLen {
		return RFPSlot{}, fmt.Errorf("%w: slot of %d bytes, want %d", ErrBadLength, len(b), RFPSlotLen)
	}
	s := RFPSlot{Version: b[0], Opcode: b[1], Seq: RFPSeq(binary.BigEndian.Uint64(b) & RFPSeqMask)}
	switch {
	case s.Version == 0 && s.Opcode == 0 && s.Seq == 0:
		return s, ErrEmptySlot
	case s.Version != RFPVersion:
		return s, fmt.Errorf("%w: %d", ErrBadVersion, s.Version)
	case s.Opcode != RFPOpFetch && s.Opcode != RFPOpReply:
		return s, fmt.Errorf("%w: %d", ErrBadOpcode, s.Opcode)
	case !s.Seq.Valid():
		return s, fmt.Errorf("%w: %d", ErrBadSeq, uint64(s.Seq))
	}
	return s, nil
}

// Mix64 is a bijection on 64-bit words with full avalanche (the
// splitmix64 finalizer): the check of a response record.
func Mix64(z uint64) uint64 {
	z ^= z >> 30
	z *= 0xbf58476d1ce4e5b9
	z ^= z >> 27
	z *= 0x94d049bb133111eb
	z ^= z >> 31
	return z
}

// rfpHead is a record's head (and tail) as a big-endian word.
func rfpHead(s RFPSeq) uint64 { return uint64(RFPVersion)<<56 | uint64(s)&RFPSeqMask }

// RFPCheck is the check word of the record (tag, s, v).
func RFPCheck(tag uint32, s RFPSeq, v uint64) uint64 {
	return Mix64(Mix64(v) ^ rfpHead(s) ^ Mix64(uint64(tag)|1<<32))
}

// PutRFPRecord encodes the record answering seq s with value v for the
// session whose answer tag is tag into b (RFPRecordLen bytes).
func PutRFPRecord(b []byte, tag uint32, s RFPSeq, v uint64) error {
	if len(b) < RFPRecordLen {
		return fmt.Errorf("%w: record buffer of %d bytes, want %d", ErrBadLength, len(b), RFPRecordLen)
	}
	if !s.Valid() {
		return fmt.Errorf("%w: %d", ErrBadSeq, uint64(s))
	}
	h := rfpHead(s)
	binary.BigEndian.PutUint64(b[0:], h)
	binary.BigEndian.PutUint64(b[8:], v)
	binary.BigEndian.PutUint64(b[16:], RFPCheck(tag, s, v))
	binary.BigEndian.PutUint64(b[24:], h)
	return nil
}

// RFPRecordWords returns the record (tag, s, v) as the four 8-byte words a
// host stores (native byte order: the memory holds PutRFPRecord's bytes),
// head first. The server stores words 1, 2, 3, then 0.
func RFPRecordWords(tag uint32, s RFPSeq, v uint64) (w [4]uint64, err error) {
	var b [RFPRecordLen]byte
	if err := PutRFPRecord(b[:], tag, s, v); err != nil {
		return w, err
	}
	for i := range w {
		w[i] = binary.NativeEndian.Uint64(b[8*i:])
	}
	return w, nil
}

// CheckRFPRecord checks the record b (untrusted: a READ may have raced
// the server's write) against the session's tag and the seq the client
// expects, and returns its value. ErrRFPNotReady: the head names another
// seq or none; ErrRFPTorn: the head names want but the tail or check
// disagree.
func CheckRFPRecord(b []byte, tag uint32, want RFPSeq) (uint64, error) {
	if len(b) != RFPRecordLen {
		return 0, fmt.Errorf("%w: record of %d bytes, want %d", ErrBadLength, len(b), RFPRecordLen)
	}
	h := rfpHead(want)
	if binary.BigEndian.Uint64(b[0:]) != h {
		return 0, ErrRFPNotReady
	}
	v := binary.BigEndian.Uint64(b[8:])
	if binary.BigEndian.Uint64(b[24:]) != h || binary.BigEndian.Uint64(b[16:]) != RFPCheck(tag, want, v) {
		return 0, ErrRFPTorn
	}
	return v, nil
}

// RFPSlotState is what the server keeps per slot: the last seq it read,
// whether that one was answered (its record written) and whether it was
// sent. Pure: the worker drives it.
type RFPSlotState struct {
	Last     RFPSeq
	Value    uint64 // the answer to Last, when Answered
	Answered bool
	Sent     bool
}

// RFPAction is what the server does with a slot it read.
type RFPAction uint8

// Actions.
const (
	// RFPIgnore: a duplicate or older request; nothing to do.
	RFPIgnore RFPAction = iota
	// RFPAnswer: claim a value and write the record.
	RFPAnswer
	// RFPAnswerSend: claim a value, write the record and SEND it.
	RFPAnswerSend
	// RFPResend: SEND the record of Last again (Value); no claim.
	RFPResend
)

func (a RFPAction) String() string {
	switch a {
	case RFPIgnore:
		return "ignore"
	case RFPAnswer:
		return "answer"
	case RFPAnswerSend:
		return "answer+send"
	case RFPResend:
		return "resend"
	}
	return fmt.Sprintf("RFPAction(%d)", uint8(a))
}

// Take decides what to do with slot sl and updates the state. A new seq
// (after Last) is answered, and sent too if it asks for a reply; a reply
// request for Last is sent from the stored answer, once, or answered
// afresh if Last was dropped unanswered; anything else is ignored. The
// caller reports a written record with Answer.
func (st *RFPSlotState) Take(sl RFPSlot) RFPAction {
	switch {
	case st.Last == 0 || sl.Seq.After(st.Last):
		*st = RFPSlotState{Last: sl.Seq, Sent: sl.Opcode == RFPOpReply}
		if st.Sent {
			return RFPAnswerSend
		}
		return RFPAnswer
	case sl.Seq != st.Last || sl.Opcode != RFPOpReply || st.Sent:
		return RFPIgnore
	}
	st.Sent = true
	if st.Answered {
		return RFPResend
	}
	return RFPAnswerSend
}

// Answer records that the record of Last now holds v.
func (st *RFPSlotState) Answer(v uint64) { st.Value, st.Answered = v, true }

// RFPReplyImm is the immediate of a fallback SEND: the slot's window
// position. The payload is the record.
func RFPReplyImm(pos int) (uint32, error) {
	if pos < 0 || pos >= RFPMaxWindow {
		return 0, fmt.Errorf("%w: %d", ErrBadPos, pos)
	}
	return uint32(pos), nil
}

// DecodeRFPReply checks a fallback SEND's immediate against the window
// and returns the position; the payload is checked by CheckRFPRecord.
func DecodeRFPReply(imm uint32, window int, payloadLen int) (int, error) {
	if payloadLen != RFPRecordLen {
		return 0, fmt.Errorf("%w: reply carries %d bytes, want %d", ErrBadLength, payloadLen, RFPRecordLen)
	}
	if imm >= uint32(window) || imm >= RFPMaxWindow {
		return 0, fmt.Errorf("%w: %d of a window of %d", ErrBadPos, imm, window)
	}
	return int(imm), nil
}
