package spec

import (
	"testing"
	"time"
)

const us = time.Microsecond

// feed gives t one sample per step, 10 µs apart from at, and returns the
// time after the last.
func feed(t *Timely, at time.Duration, rtts ...time.Duration) time.Duration {
	for _, r := range rtts {
		at += 10 * us
		t.Sample(at, r)
	}
	return at
}

func TestTimelyBypassBelowTLow(t *testing.T) {
	tm := NewTimely(0)
	feed(&tm, 0, 5*us, 10*us, 49*us, 3*us)
	if tm.Updates != 0 || tm.Bypassed != 4 || tm.Rate != TimelyLinkRate {
		t.Fatalf("uncongested, RTTs < T_low: updates %d bypassed %d rate %g, want 0, 4, %g", tm.Updates, tm.Bypassed, tm.Rate, float64(TimelyLinkRate))
	}
	// A congested session below T_low is not bypassed: it increases.
	tm.Rate = TimelyLinkRate / 2
	r := tm.Rate
	if !tm.Sample(1*time.Second, 5*us) || tm.Rate != r+TimelyAddRate {
		t.Fatalf("congested below T_low: rate %g, want %g (additive step)", tm.Rate, r+TimelyAddRate)
	}
}

func TestTimelyDecreasesOnRisingGradient(t *testing.T) {
	tm := NewTimely(0)
	// A fabric whose round trip is 2 µs (Scale 1: eRPC's thresholds).
	at := feed(&tm, 0, 2*us, 60*us, 80*us, 100*us, 120*us, 140*us)
	if tm.Rate >= TimelyLinkRate {
		t.Fatalf("rising RTTs 60..140 µs: rate %g, want below the link rate", tm.Rate)
	}
	// Falling RTTs between the thresholds: once the gradient's EWMA
	// turns negative, the rate rises again (additively, then five steps
	// at a time) from the lowest it reached.
	low := tm.Rate
	for _, rtt := range []time.Duration{130 * us, 120 * us, 110 * us, 100 * us, 90 * us, 80 * us, 70 * us, 60 * us, 60 * us, 60 * us, 60 * us, 60 * us, 60 * us, 60 * us} {
		at = feed(&tm, at, rtt)
		low = min(low, tm.Rate)
	}
	if tm.Rate <= low {
		t.Fatalf("falling RTTs: rate %g, want above the lowest it reached, %g", tm.Rate, low)
	}
}

func TestTimelyRisesUnderLowRTT(t *testing.T) {
	tm := NewTimely(0)
	tm.Rate = TimelyMinRate
	feed(&tm, 0, 10*us, 10*us, 10*us)
	if want := TimelyMinRate + 3*TimelyAddRate; tm.Rate != want {
		t.Fatalf("three RTTs below T_low from the floor: rate %g, want %g", tm.Rate, want)
	}
	tm.Rate = TimelyLinkRate - 1
	feed(&tm, time.Second, 10*us)
	if tm.Rate != TimelyLinkRate {
		t.Fatalf("rate %g past the link rate %g", tm.Rate, float64(TimelyLinkRate))
	}
}

func TestTimelyHighRTTAndFloor(t *testing.T) {
	tm := NewTimely(0)
	r := tm.Rate
	tm.Sample(5*us, 2*us) // a fabric whose round trip is 2 µs (Scale 1)
	tm.Sample(10*us, 2*time.Millisecond)
	want := r * (1 - TimelyBeta*(1-float64(TimelyTHigh)/float64(2*time.Millisecond)))
	if tm.Rate != want {
		t.Fatalf("RTT 2 ms > T_high: rate %g, want %g", tm.Rate, want)
	}
	at := 10 * us
	for i := range 2000 {
		at = feed(&tm, at, time.Duration(i+1)*time.Millisecond)
		if tm.Rate < TimelyMinRate {
			t.Fatalf("step %d: rate %g below the floor %g", i, tm.Rate, TimelyMinRate)
		}
	}
	if tm.Rate != TimelyMinRate || tm.MinRate != TimelyMinRate {
		t.Fatalf("after 2000 growing RTTs: rate %g (min %g), want the floor %g", tm.Rate, tm.MinRate, TimelyMinRate)
	}
	if tm.Sample(at+us, 0) || tm.Sample(at+us, -us) {
		t.Fatal("a non-positive RTT counted as a sample")
	}
}

// TestTimelyScalesToFabric: the same RTTs, 20 to 120 µs (a jittery
// kernel UDP path, no queue), are no congestion on a fabric whose round
// trip is 20 µs, and are on one whose round trip is 2 µs; on the slow
// fabric a real queue (RTTs growing to 50 base RTTs) still lowers the
// rate. With eRPC's fixed thresholds base failed: "no bottleneck on a
// 20 µs fabric: rate lowered".
func TestTimelyScalesToFabric(t *testing.T) {
	jitter := func(i int) time.Duration { return 20*us + time.Duration((i*37)%101)*us }
	run := func(base time.Duration) Timely {
		tm := NewTimely(0)
		at := feed(&tm, 0, base)
		for i := range 5000 {
			at = feed(&tm, at, jitter(i))
		}
		return tm
	}
	if tm := run(20 * us); tm.MinRate != TimelyLinkRate || tm.Scale() != 10 {
		t.Errorf("no bottleneck on a 20 µs fabric: rate lowered to %g of line (scale %g)", tm.MinRate/TimelyLinkRate, tm.Scale())
	}
	if tm := run(2 * us); tm.MinRate >= TimelyLinkRate {
		t.Errorf("the same RTTs on a 2 µs fabric did not lower the rate")
	}
	tm := run(20 * us)
	at := time.Second
	for i := range 200 {
		at = feed(&tm, at, 20*us+time.Duration(i)*5*us) // a queue building to 1 ms
	}
	if tm.Rate >= TimelyLinkRate {
		t.Errorf("a queue building to 50 base RTTs on a 20 µs fabric did not lower the rate")
	}
}

func TestTimelyGap(t *testing.T) {
	tm := NewTimely(1e6) // 1 MB/s
	tm.Rate = 1e6
	if g := tm.Gap(100); g != 100*us {
		t.Fatalf("100 B at 1 MB/s: gap %v, want 100µs", g)
	}
}

func TestWheel(t *testing.T) {
	w := NewWheel(us, 64, 4)
	out := make([]uint32, 0, 4)
	if !w.Insert(0, 10*us, 1) || !w.Insert(0, 3*us, 2) || !w.Insert(0, 3*us+500, 3) || !w.Insert(0, time.Second, 4) {
		t.Fatal("insert refused with room")
	}
	if w.Insert(0, 0, 5) {
		t.Fatal("insert into a full wheel accepted")
	}
	if at, ok := w.Next(); !ok || at != 3*us {
		t.Fatalf("Next %v %v, want 3µs", at, ok)
	}
	if got := w.Drain(2*us, out); len(got) != 0 {
		t.Fatalf("drain at 2µs gave %v, want nothing", got)
	}
	if got := w.Drain(3*us, out); len(got) != 2 || got[0] != 2 || got[1] != 3 {
		t.Fatalf("drain at 3µs gave %v, want [2 3]", got)
	}
	if got := w.Drain(62*us, out); len(got) != 1 || got[0] != 1 {
		t.Fatalf("drain at 62µs gave %v, want [1]", got)
	}
	// 1 s was past the 63 µs horizon: it went in the horizon's last slot.
	if got := w.Drain(63*us, out); len(got) != 1 || got[0] != 4 || w.Len() != 0 {
		t.Fatalf("drain at 63µs gave %v (len %d), want [4]", got, w.Len())
	}
	if _, ok := w.Next(); ok {
		t.Fatal("Next on an empty wheel")
	}
	// An empty wheel's cursor catches up: an item due now leaves now.
	w.Insert(5*time.Millisecond, 5*time.Millisecond, 7)
	if got := w.Drain(5*time.Millisecond, out); len(got) != 1 || got[0] != 7 {
		t.Fatalf("drain after idle gave %v, want [7]", got)
	}
	// A full out stops the drain; the rest waits.
	for i := range 4 {
		w.Insert(6*time.Millisecond, 6*time.Millisecond, uint32(i))
	}
	if got := w.Drain(6*time.Millisecond, out[:0:2]); len(got) != 2 || w.Len() != 2 {
		t.Fatalf("drain into 2 gave %v, %d left", got, w.Len())
	}
	if got := w.Drain(6*time.Millisecond, out); len(got) != 2 || got[0] != 2 || w.Len() != 0 {
		t.Fatalf("second drain gave %v", got)
	}
}

func TestWheelZeroAllocs(t *testing.T) {
	w := NewWheel(us, 1024, 64)
	out := make([]uint32, 0, 64)
	tm := NewTimely(0)
	var now time.Duration
	a := testing.AllocsPerRun(1000, func() {
		now += us
		for i := range 8 {
			w.Insert(now, now+time.Duration(i)*us, uint32(i))
		}
		out = w.Drain(now+8*us, out[:0])
		tm.Sample(now, 70*us)
	})
	if a != 0 {
		t.Fatalf("%v allocs per insert/drain/sample round, want 0", a)
	}
}

func BenchmarkWheel(b *testing.B) {
	w := NewWheel(us, 1024, 64)
	out := make([]uint32, 0, 64)
	var now time.Duration
	b.ReportAllocs()
	for b.Loop() {
		now += us
		w.Insert(now, now+3*us, 1)
		out = w.Drain(now, out[:0])
	}
}

// TestTimelyHalvesAtMost: one spike between the thresholds, its gradient
// many minimum RTTs, halves the rate and no more (eRPC's cc/timely.h);
// base took it to the floor in one sample ("rate 1.875e+06 after one
// spike, want 3.125e+09").
func TestTimelyHalvesAtMost(t *testing.T) {
	tm := NewTimely(0)
	at := feed(&tm, 0, 2*us, 2*us) // a 2 µs fabric: Scale 1
	tm.Rate = TimelyLinkRate / 2   // congested: no bypass
	feed(&tm, at, 900*us)          // below T_high: the gradient decides
	if want := float64(TimelyLinkRate) / 4; tm.Rate != want {
		t.Fatalf("rate %g after one spike, want %g", tm.Rate, want)
	}
}

// TestTimelyScalesToLink: on a 20 Mbit/s link the additive step and
// the floor are a thousandth of it (100 sessions fit the link at the
// floor, where eRPC's 15 Mbit/s each would need 1.5 Gbit/s), and on a
// fast link they are eRPC's own.
func TestTimelyScalesToLink(t *testing.T) {
	if tm := NewTimely(0); tm.Floor() != TimelyMinRate || tm.add != TimelyAddRate {
		t.Fatalf("at the default link: floor %g, step %g, want eRPC's %g, %g", tm.Floor(), tm.add, float64(TimelyMinRate), float64(TimelyAddRate))
	}
	link := 20e6 / 8.0
	tm := NewTimely(link)
	if tm.Floor() != link/1000 || 100*tm.Floor() >= link {
		t.Fatalf("20 Mbit/s link: floor %g B/s, want %g, and 100 sessions under the link", tm.Floor(), link/1000)
	}
	at := feed(&tm, 0, 2*us, 2*us) // Scale 1
	for i := range 200 {           // far above T_high: down to the floor
		at = feed(&tm, at, time.Duration(5+i)*time.Millisecond)
	}
	if tm.Rate != tm.Floor() {
		t.Fatalf("rate %g after 200 RTTs above T_high, want the floor %g", tm.Rate, tm.Floor())
	}
	feed(&tm, at, 2*us) // below T_low: one additive step
	if want := tm.Floor() + link/1000; tm.Rate != want {
		t.Fatalf("rate %g after one RTT below T_low, want %g", tm.Rate, want)
	}
}

// TestTimelyTimeout: a retransmission timeout halves the rate, down to
// the floor, and counts as a lowering.
func TestTimelyTimeout(t *testing.T) {
	tm := NewTimely(20e6 / 8)
	tm.Timeout()
	if tm.Rate != 20e6/16 || tm.Lowered != 1 || tm.MinRate != tm.Rate {
		t.Fatalf("after a timeout: rate %g (lowered %d, min %g), want %g", tm.Rate, tm.Lowered, tm.MinRate, 20e6/16)
	}
	for range 64 {
		tm.Timeout()
	}
	if tm.Rate != tm.Floor() {
		t.Fatalf("after 65 timeouts: rate %g, want the floor %g", tm.Rate, tm.Floor())
	}
}
