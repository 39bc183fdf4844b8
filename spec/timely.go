package spec

import "time"

// Timely congestion control (Mittal et al., SIGCOMM 2015) as eRPC runs
// it at each client session (thesis §6.4.2; eRPC's cc/timely.h): an RTT
// sample per answer moves the session's sending rate. Below TimelyTLow
// the rate grows additively; above TimelyTHigh it falls in proportion to
// how far the RTT overshoots; in between the EWMA of the RTT gradient
// decides: additive increase (five steps after TimelyHAIThresh negative
// gradients in a row) when it is not positive, multiplicative decrease
// by β × the gradient normalised by the minimum RTT when it is. One
// sample at most halves the rate, and the rate stays between
// TimelyMinRate (scaled to the link: NewTimely) and the link rate.
//
// The thresholds and the minimum RTT are eRPC's, for a fabric whose
// round trip is about TimelyMinRTT (2 µs on its NICs). Timely scales all
// three by the session's base RTT, the lowest it has sampled, over
// TimelyMinRTT (never below 1): a fabric ten times slower has ten times
// the thresholds, as the RTT is a queueing signal only in units of the
// fabric's own round trip. Over kernel UDP (a base RTT of 15 to 40 µs
// here) eRPC's 50 µs T_low is a scheduling hiccup, and its gradient
// normalised by 2 µs cut a session's rate to the floor in one sample:
// the false congestion eRPC's users reported. On an RDMA NIC the scale
// is about 1, and these are eRPC's values.
const (
	TimelyTLow      = 50 * time.Microsecond   // below: additive increase (and the bypass)
	TimelyTHigh     = 1000 * time.Microsecond // above: decrease
	TimelyMinRTT    = 2 * time.Microsecond    // normalises the gradient
	TimelyEWMA      = 0.46                    // α of the gradient's EWMA
	TimelyBeta      = 0.26                    // β, multiplicative decrease
	TimelyAddRate   = 5e6 / 8                 // additive step: 5 Mbit/s, in bytes/s
	TimelyMinRate   = 15e6 / 8                // floor: 15 Mbit/s, in bytes/s
	TimelyHAIThresh = 5                       // negative gradients before hyper-active increase

	// TimelyLinkRate is the line rate a session starts at and never
	// exceeds (bytes/s) unless told its link's: 100 Gbit/s, as no
	// provider seqd runs on is faster; a session at it is uncongested.
	TimelyLinkRate = 100e9 / 8
	// On a slow link the additive step and the floor are each at most a
	// thousandth of it (NewTimely): the floor must let an incast's
	// sessions share the link (a thousand at the floor fit it, where
	// eRPC's 15 Mbit/s each need 15 Gbit/s), and a step must stay small
	// against a session's share (a tenth of a 100-way incast's; one of a
	// hundredth overshot the share of each of 100 sessions, and the
	// incast rig's queue stayed as without CC). The step is eRPC's from
	// 5 Gbit/s up, the floor from 15 Gbit/s.
	TimelyAddShare   = 1.0 / 1000
	TimelyFloorShare = 1.0 / 1000
)

// Timely is one session's Timely state. Its zero value is not ready: use
// NewTimely. It is a value (no pointers): a session embeds it.
type Timely struct {
	Rate     float64 // bytes/s, Floor() ≤ Rate ≤ Link
	Link     float64 // the line rate
	prevRTT  time.Duration
	avgDiff  float64 // EWMA of RTT differences, seconds
	lastAt   time.Duration
	negCount int
	started  bool
	base     time.Duration // the lowest RTT sampled
	// add and floor are TimelyAddRate and TimelyMinRate, scaled to Link.
	add, floor float64

	// NoBypass runs every sample's update, T_low bypass off (the factor
	// analysis, thesis Table 6.2); false in use.
	NoBypass bool

	// Updates counts samples that ran the update, Bypassed those the
	// T_low bypass skipped, Above those of T_low or more, Lowered those
	// that lowered the rate; MinRate is the lowest rate ever set. Rates
	// counts the samples by the rate they left, a fraction of Link: at
	// it, in [½, 1), [1/10, ½), [1/100, 1/10) and below (RateBuckets).
	Updates, Bypassed, Above, Lowered uint64
	MinRate                           float64
	Rates                             [len(RateBuckets)]uint64
}

// RateBuckets are the lower bounds of Timely.Rates' buckets, as
// fractions of the link rate, highest first; the last takes the rest.
var RateBuckets = [...]float64{1, 0.5, 0.1, 0.01, 0}

// tally counts a sample in Rates.
func (t *Timely) tally() {
	f := t.Rate / t.Link
	for k, lo := range RateBuckets {
		if f >= lo || k == len(RateBuckets)-1 {
			t.Rates[k]++
			return
		}
	}
}

// NewTimely returns a session's Timely at the link rate (bytes/s; ≤ 0:
// TimelyLinkRate): its additive step is TimelyAddRate, at most
// TimelyAddShare of the link, and its floor TimelyMinRate, at most
// TimelyFloorShare of it.
func NewTimely(link float64) Timely {
	if link <= 0 {
		link = TimelyLinkRate
	}
	return Timely{Rate: link, Link: link, MinRate: link,
		add: min(TimelyAddRate, link*TimelyAddShare), floor: min(TimelyMinRate, link*TimelyFloorShare)}
}

// Floor is the lowest rate the session is held to (bytes/s).
func (t *Timely) Floor() float64 { return t.floor }

// Uncongested reports that the session sends at line rate: it bypasses
// the rate limiter.
func (t *Timely) Uncongested() bool { return t.Rate >= t.Link }

// Sample takes an RTT measured at now (the batch's one clock reading).
// Bypass: an uncongested session with an RTT below its T_low
// (TimelyTLow, scaled: Scale) would only
// add to a rate already at its cap, so the update is skipped (it reports
// false). A non-positive RTT is no sample.
func (t *Timely) Sample(now, rtt time.Duration) bool {
	if rtt <= 0 {
		return false
	}
	if t.base == 0 || rtt < t.base {
		t.base = rtt
	}
	tLow := t.scaled(TimelyTLow)
	if rtt >= tLow {
		t.Above++
	}
	if rtt < tLow && t.Uncongested() && !t.NoBypass {
		t.Bypassed++
		t.Rates[0]++    // at line rate
		t.prevRTT = rtt // the next gradient is taken from here
		t.lastAt = now
		t.started = true
		return false
	}
	before := t.Rate
	t.update(now, rtt)
	if t.Rate < before {
		t.Lowered++
	}
	t.tally()
	return true
}

// Scale is the session's base RTT over TimelyMinRTT, at least 1: the
// factor of its thresholds and minimum RTT.
func (t *Timely) Scale() float64 {
	return max(1, float64(t.base)/float64(TimelyMinRTT))
}

// scaled is d times Scale.
func (t *Timely) scaled(d time.Duration) time.Duration {
	return time.Duration(float64(d) * t.Scale())
}

func (t *Timely) update(now, rtt time.Duration) {
	t.Updates++
	minRTT, tLow, tHigh := t.scaled(TimelyMinRTT), t.scaled(TimelyTLow), t.scaled(TimelyTHigh)
	if !t.started {
		t.started, t.prevRTT, t.lastAt = true, rtt, now
	}
	diff := (rtt - t.prevRTT).Seconds()
	t.prevRTT = rtt
	// The weight of a sample grows with the time since the last update,
	// up to one minimum RTT (eRPC's delta factor).
	delta := 1.0
	if el := now - t.lastAt; el >= 0 && el < minRTT {
		delta = float64(el) / float64(minRTT)
	}
	t.lastAt = now
	t.avgDiff = (1-TimelyEWMA)*t.avgDiff + delta*TimelyEWMA*diff
	grad := t.avgDiff / minRTT.Seconds()
	r := t.Rate
	switch {
	case rtt < tLow:
		r += t.add
	case rtt > tHigh:
		r *= 1 - TimelyBeta*(1-float64(tHigh)/float64(rtt))
	case grad <= 0:
		t.negCount++
		n := 1.0
		if t.negCount >= TimelyHAIThresh {
			n = 5
		}
		r += n * t.add * delta
	default:
		t.negCount = 0
		r *= 1 - TimelyBeta*grad // a steep gradient drives it below zero: the floor catches it
	}
	// One sample at most halves the rate, as eRPC's Timely has it
	// (cc/timely.h): a lone spike, its gradient tens of minimum RTTs,
	// would otherwise take the rate to the floor in one step.
	r = max(r, t.Rate/2)
	t.Rate = min(max(r, t.floor), t.Link)
	t.MinRate = min(t.MinRate, t.Rate)
}

// Timeout takes a retransmission timeout: the rate halves, down to the
// floor. A request resent gives no RTT sample (which copy was answered
// is unknown), so a queue longer than the RTO would starve Timely of
// samples exactly when it matters; the timeout stands in for them, as a
// loss is for TCP.
func (t *Timely) Timeout() {
	before := t.Rate
	t.Rate = max(t.Rate/2, t.floor)
	t.MinRate = min(t.MinRate, t.Rate)
	if t.Rate < before {
		t.Lowered++
	}
}

// LastRTT is the last RTT sampled (0 before the first).
func (t *Timely) LastRTT() time.Duration { return t.prevRTT }

// Gap is how long bytes take to leave at the session's rate.
func (t *Timely) Gap(bytes int) time.Duration {
	if t.Rate <= 0 {
		return 0
	}
	return time.Duration(float64(bytes) / t.Rate * 1e9)
}
