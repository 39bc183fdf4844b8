package spec

// GrantShape is the shape of a mode's Connect answer (ConnectResponse):
// which of its fields the mode fills, and how many entries each has for
// a session of n client QPs. PROTOCOL.md describes each mode's fields
// under the mode's heading; admin/handshake.DecodeGrant refuses an answer
// of another shape before a client touches a QP with it. Fields a shape
// leaves out are not checked (and a client does not read them).
type GrantShape struct {
	// RequestQPs: server_qps names at least one QP, and assignment one
	// of them for each client QP (the UD QP its requests go to).
	RequestQPs bool
	// QKey: qkey, the Q_Key requests carry, is not zero.
	QKey bool
	// ConnQPs: server_conn_qps names one QP for each client QP (the RC
	// or UC QP it connects to).
	ConnQPs bool
	// ConnPSNs is how many entries conn_psns has per client QP.
	ConnPSNs int
	// Regions is how many remote_addr and rkey entries (each) there are
	// per client QP; SharedRegion: one of each for the whole session.
	Regions      int
	SharedRegion bool
	// AnswerQPs: answer_qps names at least one QP (the client accepts
	// answers from no other). AnswerQKey: answer_qkey is not zero.
	AnswerQPs, AnswerQKey bool
	// Window: the granted window is at least 1. In every mode it is at
	// most the window the request asked for.
	Window bool
}
