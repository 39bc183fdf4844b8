// Package modes runs one data-path mode at a time — any mode of
// spec.ModeTable, each implemented by its own package — behind one admin
// backend, and switches between them at run time (SetMode).
//
// Every mode is a dataplane.Mode started by its dataplane.Factory, listed
// by one line in registry; a name not there is an unknown mode. modes is
// the one place that speaks the admin protocol for them: package
// modes/adminmode turns ConnectRequest into handshake.Admission, Grant
// into ConnectResponse and DisconnectRequest into SessionRef (through
// admin/handshake, their one codec), and Stats into StatusResponse and
// the metrics seqd_<Metrics>_* (the table's metrics prefix: Spec-S0's are
// seqd_headeronly_*).
//
// # Switching
//
// SetMode holds the switch lock (Connect, Disconnect and Status wait), then
//
//  1. stops the current mode: its workers drain and every QP it owns moves
//     to ERR or is destroyed, so late requests get no answer;
//  2. takes the highest value the old mode could have handed out: the
//     oracle's current value for the CPU modes, the NIC counter for
//     atomics (read after its QPs are in ERR);
//  3. floors the oracle above it (oracle.Floor), so the new mode's first
//     value is above every value handed out before the switch — the
//     oracle's persister saves a mark above it BEFORE any claim succeeds;
//  4. starts the new mode with a new epoch.
//
// Clients see their requests go unanswered (or their RC QPs fail), look up
// the server's mode and epoch, reconnect and resend: calls in flight are
// retried transparently under the new mode, and their values are claimed
// after the switch, hence after the calls started.
package modes
