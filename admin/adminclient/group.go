package adminclient

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/seqd/seqd/admin/adminpb"
)

// ErrAddress reports a malformed admin address or address list.
var ErrAddress = errors.New("admin: bad address")

// ParseAddrs parses an admin address list, the form every tool's -admin
// (seqctl, loadgen, seqd-pd's -seqd) takes: host:port entries separated
// by commas, an IPv6 host in brackets ([::1]:7070, [2001:db8::1]:7070).
// Spaces around an entry are dropped and a repeated entry is kept once;
// an empty list, an empty entry or one that is not host:port is an error
// that names it.
func ParseAddrs(list string) ([]string, error) {
	if strings.TrimSpace(list) == "" {
		return nil, fmt.Errorf("%w: empty address list: want host:port[,host:port...]", ErrAddress)
	}
	var addrs []string
	seen := map[string]bool{}
	for i, a := range strings.Split(list, ",") {
		a = strings.TrimSpace(a)
		if err := checkAddr(a); err != nil {
			if strings.Contains(list, ",") {
				err = fmt.Errorf("%w (entry %d of %q)", err, i+1, list)
			}
			return nil, err
		}
		if !seen[a] {
			seen[a] = true
			addrs = append(addrs, a)
		}
	}
	return addrs, nil
}

// checkAddr accepts one host:port address.
func checkAddr(a string) error {
	if a == "" {
		return fmt.Errorf("%w: empty address: want host:port", ErrAddress)
	}
	_, port, err := net.SplitHostPort(a)
	switch {
	case err != nil && strings.Count(a, ":") > 1 && !strings.HasPrefix(a, "["):
		return fmt.Errorf("%w: %q: an IPv6 host goes in brackets, as in [::1]:7070", ErrAddress, a)
	case err != nil:
		return fmt.Errorf("%w: %q: want host:port (%v)", ErrAddress, a, err)
	case port == "":
		return fmt.Errorf("%w: %q: want host:port, with a port", ErrAddress, a)
	}
	return nil
}

// Group reaches an HA group's members (or a single server) by their admin
// addresses: one connection at a time, to the first member that answers
// (Any) or to the leader (Leader), following the NOT_LEADER redirects
// standbys answer with.
type Group struct {
	// Addrs are the members' admin addresses, in the order tried.
	Addrs []string
	// Opts go to every Dial (credentials, -insecure).
	Opts []grpc.DialOption
	// Redirected, when set, is told of each redirect Leader follows.
	Redirected func(from, to string)
}

// NewGroup parses list (ParseAddrs) into a Group that dials with opts.
func NewGroup(list string, opts ...grpc.DialOption) (*Group, error) {
	addrs, err := ParseAddrs(list)
	if err != nil {
		return nil, err
	}
	return &Group{Addrs: addrs, Opts: opts}, nil
}

// minAttempt is the least time one member's Dial gets when ctx's
// deadline is shared among the members: a paused member accepts TCP but
// never answers, and must not eat the whole budget.
const minAttempt = 500 * time.Millisecond

// dialOne dials addr within its share of ctx's remaining time.
func (g *Group) dialOne(ctx context.Context, addr string, left int) (*grpc.ClientConn, error) {
	if dl, ok := ctx.Deadline(); ok && left > 1 {
		per := max(time.Until(dl)/time.Duration(left), minAttempt)
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, per)
		defer cancel()
	}
	return Dial(ctx, addr, g.Opts...)
}

// Any calls f with a connection to the first member, in Addrs order, that
// accepts one, and returns that member's address and f's result. A member
// that cannot be dialled is skipped; f's error is the member's answer and
// is returned as it is. When no member can be dialled the error names
// each one's failure.
func (g *Group) Any(ctx context.Context, f func(addr string, cc *grpc.ClientConn) error) (string, error) {
	var errs []error
	for i, a := range g.Addrs {
		cc, err := g.dialOne(ctx, a, len(g.Addrs)-i)
		if err != nil {
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		err = f(a, cc)
		cc.Close()
		return a, err
	}
	return "", g.noneAnswered("answered", errs)
}

// maxHops bounds the redirects Leader follows per listed member.
const maxHops = 3

// Leader calls f with a connection to the group's leader, for the calls
// only the leader serves (SetMode, Advance, TransferLeader, Connect). It
// starts with the first member that can be dialled; when f fails with a
// standby's redirect (LeaderFromError), it follows it to the leader named
// (which need not be listed), and when the standby knows no leader it
// tries the next listed member. It returns the address of the member
// that gave f's final result.
func (g *Group) Leader(ctx context.Context, f func(addr string, cc *grpc.ClientConn) error) (string, error) {
	var errs []error
	tried := map[string]bool{}
	queue := append([]string(nil), g.Addrs...)
	hops := 0
	var last error // the last answer of a member: a redirect
	lastAddr, lastLeader := "", ""
	dialErr := map[string]error{}
	for len(queue) > 0 {
		a := queue[0]
		queue = queue[1:]
		if tried[a] {
			continue
		}
		tried[a] = true
		cc, err := g.dialOne(ctx, a, len(queue)+1)
		if err != nil {
			errs = append(errs, err)
			dialErr[a] = err
			if ctx.Err() != nil {
				break
			}
			continue
		}
		err = f(a, cc)
		cc.Close()
		leader, redirected := LeaderFromError(err)
		if !redirected {
			return a, err
		}
		last, lastAddr, lastLeader = err, a, leader
		if leader != "" && !tried[leader] && hops < maxHops*len(g.Addrs) {
			if checkAddr(leader) != nil {
				errs = append(errs, fmt.Errorf("%w: %s redirects to %q", ErrAddress, a, leader))
				continue
			}
			hops++
			if g.Redirected != nil {
				g.Redirected(a, leader)
			}
			queue = append([]string{leader}, queue...)
		}
	}
	if last != nil {
		// Every member reached is a standby: its redirect names the
		// leader if one is known, and why that leader failed.
		if err := dialErr[lastLeader]; err != nil {
			return lastAddr, fmt.Errorf("%s is a standby; its leader %s: %w", lastAddr, lastLeader, err)
		}
		return lastAddr, last
	}
	return "", g.noneAnswered("answered", errs)
}

// noneAnswered is the error of Any and Leader when no member could be
// dialled: each member's failure, which names its address (errors.Is
// finds each, ErrPlaintextRefused for one).
func (g *Group) noneAnswered(what string, errs []error) error {
	switch len(errs) {
	case 0:
		return fmt.Errorf("%w: no member of %s tried", ErrUnavailable, strings.Join(g.Addrs, ","))
	case 1:
		return errs[0]
	}
	return fmt.Errorf("%w: no member of %s %s: %w", ErrUnavailable, strings.Join(g.Addrs, ","), what, memberErrs(errs))
}

// memberErrs are the failures of several members, one per member.
type memberErrs []error

func (m memberErrs) Error() string {
	msgs := make([]string, len(m))
	for i, e := range m {
		// The list's error says the kind once.
		msgs[i] = strings.TrimPrefix(e.Error(), ErrUnavailable.Error()+": ")
	}
	return strings.Join(msgs, "; ")
}

func (m memberErrs) Unwrap() []error { return m }

// DialLeader returns a connection to the group's leader, for a client
// that keeps one (loadgen): it asks the members in turn for their Status
// and goes to the member that leads (or runs alone, role single), or to
// the leader a standby names. The caller closes the connection.
//
// While the group elects (a member answered as a standby that knows no
// leader, and every other failure is ErrUnavailable), it asks again after a pause that doubles from 50 ms to
// 1 s, until ctx ends: a failover takes about half a second, and a caller
// started during one should wait it out, not fail. Any other failure (a
// bad address, refused credentials) returns at once.
func (g *Group) DialLeader(ctx context.Context) (string, *grpc.ClientConn, error) {
	pause := 50 * time.Millisecond
	for {
		a, cc, err := g.dialLeaderOnce(ctx)
		if err == nil || !electing(err) {
			return a, cc, err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return "", nil, err
		case <-t.C:
		}
		pause = min(2*pause, time.Second)
	}
}

// errNoLeaderYet marks a standby's answer that it knows no leader.
var errNoLeaderYet = errors.New("is a standby that knows no leader yet")

// electing reports whether err, from one round of dialLeaderOnce, says
// that the group is electing: some member is a standby that knows no
// leader yet, and every other failure is ErrUnavailable. A group none of
// whose members answers is not electing; that fails at once.
func electing(err error) bool {
	if !errors.Is(err, errNoLeaderYet) {
		return false
	}
	var m memberErrs
	if errors.As(err, &m) {
		for _, e := range m {
			if !errors.Is(e, ErrUnavailable) {
				return false
			}
		}
	}
	return true
}

func (g *Group) dialLeaderOnce(ctx context.Context) (string, *grpc.ClientConn, error) {
	var errs []error
	tried := map[string]bool{}
	queue := append([]string(nil), g.Addrs...)
	hops := 0
	for len(queue) > 0 {
		a := queue[0]
		queue = queue[1:]
		if tried[a] {
			continue
		}
		tried[a] = true
		cc, err := g.dialOne(ctx, a, len(queue)+1)
		if err != nil {
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		st, err := adminpb.NewAdminClient(cc).Status(ctx, &adminpb.StatusRequest{})
		if err != nil {
			cc.Close()
			errs = append(errs, fmt.Errorf("admin: status of %s: %w", a, err))
			continue
		}
		if st.GetRole() != RoleStandby {
			return a, cc, nil
		}
		cc.Close()
		l := st.GetLeader()
		if l == "" {
			errs = append(errs, fmt.Errorf("%w: %s %w", ErrUnavailable, a, errNoLeaderYet))
			continue
		}
		if !tried[l] && hops < maxHops*len(g.Addrs) && checkAddr(l) == nil {
			hops++
			if g.Redirected != nil {
				g.Redirected(a, l)
			}
			queue = append([]string{l}, queue...)
		}
	}
	return "", nil, g.noneAnswered("leads", errs)
}
