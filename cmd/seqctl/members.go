package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/seqd/seqd/admin"
	"github.com/seqd/seqd/admin/adminpb"
)

// member is one instance of an HA group as its own admin plane describes it.
type member struct {
	Address string `json:"address"`
	Role    string `json:"role"`             // leader, standby, single; "unreachable" when it did not answer
	Leader  string `json:"leader,omitempty"` // the leader it names
	Version string `json:"version,omitempty"`
	Epoch   uint64 `json:"epoch,omitempty"`
	Mode    string `json:"mode,omitempty"`
	Error   string `json:"error,omitempty"`
}

// runMembers asks every instance of the group (-admin as a comma list, or
// the addresses given as arguments) for its status, and lists them leader
// first. It fails when no instance is the leader, or two are.
func runMembers(ctx context.Context, e *env, args []string) error {
	fs := flag.NewFlagSet("members", flag.ContinueOnError)
	output := outputFlag(fs)
	fs.SetOutput(e.stderr)
	if err := fs.Parse(args); err != nil {
		return usageError{err.Error()}
	}
	if err := checkOutput(*output); err != nil {
		return err
	}
	addrs := fs.Args()
	if len(addrs) == 0 {
		addrs = strings.Split(e.addr, ",")
	}
	ms := make([]member, len(addrs))
	var wg sync.WaitGroup
	for i, a := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ms[i] = e.member(ctx, strings.TrimSpace(a))
		}()
	}
	wg.Wait()
	// The leader first, then the instances that answered, then the
	// others, each in the order given.
	rank := func(m member) int {
		switch m.Role {
		case admin.RoleLeader:
			return 0
		case "unreachable":
			return 2
		}
		return 1
	}
	slices.SortStableFunc(ms, func(x, y member) int { return rank(x) - rank(y) })
	leaders := 0
	for _, m := range ms {
		if m.Role == admin.RoleLeader {
			leaders++
		}
	}
	if *output == "json" {
		b, err := json.MarshalIndent(ms, "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "%s\n", b)
	} else {
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "ADDRESS\tROLE\tLEADER\tEPOCH\tMODE\tVERSION\n")
		for _, m := range ms {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", m.Address, m.Role, dash(m.Leader), m.Epoch, dash(m.Mode), dash(m.Version))
		}
		tw.Flush()
	}
	switch {
	case leaders == 0 && len(ms) == 1 && ms[0].Role == admin.RoleSingle:
		return nil
	case leaders == 0:
		return fmt.Errorf("no leader among %d instances", len(ms))
	case leaders > 1:
		return fmt.Errorf("%d instances report themselves leader", leaders)
	}
	return nil
}

func (e *env) member(ctx context.Context, addr string) member {
	m := member{Address: addr, Role: "unreachable"}
	cc, err := admin.Dial(ctx, addr, e.opts...)
	if err != nil {
		m.Error = describe(err)
		return m
	}
	defer cc.Close()
	st, err := adminpb.NewAdminClient(cc).Status(ctx, &adminpb.StatusRequest{})
	if err != nil {
		m.Error = describe(err)
		return m
	}
	m.Role, m.Leader, m.Version, m.Epoch, m.Mode = st.GetRole(), st.GetLeader(), st.GetVersion(), st.GetEpoch(), st.GetMode()
	return m
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
