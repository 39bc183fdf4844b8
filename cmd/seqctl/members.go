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

	"github.com/seqd/seqd/admin/adminclient"
	"github.com/seqd/seqd/admin/adminpb"
)

// member is one instance of an HA group as its own admin plane describes it.
type member struct {
	Address string `json:"address"`
	Role    string `json:"role"`             // leader, standby, single; "unreachable" when it did not answer
	Leader  string `json:"leader,omitempty"` // the leader it names
	Term    uint64 `json:"term,omitempty"`   // the leader's term as it last saw it
	Epoch   uint64 `json:"epoch,omitempty"`  // the leader's epoch (a standby's: as the leader published it)
	Mode    string `json:"mode,omitempty"`
	Format  string `json:"format,omitempty"`
	Version string `json:"version,omitempty"`
	Uptime  uint64 `json:"uptime_ms,omitempty"`
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
	list := strings.Join(fs.Args(), ",")
	if list == "" {
		list = e.addr
	}
	addrs, err := adminclient.ParseAddrs(list)
	if err != nil {
		return usageError{err.Error()}
	}
	ms := make([]member, len(addrs))
	var wg sync.WaitGroup
	for i, a := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ms[i] = e.member(ctx, a)
		}()
	}
	wg.Wait()
	// The leader first, then the instances that answered, then the
	// others, each in the order given.
	rank := func(m member) int {
		switch m.Role {
		case adminclient.RoleLeader:
			return 0
		case "unreachable":
			return 2
		}
		return 1
	}
	slices.SortStableFunc(ms, func(x, y member) int { return rank(x) - rank(y) })
	leaders := 0
	for _, m := range ms {
		if m.Role == adminclient.RoleLeader {
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
		fmt.Fprintf(tw, "ADDRESS\tROLE\tLEADER\tTERM\tEPOCH\tMODE\tFORMAT\tVERSION\tUPTIME\n")
		for _, m := range ms {
			up := "-"
			if m.Role != "unreachable" {
				up = uptime(m.Uptime)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", m.Address, m.Role, dash(m.Leader), m.Term, m.Epoch,
				dash(m.Mode), dash(m.Format), dash(m.Version), up)
		}
		tw.Flush()
	}
	switch {
	case leaders == 0 && len(ms) == 1 && ms[0].Role == adminclient.RoleSingle:
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
	cc, err := adminclient.Dial(ctx, addr, e.opts...)
	if err != nil {
		m.Error = describe("members", err)
		return m
	}
	defer cc.Close()
	st, err := adminpb.NewAdminClient(cc).Status(ctx, &adminpb.StatusRequest{})
	if err != nil {
		m.Error = describe("members", err)
		return m
	}
	m.Role, m.Leader, m.Term, m.Epoch = st.GetRole(), st.GetLeader(), st.GetTerm(), st.GetEpoch()
	m.Mode, m.Format, m.Version, m.Uptime = st.GetMode(), st.GetFormat(), st.GetVersion(), st.GetUptimeMs()
	return m
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
