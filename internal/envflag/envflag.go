// Package envflag sets command-line flags from environment variables, so
// that a container can configure a binary without a command line:
// SEQD_ETCD_ENDPOINTS sets seqd's -etcd-endpoints. A flag given on the
// command line wins over its variable.
package envflag

import (
	"flag"
	"fmt"
	"strings"
)

// Name is the variable that sets flag f: prefix, then f in upper case
// with '-' and '.' as '_' (Name("SEQD_", "etcd-endpoints") is
// "SEQD_ETCD_ENDPOINTS").
func Name(prefix, f string) string {
	return prefix + strings.NewReplacer("-", "_", ".", "_").Replace(strings.ToUpper(f))
}

// Apply sets every flag of fs that is not in set (the flags given on the
// command line) from its variable, when lookup finds it (os.LookupEnv),
// and adds the flags it set to set. A value the flag refuses is an error
// that names the variable.
func Apply(fs *flag.FlagSet, prefix string, set map[string]bool, lookup func(string) (string, bool)) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || set[f.Name] {
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
	})
	return err
}
