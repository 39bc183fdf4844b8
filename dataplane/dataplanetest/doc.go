// Package dataplanetest is the conformance suite every data-path mode
// must pass, as verbs/verbstest is the one every verbs provider passes.
//
// A mode's package has one test that runs it with the mode's factory:
//
//	func TestConformance(t *testing.T) {
//		dataplanetest.Run(t, dataplanetest.Harness{Name: spec.ModeFaSST, Start: Start})
//	}
//
// A test of package modes fails when a mode of spec.ModeTable has no
// such test, so a new mode runs the suite from its first commit.
//
// The suite holds a mode to the contract of dataplane.Mode:
//
//   - Lifecycle: Admit grants a fresh session of the mode's epoch;
//     Release ends it once; a replacing Admit takes over the session it
//     names and keeps it when refused. The mode itself checks the epoch
//     of every SessionRef (the one layer that does): a ref of another
//     epoch names no session, for Release and for Admit's replaces alike.
//   - Churn: thousands of admit/release cycles from distinct addresses
//     leave no session, no capacity and no per-address state behind.
//   - StopClose: Stop and Close may each be called any number of times,
//     in any order and at once; nothing is admitted after Stop.
//   - Errors: every error is one of dataplane's kinds, the right one;
//     Stats counters are named as Prometheus expects, once each.
//   - Hostile: admissions asking for too much are refused or cut down
//     to the configured bounds; an admitted client that forges packets
//     of every operation on every transport to the QPs its grant names
//     (right ICRC, Q_Key and PSN; random payloads, keys and operands)
//     neither crashes the mode nor stops it serving an honest client.
//   - Serve, SourcePorts, Switch and Wire run real clients over the soft
//     provider: calls are answered in order, also for a NIC-like peer
//     that sends from a random source port, across a stop and restart
//     under a new epoch (a mode switch out and back in), and, for modes
//     whose facts say so, for loadgen's wire generator.
//
// Each part is a function of a testing.TB, so that the suite's own tests
// run it against deliberately broken modes and see it fail.
package dataplanetest
