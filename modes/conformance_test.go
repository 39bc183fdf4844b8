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
// dataplanetest.Run, so a mode added without passing the conformance
// suite fails make test. The package is found from the factory itself,
// not from a list.
func TestEveryModeRunsConformance(t *testing.T) {
	const module = "github.com/seqd/seqd/"
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
		if !callsRun(t, dir) {
			t.Errorf("mode %s: no test in %s calls dataplanetest.Run (the mode conformance suite)", m, dir)
		}
	}
}

// callsRun reports whether a _test.go file of dir calls dataplanetest.Run.
func callsRun(t *testing.T, dir string) bool {
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
					if x, ok := s.X.(*ast.Ident); ok && x.Name == "dataplanetest" {
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
