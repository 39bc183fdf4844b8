package modes

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/seqd/seqd/spec"
)

// TestEveryModeRunsConformance: every mode of spec.ModeTable has a
// factory here, and the package of that factory has a test calling
// dataplanetest.Run for that mode (Harness.Name), so a mode added
// without passing the conformance suite fails make test. The package is
// found from the factory itself, not from a list.
func TestEveryModeRunsConformance(t *testing.T) {
	const module = "github.com/seqd/seqd/"
	consts := specConsts(t)
	for _, m := range spec.Modes {
		f := registry[m]
		if f == nil {
			t.Errorf("mode %s has no factory in modes.registry", m)
			continue
		}
		fn := runtime.FuncForPC(reflect.ValueOf(f).Pointer()).Name() // github.com/seqd/seqd/fasst.Start
		pkg := fn[:strings.LastIndex(fn, ".")]
		if !strings.HasPrefix(pkg, module) {
			t.Errorf("mode %s: factory %s is outside the module", m, fn)
			continue
		}
		dir := filepath.Join("..", strings.TrimPrefix(pkg, module))
		if !callsRun(t, dir, m, consts) {
			t.Errorf("mode %s: no test in %s calls dataplanetest.Run with Harness.Name %q (the mode conformance suite)", m, dir, m)
		}
	}
}

// specConsts are package spec's string constants (ModeFaSST: "fasst").
func specConsts(t *testing.T) map[string]string {
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join("..", "spec", "modes.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		if v, ok := n.(*ast.ValueSpec); ok {
			for i, name := range v.Names {
				if i < len(v.Values) {
					if l, ok := v.Values[i].(*ast.BasicLit); ok && l.Kind == token.STRING {
						consts[name.Name] = strings.Trim(l.Value, "`\"")
					}
				}
			}
		}
		return true
	})
	return consts
}

// harnessName is the mode a dataplanetest.Harness literal names: its
// Name, a string or a spec constant.
func harnessName(e ast.Expr, consts map[string]string) string {
	if u, ok := e.(*ast.UnaryExpr); ok {
		e = u.X
	}
	lit, ok := e.(*ast.CompositeLit)
	if !ok {
		return ""
	}
	for _, el := range lit.Elts {
		kv, ok := el.(*ast.KeyValueExpr)
		if k, _ := kv.Key.(*ast.Ident); !ok || k == nil || k.Name != "Name" {
			continue
		}
		switch v := kv.Value.(type) {
		case *ast.BasicLit:
			return strings.Trim(v.Value, "`\"")
		case *ast.SelectorExpr:
			if x, ok := v.X.(*ast.Ident); ok && x.Name == "spec" {
				return consts[v.Sel.Name]
			}
		}
	}
	return ""
}

// callsRun reports whether a _test.go file of dir calls dataplanetest.Run
// for mode.
func callsRun(t *testing.T, dir, mode string, consts map[string]string) bool {
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil || len(files) == 0 {
		return false
	}
	for _, name := range files {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		ast.Inspect(f, func(n ast.Node) bool {
			if c, ok := n.(*ast.CallExpr); ok {
				if s, ok := c.Fun.(*ast.SelectorExpr); ok && s.Sel.Name == "Run" {
					if x, ok := s.X.(*ast.Ident); ok && x.Name == "dataplanetest" && len(c.Args) == 2 &&
						harnessName(c.Args[1], consts) == mode {
						found = true
					}
				}
			}
			return !found
		})
		if found {
			return true
		}
	}
	return false
}
