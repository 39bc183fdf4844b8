// Package ha runs seqd highly available on etcd: instances campaign for
// leadership on a lease, the leader persists the oracle's high-water mark
// in etcd, and standbys point clients at the leader. seqd grows no
// consensus protocol of its own; etcd is the only source of truth.
//
// # Terms
//
// A Node campaigns with go.etcd.io/etcd/client/v3/concurrency on a lease
// of Config.TTL. Each time it wins, a Term begins: the election key and
// its create revision identify it. The Term ends, and never begins again,
// when the lease's local deadline passes, when a keep-alive reports the
// lease gone, when a save is refused because the election key changed,
// when the operator transfers leadership, or when the Node stops.
//
// # Invariants and ordering contracts
//
//  1. Fence BEFORE expiry. The local deadline of a lease is the send time
//     of the last keep-alive (or grant) that etcd answered, plus the TTL
//     it granted, minus Config.Margin. etcd cannot expire the lease before
//     send time + TTL, so the deadline passes at least Margin before any
//     other instance can win. Term.Gate refuses every claim once the
//     deadline has passed, on the monotonic clock, so a leader that was
//     paused (SIGSTOP, a long GC, a slow disk: tikv/pd#3423) hands out
//     nothing when it resumes, before it has even noticed.
//  2. Check leadership IN the transaction. Store.Save writes the mark in
//     one etcd transaction whose guards are: the term's election key still
//     has the term's create revision, and the new mark is above the stored
//     one. A deposed leader's save is refused (tikv/pd#9157), and the mark
//     never moves backward. A transaction that fails may have committed:
//     the Store re-reads the election key and the mark, and takes the
//     save as done only when the mark holds exactly its target while the
//     term's election key stands (no other term can have written that
//     target). Otherwise the save failed, and the retry of the same
//     target is resolved the same way rather than refused for ever.
//  3. Persist BEFORE serve. A new term opens a fresh oracle over the
//     term's Store: it loads the mark (a linearizable read made after the
//     win), starts above it (and, in hybrid format, at or above now<<18),
//     and saves its first window before Open returns. Nothing from an
//     earlier term's memory is reused (tikv/pd#4884).
//  4. Fail closed. When etcd loses its majority, keep-alives fail, the
//     deadline passes and the leader stops serving. It serves again only
//     after it wins a new term on a working etcd.
//  5. No fresh start without consent. A missing mark is a new group only
//     when the Node was told so (Config.Init, -init) or is recovering
//     above a value (Config.Advance, -advance); otherwise the term's Load
//     fails with ErrNoMark and Node.Run returns it: a mistyped prefix or
//     a wiped etcd stops the instance instead of serving values again.
//     The consent ends when the Node first sees the mark (loaded, saved,
//     or watched being written by another instance), so an etcd wiped
//     later is refused too. A Store never overwrites an existing mark.
//  6. The group's state is fenced like the mark. What an admin call sets
//     and the group must keep (the data-path mode) is written with
//     Term.SaveState under the same election-key guard, and read by each
//     new term (Term.LoadState) before it serves.
//  7. No going back on etcd's word. With Config.DataDir each instance
//     keeps a Witness: the highest mark it has loaded, saved (before the
//     save returns, so before anything is served from it) or watched
//     being written. A term whose loaded mark is below the witness, or
//     missing while it consents to a fresh start, fails with
//     ErrMarkBehind and Node.Run returns it: a restored etcd snapshot or
//     another group's prefix stops the instance instead of serving values
//     again, unless Config.Advance (or, in hybrid format, the clock) is
//     above the witness. A fresh data directory trusts etcd's mark.
//
// Together, (1) and (2) mean every value of a later term is above every
// value of an earlier one, and no earlier term answers a call that starts
// after a later term answered one: the service stays linearizable across
// failovers.
//
// # Fast failover: the serving lease
//
// etcd leases count whole seconds and cannot be shorter than about one
// and a half election timeouts, so waiting for etcd to expire a dead
// leader's lease cannot fail over in under a second. With Config.Beat on
// (the default; -ha-beat, -ha-serve-lease) a finer lease rides on top:
//
//   - The leader renews a serving lease every Beat (H): it reads its
//     monotonic clock (s), then writes the heartbeat key Prefix+"/beat",
//     naming its term, in a transaction guarded like a save (the term's
//     election key still has the term's create revision). When etcd
//     answers that the write succeeded, the serving deadline moves to
//     s + ServeLease (L), unless it is later already. Heartbeats go out
//     every H whether or not the last was answered (up to L/H in
//     flight), so the gate stays open while etcd answers within L − H.
//     Term.Gate also refuses once that deadline has passed, and a new
//     term serves nothing before its first heartbeat.
//     A heartbeat whose guard fails ends the term ("deposed").
//   - Every instance watches the heartbeat key and the election. When
//     the current leader's own heartbeat, received at time o on the
//     standby's monotonic clock, has not been followed by another by
//     o + D (Config.TakeoverAfter), the standby deletes the leader's
//     election key in a transaction conditioned on the heartbeat key's
//     mod revision still being the one it received and on the key's
//     create revision. The next candidate in the election then wins, as
//     it would after a revocation. Before it deposes, the standby writes
//     a probe key of its own under the same comparison on the heartbeat,
//     and goes on only if etcd committed it within L/2: when etcd is what
//     is slow, the leader's heartbeats wait too, its gate closes by
//     itself, and a new leader would face the same etcd (and send every
//     client to reconnect), so the standby waits D again
//     (Node.etcdPrompt). A leader that never wrote a heartbeat
//     naming its term (one running with Beat off, or one that died before
//     its first) is never deposed this way: etcd expires its lease.
//
// Safety. The deposition of term T committed at revision x; the
// heartbeat key's mod revision at x is the revision r the standby
// received, so every heartbeat of T that committed before x has a
// revision at most r, and every one after x fails its guard (T's
// election key is gone, and no later key has its create revision). Let m
// be, among T's committed heartbeats, the one whose clock reading s_m is
// the latest. etcd commits in revision order and answers after
// committing, so m was committed, and s_m read, before the standby
// received r at o. T's gate admits nothing after s_m + L on T's
// clock (the deadline is the largest s + L among answered heartbeats,
// and an answered heartbeat is a committed one), and its data path answers nothing later
// than spec.MaxResidence after the request arrived, before the gate
// check. With every monotonic clock's rate within MaxDrift (ρ) of real
// time, T's last answer leaves before real(s_m) + (L + MaxResidence)/(1-ρ),
// and the deposition commits after real(o) + D/(1+ρ) > real(s_m) +
// D/(1+ρ). TakeoverAfter is D = (L + MaxResidence)(1+ρ)/(1-ρ) +
// TakeoverSlack, so T's last answer leaves before the deposition, and a
// new term serves only after it has won, after the deposition: no
// earlier term answers after a later one did. Nothing here depends on how
// long a message takes: a late heartbeat answer only shortens the
// leader's lease, a late watch event only delays the standby, and a
// stale view fails the transaction's comparison.
//
// The bounds it relies on: clock rates within MaxDrift (1%; NTP slews at
// most 0.05%), monotonic clocks that keep counting while a process is
// stopped (SIGSTOP, GC pauses, a stuck disk: they do; a suspended host's
// CLOCK_MONOTONIC does not, which the etcd-lease fence of (1) assumes as
// well), the data path's residence bound, and etcd's linearizability.
//
// Standbys learn the leader's advertised admin address from the election
// (Node.Leader) and answer Connect with a redirect (adminclient.RedirectError).
//
// # Connect storms after a failover
//
// After a leader's kill -9 every client asks the standbys who leads.
// While the group elects (no leader named, the named one's heartbeat
// silent for more than two Beats: Node.LeaderSilent, or the instance's
// own term not serving yet) a standby holds a Status, parked, until a
// leader serves (package haserve, Config.StatusHold; LeaderChanged wakes
// it), so a client learns the new leader with one call per instance
// instead of asking again with growing pauses. None of this is part of
// the safety argument above: LeaderSilent decides nothing (depositions
// stay detect's, conditioned in etcd), a held Status is answered from a
// fresh look at the term after the hold, and a client's Connect is
// admitted only by a term whose gate is open.
package ha
