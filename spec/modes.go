package spec

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
)

// Modes lists every mode, in the order of the comparison tables.
var Modes = []string{ModeSpecS0, ModeHERD, ModeAtomics, ModeFaSST, ModeDaRPC, ModeRFP}
