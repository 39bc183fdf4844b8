package spec

import "strings"

// The admin-plane names of the data-path modes (ConnectRequest.mode,
// SetModeRequest.mode, seqd -mode, loadgen -modes). Each is specified in
// PROTOCOL.md under its own heading.
const (
	// ModeSpecS0: header-only UD SENDs whose immediate carries a tag and
	// a speculated high part ("Spec-S0").
	ModeSpecS0 = "spec-s0"
	// ModeHERD: requests RDMA-WRITten (UC) into server slots, answers
	// by UD SEND ("HERD-RPC").
	ModeHERD = "herd"
	// ModeAtomics: RDMA fetch-and-add on a counter in server memory.
	ModeAtomics = "atomics"
	// ModeFaSST: UD SEND requests and answers with a small payload; one
	// request asks for k values ("FaSST RPCs").
	ModeFaSST = "fasst"
	// ModeDaRPC: RC SEND/RECV, workers owning clusters of connections
	// with one CQ each; batched calls, combined answers ("DaRPC").
	ModeDaRPC = "darpc"
	// ModeRFP: requests RDMA-WRITten into server slots, answers fetched
	// by the client with RDMA READ ("RFP").
	ModeRFP = "rfp"
	// ModeERPC: eRPC sessions of 8 slots over UD SENDs with a payload
	// header; credits, go-back-N, at-most-once ("eRPC").
	ModeERPC = "erpc"
)

// ModeFacts is what the rest of the code needs to know about one mode.
// Every list of modes (HA's, the wire generator's, flag help, the NIC-wire
// test's, the alerts' and dashboard's rows) is derived from ModeTable; a
// test (modelist_test.go) fails when one is written by hand.
type ModeFacts struct {
	// Name is the mode's admin-plane name (the constants above).
	Name string
	// NoHA, when set, says why an HA group cannot run the mode; empty:
	// its values are claimed from the term's oracle, under the lease gate.
	NoHA string
	// Ranges: the mode serves GetRange (k values in one request).
	Ranges bool
	// Wire: loadgen's wire generator (-engine wire) speaks the mode.
	Wire bool
	// Metrics names the mode's metrics, seqd_<Metrics>_*, and the alerts
	// and dashboard row that watch them.
	Metrics string
	// Help is a one-line description for flag help and docs.
	Help string
	// Grant is the shape of the mode's Connect answer.
	Grant GrantShape
}

// HA reports whether an HA group can run the mode.
func (f ModeFacts) HA() bool { return f.NoHA == "" }

// ModeTable holds every mode's facts, in the order of the comparison
// tables. It is the one hand-written list of modes.
var ModeTable = []ModeFacts{
	{Name: ModeSpecS0, Wire: true, Metrics: "headeronly",
		Help:  "header-only UD SENDs, the value speculated from the immediate",
		Grant: GrantShape{RequestQPs: true, AnswerQPs: true, AnswerQKey: true, Window: true}},
	{Name: ModeHERD, Wire: true, Metrics: "herd",
		Help:  "requests RDMA-written into server slots, answers by UD SEND",
		Grant: GrantShape{ConnQPs: true, Regions: 1, AnswerQPs: true, AnswerQKey: true, Window: true}},
	{Name: ModeAtomics, Metrics: "atomics",
		NoHA: "its counter lives in the NIC, which hands out values without the CPU: " +
			"the lease gate cannot stop it in time when the leader is paused or cut off, " +
			"so a deposed leader could answer after its successor did",
		Help:  "RDMA fetch-and-add on a counter in server memory",
		Grant: GrantShape{ConnQPs: true, ConnPSNs: 1, SharedRegion: true}},
	{Name: ModeFaSST, Ranges: true, Metrics: "fasst",
		Help:  "UD SEND requests and answers with a payload; ranges of k values",
		Grant: GrantShape{RequestQPs: true, QKey: true, AnswerQPs: true, AnswerQKey: true, Window: true}},
	{Name: ModeDaRPC, Metrics: "darpc",
		Help:  "RC SEND/RECV, batched calls and combined answers",
		Grant: GrantShape{ConnQPs: true, ConnPSNs: 1, Window: true}},
	{Name: ModeRFP, Metrics: "rfp",
		Help:  "requests RDMA-written into server slots, answers fetched by RDMA READ",
		Grant: GrantShape{ConnQPs: true, ConnPSNs: 2, Regions: 2, AnswerQKey: true, Window: true}},
	{Name: ModeERPC, Wire: true, Ranges: true, Metrics: "erpc",
		Help:  "eRPC sessions over UD SENDs: slots, credits, go-back-N, at-most-once retransmissions",
		Grant: GrantShape{RequestQPs: true, QKey: true, AnswerQPs: true, AnswerQKey: true, Window: true}},
}

// Modes lists every mode, in the order of ModeTable.
var Modes = ModesWhere(func(ModeFacts) bool { return true })

// ModesWhere lists the modes whose facts satisfy keep, in table order.
func ModesWhere(keep func(ModeFacts) bool) []string {
	var ms []string
	for _, f := range ModeTable {
		if keep(f) {
			ms = append(ms, f.Name)
		}
	}
	return ms
}

// Facts returns mode's facts; false for a name outside ModeTable.
func Facts(mode string) (ModeFacts, bool) {
	for _, f := range ModeTable {
		if f.Name == mode {
			return f, true
		}
	}
	return ModeFacts{}, false
}

// HAModes are the modes an HA group can run.
func HAModes() []string { return ModesWhere(ModeFacts.HA) }

// WireModes are the modes loadgen's wire generator speaks.
func WireModes() []string { return ModesWhere(func(f ModeFacts) bool { return f.Wire }) }

// RangeModes are the modes that serve GetRange.
func RangeModes() []string { return ModesWhere(func(f ModeFacts) bool { return f.Ranges }) }

// ModeList writes ms for prose and help text: "a, b or c".
func ModeList(ms []string) string {
	switch len(ms) {
	case 0:
		return "none"
	case 1:
		return ms[0]
	}
	return strings.Join(ms[:len(ms)-1], ", ") + " or " + ms[len(ms)-1]
}

// ModeHelp describes every mode, one line each ("  name: help"), for
// flag usage text.
func ModeHelp() string {
	var b strings.Builder
	for _, f := range ModeTable {
		b.WriteString("\n  " + f.Name + ": " + f.Help)
	}
	return b.String()
}
