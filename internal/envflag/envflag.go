// Package envflag is the flag vocabulary the four binaries share: every
// flag can be set by an environment variable, one prefix per binary
// (SEQD_ for seqd, SEQD_PD_ for seqd-pd, SEQCTL_ for seqctl, LOADGEN_ for
// loadgen) and the flag's name in upper case with _ for - and .
// (SEQD_ETCD_ENDPOINTS sets seqd's -etcd-endpoints). A flag given on the
// command line wins over its variable. A variable with a binary's prefix
// that names none of its flags is an error, as a mistyped key of seqd's
// -config file is, unless Reserved lists it (test knobs, the systemd
// unit's SEQD_FLAGS). -h lists each flag with its variable (Usage) and
// exits 0; a renamed flag keeps its old name for one release as a
// deprecated alias that warns when used (Alias); a flag whose usage starts
// with "internal:" is neither listed nor set from the environment.
package envflag

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

// The binaries' prefixes.
const (
	PrefixSeqd    = "SEQD_"
	PrefixSeqdPD  = "SEQD_PD_"
	PrefixSeqctl  = "SEQCTL_"
	PrefixLoadgen = "LOADGEN_"
)

// prefixes is every binary's prefix: a variable with a longer prefix than
// the one checked belongs to another binary (SEQD_PD_LISTEN is seqd-pd's,
// not an unknown SEQD_ variable).
var prefixes = []string{PrefixSeqd, PrefixSeqdPD, PrefixSeqctl, PrefixLoadgen}

// Reserved is the one place that lists variables with a binary's prefix
// that set no flag: an entry ending in _ is a prefix, any other a whole
// name. New test knobs take the SEQD_TEST_ prefix.
var Reserved = []string{
	"SEQD_TEST_",              // test knobs from now on
	"LOADGEN_TEST_",           // loadgen's test knobs (LOADGEN_TEST_PLOT_SAMPLE)
	"SEQD_FLAGS",              // deploy/systemd/seqd.service: one-off flags from /etc/seqd/seqd.env
	"SEQD_PID", "SEQD_PD_PID", // docs/operations.md's shell variables
	"SEQD_ETCD",        // ha/hatest: the etcd binary
	"SEQD_SOAK",        // soak tests
	"SEQD_RIG_",        // e2e rigs (SEQD_RIG_STORM)
	"SEQD_STRICT_PERF", // performance tests
	"SEQD_XDPBENCH", "SEQD_XDPBENCH_",
	"SEQD_IBV_",             // verbs/ibv tests: SEQD_IBV_DEVICE, SEQD_IBV_OPTIONS
	"SEQD_BENCH_",           // client benchmarks: SEQD_BENCH_ADMIN
	"SEQD_RAW_ECHO_PEER",    // verbs/soft benchmarks
	"SEQD_ORACLE_CRASH_",    // oracle crash tests
	"SEQD_NETNSTEST_INSIDE", // internal/netnstest
	// Kubernetes' service links: a Service named seqd (deploy/k8s) or
	// seqd-pd puts these in every pod of its namespace.
	"SEQD_SERVICE_", "SEQD_PORT", "SEQD_PORT_",
	"SEQD_PD_SERVICE_", "SEQD_PD_PORT", "SEQD_PD_PORT_",
}

// ErrUnknown is a variable with a binary's prefix that names none of its
// flags.
var ErrUnknown = errors.New("unknown variable")

const (
	internalPrefix   = "internal:"
	deprecatedPrefix = "deprecated:"
)

// Name is the variable that sets flag f: prefix, then f in upper case
// with '-' and '.' as '_' (Name("SEQD_", "etcd-endpoints") is
// "SEQD_ETCD_ENDPOINTS").
func Name(prefix, f string) string {
	return prefix + strings.NewReplacer("-", "_", ".", "_").Replace(strings.ToUpper(f))
}

// Internal reports whether f is an internal flag (its usage starts with
// "internal:"): not listed by -h, not set from the environment.
func Internal(f *flag.Flag) bool { return strings.HasPrefix(f.Usage, internalPrefix) }

// HasEnv reports whether a variable sets f: every flag but internal ones
// and -version (which only asks a question of the command line).
func HasEnv(f *flag.Flag) bool { return !Internal(f) && f.Name != "version" }

// alias is a deprecated flag name that sets another flag.
type alias struct {
	prog, old string
	target    *flag.Flag
	warn      io.Writer
}

func (a *alias) String() string {
	if a == nil || a.target == nil {
		return ""
	}
	return a.target.Value.String()
}

func (a *alias) Set(v string) error {
	fmt.Fprintf(a.warn, "%s: -%s is deprecated and will be removed in the next release: use -%s\n", a.prog, a.old, a.target.Name)
	return a.target.Value.Set(v)
}

func (a *alias) IsBoolFlag() bool {
	b, ok := a.target.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// Alias defines old as a deprecated name of fs's flag name (defined
// before): setting it sets name and writes a warning to warn.
func Alias(fs *flag.FlagSet, old, name string, warn io.Writer) {
	t := fs.Lookup(name)
	if t == nil {
		panic("envflag: alias of undefined flag -" + name)
	}
	fs.Var(&alias{prog: fs.Name(), old: old, target: t, warn: warn}, old, deprecatedPrefix+" use -"+name)
}

// AliasOf returns the flag f is a deprecated alias of, or nil.
func AliasOf(f *flag.Flag) *flag.Flag {
	if a, ok := f.Value.(*alias); ok {
		return a.target
	}
	return nil
}

// Apply sets every flag of fs that is not in set (the flags given on the
// command line) from its variable, when lookup finds it (os.LookupEnv),
// and adds the flags it set to set. A value the flag refuses is an error
// that names the variable. Internal flags are skipped; a deprecated
// alias's variable sets its flag (with a warning) unless that flag is set
// already.
func Apply(fs *flag.FlagSet, prefix string, set map[string]bool, lookup func(string) (string, bool)) error {
	var err error
	// Current names first, so that an old name's variable never overrides
	// the new name's.
	var aliases []*flag.Flag
	visit := func(f *flag.Flag) {
		if err != nil || set[f.Name] || !HasEnv(f) {
			return
		}
		t := AliasOf(f)
		if t != nil && set[t.Name] {
			return
		}
		name := Name(prefix, f.Name)
		v, ok := lookup(name)
		if !ok {
			return
		}
		if e := fs.Set(f.Name, v); e != nil {
			err = fmt.Errorf("%s=%q: -%s: %w", name, v, f.Name, e)
			return
		}
		set[f.Name] = true
		if t != nil {
			set[t.Name] = true
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		if AliasOf(f) != nil {
			aliases = append(aliases, f)
			return
		}
		visit(f)
	})
	for _, f := range aliases {
		visit(f)
	}
	return err
}

// IsReserved reports whether Reserved lists the variable k.
func IsReserved(k string) bool { return reserved(k) }

// reserved reports whether Reserved lists the variable k.
func reserved(k string) bool {
	for _, r := range Reserved {
		if k == r || strings.HasSuffix(r, "_") && strings.HasPrefix(k, r) {
			return true
		}
	}
	return false
}

// Unknown returns an error naming every variable of environ (os.Environ:
// KEY=value) with prefix that sets none of fs's flags, is not another
// binary's (a longer prefix: SEQD_PD_ under SEQD_) and is not Reserved.
func Unknown(fs *flag.FlagSet, prefix string, environ []string) error {
	known := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) {
		if HasEnv(f) {
			known[Name(prefix, f.Name)] = true
		}
	})
	var bad []string
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, prefix) || known[k] || reserved(k) {
			continue
		}
		other := false
		for _, p := range prefixes {
			if len(p) > len(prefix) && strings.HasPrefix(p, prefix) && strings.HasPrefix(k, p) {
				other = true
			}
		}
		if !other {
			bad = append(bad, k)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	sort.Strings(bad)
	return fmt.Errorf("%w %s: no such flag (%s -h lists each flag's variable)", ErrUnknown, strings.Join(bad, ", "), fs.Name())
}

// Lookup returns a lookup function (os.LookupEnv) over environ.
func Lookup(environ []string) func(string) (string, bool) {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// Parse parses args into fs, then sets the flags not on the command line
// from environ's variables with prefix, and fails on an unknown variable
// with prefix. It returns the flags set (command line or environment). A
// -h or -help is flag.ErrHelp, after fs's Usage.
func Parse(fs *flag.FlagSet, prefix string, args, environ []string) (map[string]bool, error) {
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return FromEnv(fs, prefix, environ)
}

// FromEnv is Parse after fs.Parse: it sets the flags not on the command
// line from environ and fails on an unknown variable with prefix.
func FromEnv(fs *flag.FlagSet, prefix string, environ []string) (map[string]bool, error) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) {
		set[f.Name] = true
		if t := AliasOf(f); t != nil {
			set[t.Name] = true
		}
	})
	if err := Apply(fs, prefix, set, Lookup(environ)); err != nil {
		return nil, err
	}
	if err := Unknown(fs, prefix, environ); err != nil {
		return nil, err
	}
	return set, nil
}

// Usage writes fs's flags to w as flag.PrintDefaults does, each with the
// variable that sets it, then the deprecated aliases; internal flags are
// left out.
func Usage(w io.Writer, fs *flag.FlagSet, prefix string) {
	var aliases []string
	fs.VisitAll(func(f *flag.Flag) {
		if Internal(f) {
			return
		}
		if t := AliasOf(f); t != nil {
			aliases = append(aliases, fmt.Sprintf("-%s (use -%s)", f.Name, t.Name))
			return
		}
		name, usage := flag.UnquoteUsage(f)
		var b strings.Builder
		fmt.Fprintf(&b, "  -%s", f.Name)
		if name != "" {
			fmt.Fprintf(&b, " %s", name)
		}
		b.WriteString("\n    \t")
		b.WriteString(strings.ReplaceAll(usage, "\n", "\n    \t"))
		if d := Default(f); d != "" {
			fmt.Fprintf(&b, " (default %s)", d)
		}
		b.WriteString("\n")
		if HasEnv(f) {
			fmt.Fprintf(&b, "    \tenv %s\n", Name(prefix, f.Name))
		}
		io.WriteString(w, b.String())
	})
	if len(aliases) > 0 {
		fmt.Fprintf(w, "\ndeprecated (removed in the next release; they warn when used):\n  %s\n", strings.Join(aliases, "\n  "))
	}
}

// Default is f's default as -h shows it: empty for a zero value, quoted
// for a string.
func Default(f *flag.Flag) string {
	d := f.DefValue
	switch d {
	case "", "0", "false", "0s":
		return ""
	}
	if _, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok {
		if name, _ := flag.UnquoteUsage(f); name == "string" {
			return fmt.Sprintf("%q", d)
		}
	}
	return d
}
