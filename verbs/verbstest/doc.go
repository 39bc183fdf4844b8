// Package verbstest is the conformance suite every verbs provider must
// pass, and the small helpers it is built from.
//
// A provider's test calls Run with an Opener that returns two devices able
// to reach each other (for hardware, the same NIC opened twice):
//
//	func TestConformance(t *testing.T) {
//		verbstest.Run(t, func(t *testing.T) (a, b verbs.Device) {
//			return open(t, "127.0.0.1:0"), open(t, "127.0.0.1:0")
//		})
//	}
//
// Every subtest opens fresh devices and closes everything it made, so a
// failure in one cannot leak into the next. The suite checks data, status,
// opcode, flags and lengths of every completion, and never sleeps and
// hopes: a missing completion is a failure after a bounded wait, and
// "nothing arrived" is always proven by a later marked message that did.
//
// The helpers (PollN, PollOne, ExpectEmpty, NewEnd, UDPair, ConnectPair,
// ...) are exported so that protocol packages can write short tests over
// any provider.
package verbstest
