package wire

import (
	"testing"

	"github.com/seqd/seqd/loadgen/verify"
	"github.com/seqd/seqd/spec"
)

func newFlow(t testing.TB, w int, answerQ int64) *Flow {
	t.Helper()
	f, err := NewFlow(FlowConfig{Window: w, AnswerQuarantine: answerQ})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestFlowWindowAndTags(t *testing.T) {
	f := newFlow(t, 4, 0)
	if f.Tags() != 64 {
		t.Fatalf("tags %d, want 64", f.Tags())
	}
	var tags []spec.Tag
	for i := range 4 {
		tag, ok := f.Send(10, NoHigh, 0)
		if !ok || int(tag) != i {
			t.Fatalf("send %d: tag %v ok %v", i, tag, ok)
		}
		tags = append(tags, tag)
	}
	if _, ok := f.Send(10, NoHigh, 0); ok {
		t.Fatal("sent beyond the window")
	}
	// Answers in any order release their tags once.
	if s, ok := f.Answer(20, tags[2]); !ok || s.At != 10 || s.High != NoHigh {
		t.Fatalf("answer: %+v %v", s, ok)
	}
	if _, ok := f.Answer(21, tags[2]); ok {
		t.Fatal("a duplicate answer matched")
	}
	if _, ok := f.Answer(21, 63); ok {
		t.Fatal("an answer for a tag never sent matched")
	}
	if _, ok := f.Answer(21, 64); ok {
		t.Fatal("an answer for a tag outside the flow's space matched")
	}
	if tag, ok := f.Send(30, 5, 7); !ok || tag != 4 {
		t.Fatalf("next send after an answer: %v %v", tag, ok)
	}
	if f.Outstanding() != 4 {
		t.Fatalf("outstanding %d", f.Outstanding())
	}
}

func TestFlowQuarantine(t *testing.T) {
	const q = 1000
	f := newFlow(t, 1, q)
	// Cycle through the whole tag space: tag 0 comes back after 64 sends.
	for i := range 64 {
		tag, ok := f.Send(int64(i), NoHigh, 0)
		if !ok {
			t.Fatalf("send %d refused", i)
		}
		if _, ok := f.Answer(int64(i), tag); !ok {
			t.Fatalf("answer %d refused", i)
		}
	}
	// Tag 0 was released at 0: reusable at q, not before.
	if _, ok := f.Send(q-1, NoHigh, 0); ok {
		t.Fatal("tag reused inside its quarantine")
	}
	if tag, ok := f.Send(q, NoHigh, 0); !ok || tag != 0 {
		t.Fatalf("tag 0 not reusable after its quarantine: %v %v", tag, ok)
	}
}

func TestFlowExpire(t *testing.T) {
	f := newFlow(t, 3, 0)
	a, _ := f.Send(0, NoHigh, 0)
	b, _ := f.Send(5, NoHigh, 0)
	c, _ := f.Send(10, NoHigh, 0)
	f.Answer(6, b)
	if n := f.Expire(19, 20); n != 0 {
		t.Fatalf("expired %d before the timeout", n)
	}
	if n := f.Expire(20, 20); n != 1 {
		t.Fatalf("expired %d at a's timeout, want 1", n)
	}
	if _, ok := f.Answer(21, a); ok {
		t.Fatal("a late answer to an expired request matched")
	}
	if n := f.Expire(30, 20); n != 1 || f.Outstanding() != 0 {
		t.Fatalf("expired %d, %d outstanding", n, f.Outstanding())
	}
	if _, ok := f.Answer(31, c); ok {
		t.Fatal("a late answer matched")
	}
	// The expired tags are quarantined for spec.DefaultQuarantine.
	for range 61 {
		if _, ok := f.Send(31, NoHigh, 0); !ok {
			t.Fatal("fresh tag refused")
		}
		f.Expire(int64(spec.DefaultQuarantine), 0) // give them up at once
	}
	now := int64(spec.DefaultQuarantine)
	if _, ok := f.Send(now, NoHigh, 0); ok {
		t.Fatal("an expired tag was reused inside its quarantine")
	}
}

func TestFlowUnsend(t *testing.T) {
	f := newFlow(t, 2, 0)
	f.Send(0, NoHigh, 0)
	f.Unsend()
	if f.Outstanding() != 0 {
		t.Fatal("unsend kept the request")
	}
	if tag, ok := f.Send(0, NoHigh, 0); !ok || tag != 0 {
		t.Fatalf("tag after unsend: %v %v", tag, ok)
	}
}

// TestFlowFloors: the floors a flow notes at each send are what the
// online checker compares answers with.
func TestFlowFloors(t *testing.T) {
	c := verify.NewOnline(16)
	f := newFlow(t, 4, 0)
	tag, _ := f.Send(0, NoHigh, c.Floor())
	s, _ := f.Answer(1, tag)
	if k, bad := c.Check(s.Floor, s.FlowFloor, 100); bad {
		t.Fatalf("first value: %v", k)
	}
	f.Accept(100)
	// A request sent after 100 was received must get more.
	tag, _ = f.Send(2, NoHigh, c.Floor())
	s, _ = f.Answer(3, tag)
	if k, bad := c.Check(s.Floor, s.FlowFloor, 100); !bad || k != verify.Regression {
		t.Fatalf("same flow, value not above its own: %v", k)
	}
	g := newFlow(t, 4, 0)
	tag, _ = g.Send(2, NoHigh, c.Floor())
	s, _ = g.Answer(3, tag)
	if k, bad := c.Check(s.Floor, s.FlowFloor, 99); !bad || k != verify.RealTime {
		t.Fatalf("other flow, value below one received before its send: %v", k)
	}
	// Requests in flight together may be answered in either order.
	t1, _ := g.Send(4, NoHigh, c.Floor())
	t2, _ := g.Send(4, NoHigh, c.Floor())
	s2, _ := g.Answer(5, t2)
	s1, _ := g.Answer(5, t1)
	if k, bad := c.Check(s2.Floor, s2.FlowFloor, 300); bad {
		t.Fatal(k)
	}
	if k, bad := c.Check(s1.Floor, s1.FlowFloor, 200); bad {
		t.Fatal(k)
	}
	c.Check(0, 0, 200) // a duplicate value
	if n, first := c.Duplicates(); n != 1 || first != 200 {
		t.Fatalf("duplicates %d (%d)", n, first)
	}
}

// BenchmarkFlowRoundTrip is the per-request protocol work: a tag out, an
// answer in, the value checked and kept.
func BenchmarkFlowRoundTrip(b *testing.B) {
	f := newFlow(b, 256, 0)
	c := verify.NewOnline(1 << 20)
	b.ReportAllocs()
	v := uint64(1)
	for i := 0; b.Loop(); i++ {
		if i&(1<<20-1) == 0 {
			c.Reset()
		}
		tag, ok := f.Send(int64(i), NoHigh, c.Floor())
		if !ok {
			b.Fatal("send refused")
		}
		s, ok := f.Answer(int64(i), tag)
		if !ok {
			b.Fatal("answer refused")
		}
		v++
		if _, bad := c.Check(s.Floor, s.FlowFloor, v); bad {
			b.Fatal("check failed")
		}
		f.Accept(v)
	}
}
