// Package flagdoc reads the flags of seqd's four binaries from their -h
// and renders them as the Markdown tables README.md carries between
// <!-- flags NAME --> and <!-- /flags NAME --> markers. Its test builds the
// binaries, checks each -h against the shared vocabulary (exit 0, one
// variable per flag under the binary's prefix, -version and -log-level
// everywhere) and checks README.md's tables; `go test ./internal/flagdoc
// -update` rewrites them.
package flagdoc

import (
	"bufio"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// A Flag is one flag as -h lists it.
type Flag struct {
	Name    string // without the dash
	Arg     string // the argument's name ("" for a bool)
	Usage   string
	Default string
	Env     string // the variable that sets it ("" for -version)
}

// Help is what one binary's -h says.
type Help struct {
	Flags      []Flag
	Deprecated map[string]string // old name -> new name
}

var (
	flagLine  = regexp.MustCompile(`^  -([a-z0-9.-]+)(?: (\S+))?$`)
	envLine   = regexp.MustCompile(`^    \tenv ([A-Z0-9_]+)$`)
	aliasLine = regexp.MustCompile(`^  -([a-z0-9.-]+) \(use -([a-z0-9.-]+)\)$`)
	defaultRe = regexp.MustCompile(` \(default (.*)\)$`)
)

// Parse reads the flags from -h output (envflag.Usage's form).
func Parse(help string) (Help, error) {
	h := Help{Deprecated: map[string]string{}}
	var cur *Flag
	sc := bufio.NewScanner(strings.NewReader(help))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case aliasLine.MatchString(line):
			m := aliasLine.FindStringSubmatch(line)
			h.Deprecated[m[1]] = m[2]
			cur = nil
		case flagLine.MatchString(line):
			m := flagLine.FindStringSubmatch(line)
			h.Flags = append(h.Flags, Flag{Name: m[1], Arg: m[2]})
			cur = &h.Flags[len(h.Flags)-1]
		case cur != nil && envLine.MatchString(line):
			cur.Env = envLine.FindStringSubmatch(line)[1]
		case cur != nil && strings.HasPrefix(line, "    \t"):
			u := strings.TrimPrefix(line, "    \t")
			if cur.Usage != "" {
				u = cur.Usage + " " + u
			}
			cur.Usage = u
		}
	}
	for i := range h.Flags {
		f := &h.Flags[i]
		if m := defaultRe.FindStringSubmatch(f.Usage); m != nil {
			f.Default = m[1]
			f.Usage = strings.TrimSuffix(f.Usage, m[0])
		}
	}
	if len(h.Flags) == 0 {
		return h, fmt.Errorf("flagdoc: no flags in %q", help)
	}
	return h, sc.Err()
}

// Table renders h as a Markdown table: flag, variable, default, meaning;
// then the deprecated names.
func Table(h Help) string {
	var b strings.Builder
	b.WriteString("| flag | variable | default | meaning |\n|---|---|---|---|\n")
	for _, f := range h.Flags {
		name := "-" + f.Name
		if f.Arg != "" {
			name += " " + f.Arg
		}
		env := ""
		if f.Env != "" {
			env = "`" + f.Env + "`"
		}
		def := ""
		if f.Default != "" {
			def = "`" + f.Default + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", name, env, def, cell(f.Usage))
	}
	if len(h.Deprecated) > 0 {
		var olds []string
		for o := range h.Deprecated {
			olds = append(olds, o)
		}
		sort.Strings(olds)
		b.WriteString("\nDeprecated names (they warn, and go in the next release): ")
		for i, o := range olds {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "`-%s` (now `-%s`)", o, h.Deprecated[o])
		}
		b.WriteString(".\n")
	}
	return b.String()
}

// cell escapes s for a Markdown table cell.
func cell(s string) string {
	return strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;").Replace(s)
}

// Replace returns doc with the text between <!-- flags name --> and
// <!-- /flags name --> replaced by table.
func Replace(doc, name, table string) (string, error) {
	begin, end := "<!-- flags "+name+" -->\n", "<!-- /flags "+name+" -->"
	i := strings.Index(doc, begin)
	j := strings.Index(doc, end)
	if i < 0 || j < i {
		return doc, fmt.Errorf("flagdoc: no %q ... %q markers", strings.TrimSpace(begin), end)
	}
	return doc[:i+len(begin)] + table + doc[j:], nil
}

// Section returns the text between name's markers.
func Section(doc, name string) (string, error) {
	begin, end := "<!-- flags "+name+" -->\n", "<!-- /flags "+name+" -->"
	i := strings.Index(doc, begin)
	j := strings.Index(doc, end)
	if i < 0 || j < i {
		return "", fmt.Errorf("flagdoc: no %q ... %q markers", strings.TrimSpace(begin), end)
	}
	return doc[i+len(begin) : j], nil
}
