package spec

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// modeWord matches a mode name as a word of a string (not inside
// seqd_herd_* or a longer name).
var modeWord = func() *regexp.Regexp {
	var alt []string
	for _, m := range Modes {
		alt = append(alt, regexp.QuoteMeta(m))
	}
	return regexp.MustCompile(`(?:^|[^A-Za-z0-9_-])(` + strings.Join(alt, "|") + `)(?:$|[^A-Za-z0-9_-])`)
}()

// modeConst maps the names of the mode constants to their modes.
var modeConst = map[string]string{}

func init() {
	for _, m := range Modes {
		// ModeSpecS0, ModeHERD, ...: found by value, so that a mode added
		// to the table is covered without editing this test.
		for name, v := range map[string]string{"ModeSpecS0": ModeSpecS0, "ModeHERD": ModeHERD, "ModeAtomics": ModeAtomics,
			"ModeFaSST": ModeFaSST, "ModeDaRPC": ModeDaRPC, "ModeRFP": ModeRFP} {
			if v == m {
				modeConst[name] = m
			}
		}
	}
}

// modesIn returns the distinct modes a string names as words.
func modesIn(s string) map[string]bool {
	got := map[string]bool{}
	// Overlapping matches share a separator: scan from each match's name.
	for i := 0; i < len(s); {
		loc := modeWord.FindStringSubmatchIndex(s[i:])
		if loc == nil {
			break
		}
		got[s[i+loc[2]:i+loc[3]]] = true
		i += loc[3]
	}
	return got
}

// modeOf returns the mode e names: a string literal that is a mode name, or
// a mode constant (spec.ModeHERD, ModeHERD); "" otherwise.
func modeOf(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.BasicLit:
		if x.Kind == token.STRING {
			if s, err := strconv.Unquote(x.Value); err == nil && slicesContains(Modes, s) {
				return s
			}
		}
	case *ast.Ident:
		return modeConst[x.Name]
	case *ast.SelectorExpr:
		if p, ok := x.X.(*ast.Ident); ok && p.Name == "spec" {
			return modeConst[x.Sel.Name]
		}
	case *ast.ParenExpr:
		return modeOf(x.X)
	}
	return ""
}

func slicesContains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// isLiteral reports whether e is a constant a fact table would hold
// (true, "why", 3), not code (a function, a call).
func isLiteral(e ast.Expr) bool {
	switch x := e.(type) {
	case *ast.BasicLit:
		return true
	case *ast.Ident:
		return x.Name == "true" || x.Name == "false" || x.Name == "nil"
	case *ast.CompositeLit:
		return true
	case *ast.BinaryExpr:
		return isLiteral(x.X) && isLiteral(x.Y)
	}
	return false
}

// handLists returns, for one parsed file, every place that lists two or
// more modes by hand: a string naming two modes, a slice or array literal
// of two mode names, a map literal keyed by two modes whose values are
// literals (a fact table: facts belong in ModeTable; a map from modes to
// functions is a dispatch table, not a list), a case clause or a chain of
// && and || comparing with two modes, or a const or var block defining
// two names as modes (an alias table).
func handLists(fset *token.FileSet, f *ast.File) []string {
	var found []string
	report := func(n ast.Node, what string, ms map[string]bool) {
		var names []string
		for _, m := range Modes {
			if ms[m] {
				names = append(names, m)
			}
		}
		found = append(found, fset.Position(n.Pos()).String()+": "+what+" names "+strings.Join(names, ", "))
	}
	seen := map[ast.Node]bool{} // && chains already reported through their root
	ast.Inspect(f, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.GenDecl:
			if x.Tok != token.CONST && x.Tok != token.VAR {
				break
			}
			ms := map[string]bool{}
			for _, sp := range x.Specs {
				if vs, ok := sp.(*ast.ValueSpec); ok {
					for _, v := range vs.Values {
						if m := modeOf(v); m != "" {
							ms[m] = true
						}
					}
				}
			}
			if len(ms) >= 2 {
				report(x, "a declaration block", ms)
			}
		case *ast.BasicLit:
			if x.Kind != token.STRING {
				break
			}
			s, err := strconv.Unquote(x.Value)
			if err != nil {
				break
			}
			if ms := modesIn(s); len(ms) >= 2 {
				report(x, "a string", ms)
			}
		case *ast.CompositeLit:
			ms, mapped := map[string]bool{}, true
			for _, el := range x.Elts {
				if kv, ok := el.(*ast.KeyValueExpr); ok {
					if m := modeOf(kv.Key); m != "" {
						ms[m] = true
						mapped = mapped && isLiteral(kv.Value)
					}
					continue
				}
				if m := modeOf(el); m != "" {
					ms[m] = true
				}
			}
			if len(ms) >= 2 && mapped {
				report(x, "a composite literal", ms)
			}
		case *ast.CaseClause:
			ms := map[string]bool{}
			for _, e := range x.List {
				if m := modeOf(e); m != "" {
					ms[m] = true
				}
			}
			if len(ms) >= 2 {
				report(x, "a case", ms)
			}
		case *ast.BinaryExpr:
			if seen[x] || (x.Op != token.LAND && x.Op != token.LOR) {
				break
			}
			ms := map[string]bool{}
			var walk func(e ast.Expr)
			walk = func(e ast.Expr) {
				switch y := e.(type) {
				case *ast.ParenExpr:
					walk(y.X)
				case *ast.BinaryExpr:
					switch y.Op {
					case token.LAND, token.LOR:
						seen[y] = true
						walk(y.X)
						walk(y.Y)
					case token.EQL, token.NEQ:
						for _, side := range []ast.Expr{y.X, y.Y} {
							if m := modeOf(side); m != "" {
								ms[m] = true
							}
						}
					}
				}
			}
			walk(x)
			if len(ms) >= 2 {
				report(x, "a condition", ms)
			}
		}
		return true
	})
	return found
}

// TestNoHandWrittenModeList (issue 28): mode names were listed by hand in
// many places, each covering some of the modes (the admin and modes
// alias tables, loadgen's wire check, seqd -h's "spec-s0, herd or
// atomics"). Every Go file of the module, tests included, is parsed; the
// only list of modes may be ModeTable (modes.go). A test's table naming
// one mode per row is not a list.
func TestNoHandWrittenModeList(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("the module root %s has no go.mod: %v", root, err)
	}
	fset := token.NewFileSet()
	files, refs := 0, 0
	var found []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			if path != root {
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir // another module
				}
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		if rel == filepath.Join("spec", "modes.go") || rel == filepath.Join("spec", "modelist_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		ast.Inspect(f, func(n ast.Node) bool {
			if e, ok := n.(ast.Expr); ok && modeOf(e) != "" {
				refs++
			}
			return true
		})
		found = append(found, handLists(fset, f)...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Not vacuous: the scan saw the module and its uses of the modes.
	if files < 100 || refs < 50 {
		t.Fatalf("scanned %d files with %d mode references: not the module", files, refs)
	}
	for _, f := range found {
		t.Errorf("a mode list written by hand (derive it from spec.ModeTable): %s", f)
	}
	t.Logf("scanned %d files, %d mode references", files, refs)
}

// TestHandListsDetector: the scanner flags each kind of hand-written list
// and leaves one mode per row, and a dispatch map, alone.
func TestHandListsDetector(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want int
	}{
		{`var x = "mode: spec-s0, herd or atomics"`, 1},
		{`var x = []string{spec.ModeSpecS0, spec.ModeHERD}`, 1},
		{`var x = []string{"fasst", "rfp"}`, 1},
		{`var x = map[string]string{spec.ModeAtomics: "no", ModeHERD: "no"}`, 1},
		{`func f(m string) bool { return m != spec.ModeSpecS0 && m != spec.ModeHERD }`, 1},
		{`func f(m string) { switch m { case "darpc", "rfp": } }`, 1},
		{`var x = "seqd_herd_drops_total and seqd_rfp_drops_total"`, 0},
		{`var x = []struct{ m string; n int }{{"herd", 1}, {"rfp", 2}}`, 0},
		{`var x = map[string]func(){spec.ModeHERD: f, spec.ModeRFP: g}`, 0},
		{`var x = "herd"`, 0},
		{"const (\n\tA = spec.ModeSpecS0\n\tB = spec.ModeHERD\n)", 1},
		{"const (\n\tA = spec.ModeSpecS0\n\tB = 3\n)", 0},
		{`func f(m string) bool { return m == spec.ModeHERD || n == 3 }`, 0},
	} {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, "x.go", "package x\n"+tc.src, 0)
		if err != nil {
			t.Fatalf("%s: %v", tc.src, err)
		}
		if got := handLists(fset, f); len(got) != tc.want {
			t.Errorf("%s: found %q, want %d", tc.src, got, tc.want)
		}
	}
}
