package e2e

import "testing"

func TestVerifier(t *testing.T) {
	cases := []struct {
		name  string
		calls []Call
		ok    bool
	}{
		{"good", []Call{{0, 0, 1, 10}, {1, 2, 3, 11}, {0, 2, 4, 12}}, true},
		{"concurrent any order", []Call{{0, 0, 5, 12}, {1, 1, 6, 11}}, true},
		{"duplicate", []Call{{0, 0, 1, 10}, {1, 0, 1, 10}}, false},
		{"caller backwards", []Call{{0, 0, 5, 12}, {0, 6, 7, 11}}, false},
		{"real time", []Call{{0, 0, 1, 12}, {1, 2, 3, 11}}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var v Verifier
			for _, x := range c.calls {
				v.Record(x)
			}
			if err := v.Check(); (err == nil) != c.ok {
				t.Fatalf("Check() = %v, want ok=%v", err, c.ok)
			}
		})
	}
}
